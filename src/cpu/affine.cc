// SPDX-License-Identifier: Apache-2.0
#include "cpu/affine.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/aligned_array.h"
#include "core/parallel.h"
#include "cpu/kernels/affine.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::AffineTerms;

AffineTerms TermsOf(const AffineParams& p) {
  if (p.center) return AffineTerms::kCenterScaleShift;  // with scale and shift
  if (p.scale && p.shift) return AffineTerms::kScaleShift;
  if (p.scale) return AffineTerms::kScale;
  if (p.shift) return AffineTerms::kShift;
  return AffineTerms::kCopy;
}

// Writes channels [first, first + count) (values[j]: channel first + j) of a row of
// period + lanes floats that repeats `base` channels' values, each used `repeat`
// times in a row, where period is the smallest multiple of base * repeat that is
// >= lanes: any run of `lanes` parameters is then one contiguous load.
void PlaceRepRowPiece(const float* values, int64_t first, int64_t count, int64_t base,
                      int64_t repeat, int64_t period, int64_t lanes, float* row) {
  const int64_t len = period + lanes;
  for (int64_t at = first * repeat; at < len; at += base * repeat) {
    if (repeat == 1) {  // channels-last: whole copies of the values (a hot path for short calls)
      const int64_t n = std::min(count, len - at);
      std::memcpy(row + at, values, static_cast<size_t>(n) * sizeof(float));
      continue;
    }
    for (int64_t j = 0; j < count && at + j * repeat < len; ++j) {
      std::fill_n(row + at + j * repeat, std::min(repeat, len - at - j * repeat), values[j]);
    }
  }
}

// The whole row of `base` values.
void BuildRepRow(const float* values, int64_t base, int64_t repeat, int64_t period, int64_t lanes,
                 float* row) {
  PlaceRepRowPiece(values, 0, base, base, repeat, period, lanes, row);
}

// The parameter period of a row: lcm(cycle, lanes) when that is short, so every run
// of vectors starts at a lane multiple and wraps exactly; otherwise the smallest
// multiple of cycle that holds a vector (runs then straddle the wrap now and then).
int64_t PeriodFor(int64_t cycle, int64_t lanes) {
  const int64_t lcm = cycle / std::gcd(cycle, lanes) * lanes;
  if (lcm <= kMaxLcmPeriod) return lcm;
  return cycle * ((lanes + cycle - 1) / cycle);
}

// Blocks come from the shape alone: 32K elements, or for smaller tensors 1/64 of
// the tensor (at least 1K elements) so that a few threads still split it evenly.
int64_t BlockElems(int64_t numel) {
  int64_t block = (numel + kMinAffineBlocks - 1) / kMinAffineBlocks;
  block = (block + 63) & ~int64_t{63};  // whole cache lines
  if (block < kMinAffineBlockElems) block = kMinAffineBlockElems;
  if (block > kAffineBlockElems) block = kAffineBlockElems;
  return block;
}

// Tensors too small to repay waking a thread stay on the calling thread.
bool RunsOnCallingThread(int64_t bytes_moved) {
  return bytes_moved < kMinParallelAffineBytes;
}

// Calls range(begin, end) on runs of whole blocks, as the backend partitions them.
void RunBlocks(const normkit_context& context, int64_t numel, int64_t bytes_moved,
               FunctionRef<void(int64_t, int64_t)> range) {
  if (RunsOnCallingThread(bytes_moved)) return range(0, numel);
  const int64_t block = BlockElems(numel);
  const int64_t tasks = (numel + block - 1) / block;
  ParallelForRuns(context, tasks, [&](int64_t first, int64_t last) {
    range(first * block, std::min(last * block, numel));
  });
}

// The same blocks in one run per thread, for ranges that each pay a fixed cost (a
// fold of all C channels): a TBB partition may cut RunBlocks' tasks into many runs.
// Which thread takes which blocks never changes an affine's bits.
void RunBlocksOnePerThread(const normkit_context& context, int64_t numel, int64_t bytes_moved,
                           FunctionRef<void(int64_t, int64_t)> range) {
  if (RunsOnCallingThread(bytes_moved)) return range(0, numel);
  const int64_t block = BlockElems(numel);
  const int64_t tasks = (numel + block - 1) / block;
  const int64_t runs = std::min<int64_t>(context.num_threads, tasks);
  ParallelFor(context, runs, [&](int64_t t) {
    range(t * tasks / runs * block, std::min((t + 1) * tasks / runs * block, numel));
  });
}

// Batch-norm parameters folded for the planes or rows one range reads. Folded by the
// thread that reads them, they need not cross cores, and the threads split the fold
// of channels-first tensors (on one thread, a fifth of a 1x1024x7x7 batch norm). On
// the stack up to kStackChannels (12 KiB, beside 50 KiB of rows: threads of embedding
// apps may have 128 KiB of stack), on the heap beyond (only before a loop: loops fold
// in pieces). Centered: shift is beta and center the running mean, for
// (x - center) * scale + shift.
class FoldedParams {
 public:
  // Channels it holds on the stack; parallel loops never fold more at once, so that
  // they never allocate.
  static constexpr int64_t kStackChannels = 1024;

  // Channels (first + j) % C for j < count: at most two runs of the C channels.
  FoldedParams(const BatchNormParams& bn, bool centered, int64_t C, int64_t first, int64_t count) {
    float* out = on_stack_;
    if (count > kStackChannels) {
      on_heap_.resize(3 * static_cast<size_t>(count));
      out = on_heap_.data();
    }
    scale_ = out;
    shift_ = out + count;
    center_ = centered ? out + 2 * count : nullptr;
    const int64_t head = std::min(count, C - first);
    FoldRun(bn, first, head, 0);
    if (count > head) FoldRun(bn, 0, count - head, head);
  }
  const float* scale() const { return scale_; }
  const float* shift() const { return shift_; }
  const float* center() const { return center_; }  // null unless centered

 private:
  // Channels [first, first + count) into the arrays from `at` on.
  void FoldRun(const BatchNormParams& bn, int64_t first, int64_t count, int64_t at) {
    const BatchNormParams run{bn.gamma ? bn.gamma + first : nullptr,
                              bn.beta ? bn.beta + first : nullptr, bn.mean + first, bn.var + first,
                              bn.eps};
    cpu::BatchNormScaleShift(count, run, scale_ + at, shift_ + at);
    if (center_ == nullptr) return;
    std::copy(run.mean, run.mean + count, center_ + at);
    if (run.beta) {
      std::copy(run.beta, run.beta + count, shift_ + at);
    } else {
      std::fill(shift_ + at, shift_ + at + count, 0.0f);
    }
  }

  alignas(64) float on_stack_[3 * kStackChannels];
  std::vector<float> on_heap_;
  float* scale_;
  float* shift_;
  float* center_;
};

}  // namespace

void Affine(const normkit_context& context, const TensorView& x, const TensorView& y,
            const AffineParams& params) {
  const bool half_storage = x.dtype != NORMKIT_DTYPE_FLOAT32 || y.dtype != NORMKIT_DTYPE_FLOAT32;
  if (half_storage && !params.fold_from && !(params.scale && params.shift)) {
    // The half-storage kernels apply both terms: an absent scale is 1 and an absent shift
    // -0 (x * 1 + -0 is x, -0 included; x * s + -0 is x * s), the same results.
    const int64_t count = params.per_sample ? x.batch * x.channels : x.channels;
    std::vector<float> ones, zeros;
    AffineParams both = params;
    if (!both.scale) {
      ones.assign(static_cast<size_t>(count), 1.0f);
      both.scale = ones.data();
    }
    if (!both.shift) {
      zeros.assign(static_cast<size_t>(count), -0.0f);
      both.shift = zeros.data();
    }
    return Affine(context, x, y, both);
  }
  const auto* xd = static_cast<const char*>(x.data);
  auto* yd = static_cast<char*>(y.data);
  const kernels::Storage xs = kernels::StorageOf(x.dtype), ys = kernels::StorageOf(y.dtype);
  const int64_t x_elem = kernels::StorageBytes(xs), y_elem = kernels::StorageBytes(ys);
  const int64_t moved = x.bytes + y.bytes;
  const bool fold = params.fold_from != nullptr;
  const AffineTerms terms = !fold             ? TermsOf(params)
                            : params.centered ? AffineTerms::kCenterScaleShift
                                              : AffineTerms::kScaleShift;
  const bool stream = x.data != y.data && y.bytes >= kStreamingStoreBytes;
  const int64_t lanes = static_cast<int64_t>(kernels::AffineLanes());
  const int64_t N = x.batch, C = x.channels, S = x.spatial;

  // Channels-first planes of a vector or more: broadcast one scalar per plane
  // (spliced where a vector crosses planes). Shorter planes use a periodic row of
  // C * S parameters when it stays small
  // (per-sample parameters would need one row per sample, as large as the tensor).
  // The row is built per call, so it must also be small next to the tensor.
  const bool small_planes =
      S < lanes && !params.per_sample && C * S <= kMaxPeriodicRow && C * S * 8 <= x.numel;
  if (!x.channels_last() && !small_planes) {
    kernels::AffineBroadcastJob job{
        xd,    yd,     S,       params.per_sample ? N * C : C,  params.scale, params.shift,
        terms, stream, x.numel, x.bytes >= kStreamingStoreBytes};
    job.center = params.center;
    job.x_storage = xs;
    job.y_storage = ys;
    if (!fold) {
      RunBlocks(context, x.numel, moved,
                [&](int64_t b, int64_t e) { kernels::AffineBroadcast(job, b, e); });
      return;
    }
    // Each range folds the channels of its planes, from a plane whose first element
    // keeps the stores vector aligned, and runs as a tensor of those planes; a range
    // of more planes than FoldedParams holds on the stack goes in pieces of that many.
    const int64_t align = lanes / std::gcd(S, lanes);
    RunBlocks(context, x.numel, moved, [&](int64_t b, int64_t e) {
      for (int64_t piece = b; piece < e;) {
        const int64_t first = piece / S / align * align;
        const int64_t end = std::min(e, (first + FoldedParams::kStackChannels) * S);
        const int64_t count = std::min(C, (end - 1) / S + 1 - first);
        const FoldedParams folded(*params.fold_from, params.centered, C, first % C, count);
        kernels::AffineBroadcastJob local = job;
        local.x = xd + first * S * x_elem;
        local.y = yd + first * S * y_elem;
        local.param_count = count;
        local.scale = folded.scale();
        local.shift = folded.shift();
        local.center = folded.center();
        kernels::AffineBroadcast(local, piece - first * S, end - first * S);
        piece = end;
      }
    });
    return;
  }
  // Channels-last: parameter j of a sample's flat run is c = j % C. Tiny
  // channels-first planes: c = (j / S) % C, i.e. each value repeated S times.
  const int64_t repeat = x.channels_last() ? 1 : S;
  const int64_t period = PeriodFor(C * repeat, lanes);
  const int64_t row_len = period + lanes;
  const int64_t sample_elems = C * S;
  const bool in_cache = x.bytes <= kAffineRowsMaxBytes;
  const bool rows_per_load = in_cache && (x.data == y.data || x.bytes > kAffineRowsMinBytes);
  kernels::AffinePeriodicJob job{xd,      yd,      sample_elems, period, 0,
                                 nullptr, nullptr, terms,        stream, rows_per_load};
  job.in_cache = in_cache;
  job.from_memory = x.bytes >= kStreamingStoreBytes;
  job.x_storage = xs;
  job.y_storage = ys;
  if (row_len <= kLocalRepFloats) {
    // Each range builds the rows it reads on its own thread's stack, one sample's row
    // at a time. Built once by the calling thread, they crossed to every other core's
    // cache on each call: 1x256x14x14 NHWC affine took 4.0-5.1 us a call at 2 threads,
    // more than at 1 (3.8-4.0 us); built by each thread, 3.0-3.3 us.
    (fold ? RunBlocksOnePerThread : RunBlocks)(context, x.numel, moved, [&](int64_t b, int64_t e) {
      alignas(64) float scale_row[kLocalRepFloats];
      alignas(64) float shift_row[kLocalRepFloats];
      alignas(64) float center_row[kLocalRepFloats];
      kernels::AffinePeriodicJob local = job;
      const bool has_scale = fold || params.scale, has_shift = fold || params.shift;
      const bool has_center = (fold && params.centered) || params.center;
      local.scale_rep = has_scale ? scale_row : nullptr;
      local.shift_rep = has_shift ? shift_row : nullptr;
      local.center_rep = has_center ? center_row : nullptr;
      if (fold) {  // per channel: one row for the whole range, a stack's worth at a time
        for (int64_t c0 = 0; c0 < C; c0 += FoldedParams::kStackChannels) {
          const int64_t count = std::min(FoldedParams::kStackChannels, C - c0);
          const FoldedParams folded(*params.fold_from, params.centered, C, c0, count);
          PlaceRepRowPiece(folded.scale(), c0, count, C, repeat, period, lanes, scale_row);
          PlaceRepRowPiece(folded.shift(), c0, count, C, repeat, period, lanes, shift_row);
          if (has_center) {
            PlaceRepRowPiece(folded.center(), c0, count, C, repeat, period, lanes, center_row);
          }
        }
        kernels::AffinePeriodic(local, b, e);
        return;
      }
      for (int64_t i = b; i < e;) {
        const int64_t sample = i / sample_elems;
        const int64_t stop = params.per_sample ? std::min(e, (sample + 1) * sample_elems) : e;
        const int64_t r = params.per_sample ? sample : 0;
        if (i == b || params.per_sample) {
          if (params.scale) BuildRepRow(params.scale + r * C, C, repeat, period, lanes, scale_row);
          if (params.shift) BuildRepRow(params.shift + r * C, C, repeat, period, lanes, shift_row);
          if (params.center) {
            BuildRepRow(params.center + r * C, C, repeat, period, lanes, center_row);
          }
        }
        kernels::AffinePeriodic(local, i, stop);
        i = stop;
      }
    });
    return;
  }
  // Long rows (C over kLocalRepFloats): built once, shared by all threads.
  if (fold) {
    const FoldedParams folded(*params.fold_from, params.centered, C, 0, C);
    AffineParams given;
    given.scale = folded.scale();
    given.shift = folded.shift();
    given.center = folded.center();
    Affine(context, x, y, given);
    return;
  }
  const int64_t rows = params.per_sample ? N : 1;
  // Parameter rows aligned for any vector load of their lanes.
  const auto alloc = [&](bool needed) {
    return needed ? AllocateAligned<float>(static_cast<size_t>(rows * row_len))
                  : AlignedArray<float>();
  };
  auto scale_rep = alloc(params.scale != nullptr);
  auto shift_rep = alloc(params.shift != nullptr);
  auto center_rep = alloc(params.center != nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    if (params.scale) {
      BuildRepRow(params.scale + r * C, C, repeat, period, lanes, &scale_rep[r * row_len]);
    }
    if (params.shift) {
      BuildRepRow(params.shift + r * C, C, repeat, period, lanes, &shift_rep[r * row_len]);
    }
    if (params.center) {
      BuildRepRow(params.center + r * C, C, repeat, period, lanes, &center_rep[r * row_len]);
    }
  }
  job.rep_stride = params.per_sample ? row_len : 0;
  job.scale_rep = scale_rep.get();
  job.shift_rep = shift_rep.get();
  job.center_rep = center_rep.get();
  RunBlocks(context, x.numel, moved,
            [&](int64_t b, int64_t e) { kernels::AffinePeriodic(job, b, e); });
}

}  // namespace cpu
}  // namespace normkit
