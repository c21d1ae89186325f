// SPDX-License-Identifier: Apache-2.0
// The shift-sum family on bfloat16 / float16 tensors. Along W the forward, adjoint,
// pseudo-inverses and GAP step read and write x as stored (ShiftSum*Stored, shift_sum.cc
// and shift_sum_gap.cc). The others (along H; shift, unshift): the float32 drivers run on
// pieces of the call (slices of rows along W, chunks of whole samples along H), each tensor of
// the piece widened into a float scratch that stays in cache, its output rounded back
// to nearest even. So a half call reads and writes its own bytes in DRAM once, and
// gives bitwise the float32 call on its widened values, rounded (every y row is one
// task summing channels in a fixed order, whatever the rows around it). Not the last
// word on speed: the piece passes through the cache three times (the storage / math
// split of the row kernels does not), see docs/performance.md.
#include <algorithm>
#include <utility>
#include <vector>

#include "core/aligned_array.h"
#include "core/parallel.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/memory_plan.h"
#include "cpu/shift_sum.h"
#include "cpu/shift_sum_rows.h"
#include "hwy/cache_control.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::Storage;
using shift_sum_rows::kSharedNormalizerBytes;

// Float scratch per chunk: small enough to stay in the last-level cache between the
// widening, the operator and the rounding, large enough that a chunk's three parallel
// loops amortize their start (seed 003's samples are 7.3 MB in float: one per chunk).
constexpr int64_t kChunkBytes = int64_t{8} << 20;

// Elements per task of the conversion loops.
constexpr int64_t kConvertElems = int64_t{32} << 10;

// One tensor of the call: where sample b starts, and its float view for a chunk.
struct Operand {
  StoredTensor tensor;
  int64_t per_sample = 0;  // elements
  bool read = false, written = false;
  AlignedArray<float> scratch;  // half: a chunk of the tensor in float

  bool half() const { return tensor.storage != Storage::kFloat32; }
  char* Sample(int64_t b) const {
    return static_cast<char*>(tensor.data) + b * per_sample * kernels::StorageBytes(tensor.storage);
  }
};

void Widen(const normkit_context& ctx, const Operand& o, int64_t b0, int64_t samples) {
  const int64_t n = samples * o.per_sample;
  const char* src = o.Sample(b0);
  const int64_t bytes = kernels::StorageBytes(o.tensor.storage);
  ParallelFor(ContextForBytes(ctx, n * (bytes + 4)), (n + kConvertElems - 1) / kConvertElems,
              [&](int64_t t) {
                const int64_t i = t * kConvertElems;
                kernels::WidenToFloat(src + i * bytes, o.tensor.storage,
                                      std::min(kConvertElems, n - i), o.scratch.get() + i);
              });
}

void Narrow(const normkit_context& ctx, const Operand& o, int64_t b0, int64_t samples,
            bool stream) {
  const int64_t n = samples * o.per_sample;
  char* dst = o.Sample(b0);
  const int64_t bytes = kernels::StorageBytes(o.tensor.storage);
  ParallelFor(ContextForBytes(ctx, n * (bytes + 4)), (n + kConvertElems - 1) / kConvertElems,
              [&](int64_t t) {
                const int64_t i = t * kConvertElems;
                kernels::NarrowFromFloat(o.scratch.get() + i, std::min(kConvertElems, n - i),
                                         dst + i * bytes, o.tensor.storage, stream);
                if (stream) hwy::FlushStream();
              });
}

// The float32 operator of `call` on float tensors.
void RunFloat(const normkit_context& ctx, const ShiftSumStoredCall& call,
              const ShiftSumProblem<float>& p, const float* normalizer, const float* src,
              float* dst, ShiftSumScratch<float>* scratch) {
  switch (call.op) {
    case ShiftSumOp::kForward: return ShiftSumForward(ctx, p, src, dst, scratch);
    case ShiftSumOp::kAdjoint: return ShiftSumAdjoint(ctx, p, src, dst, scratch);
    case ShiftSumOp::kPinv: return ShiftSumPinv(ctx, p, call.mode, normalizer, src, dst, scratch);
    case ShiftSumOp::kGapStep:
      return ShiftSumGapStep(ctx, p, call.lambda, call.gamma, normalizer, src, dst, scratch);
    case ShiftSumOp::kShift: return Shift(ctx, p, src, dst, scratch);
    case ShiftSumOp::kUnshift: return Unshift(ctx, p, src, dst, scratch);
  }
}

// Whether the operator uses Phi_s (computed when not given).
bool UsesNormalizer(const ShiftSumStoredCall& call) {
  return (call.op == ShiftSumOp::kPinv && call.mode == PinvMode::kMoorePenrose) ||
         call.op == ShiftSumOp::kGapStep;
}

// Samples [b0, b0 + samples) of p: per-sample masks start at sample b0.
ShiftSumProblem<float> Samples(const ShiftSumProblem<float>& p, int64_t b0, int64_t samples) {
  ShiftSumProblem<float> sub = p;
  sub.B = samples;
  if (p.mask_kind == ShiftMask::kBCHW) sub.mask += b0 * p.C * p.H * p.W;
  if (p.mask_kind == ShiftMask::kPhiBCHW) sub.mask += b0 * p.C * p.H_out * p.W_out;
  return sub;
}

// Whole samples a chunk at a time (along H, where a y row reads C x rows of a sample).
// Elements per sample of the tensor `op` reads and of the one it writes.
std::pair<int64_t, int64_t> SampleElems(const ShiftSumProblem<float>& p, ShiftSumOp op) {
  const int64_t x_elems = p.C * p.H * p.W, y_elems = p.H_out * p.W_out;
  const int64_t xs_elems = p.C * y_elems;
  switch (op) {
    case ShiftSumOp::kForward: return {x_elems, y_elems};
    case ShiftSumOp::kShift: return {x_elems, xs_elems};
    case ShiftSumOp::kUnshift: return {xs_elems, x_elems};
    case ShiftSumOp::kAdjoint:
    case ShiftSumOp::kPinv:
    case ShiftSumOp::kGapStep: return {y_elems, x_elems};
  }
  return {0, 0};
}

void SampleChunks(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                  const ShiftSumStoredCall& call) {
  const int64_t y_elems = p.H_out * p.W_out;
  const auto [in_elems, out_elems] = SampleElems(p, call.op);
  Operand in, out;
  in.tensor = call.in;
  in.per_sample = in_elems;
  in.read = true;
  out.tensor = call.out;
  out.per_sample = out_elems;
  out.written = true;
  out.read = call.op == ShiftSumOp::kGapStep;  // x in place

  // Everything is allocated here, before any output is written: the chunk scratch, a
  // normalizer shared by the chunks, and (in the first chunk, the largest) the drivers'.
  const int64_t sample_bytes = 4 * ((in.half() ? in_elems : 0) + (out.half() ? out_elems : 0));
  const int64_t chunk =
      std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(sample_bytes, 1), 1, p.B);
  for (Operand* o : {&in, &out}) {
    if (o->half()) o->scratch = AllocateAligned<float>(static_cast<size_t>(chunk * o->per_sample));
  }
  const float* normalizer = call.normalizer;
  std::vector<float> table;
  if (UsesNormalizer(call) && !normalizer && !p.PerSampleMask() && chunk < p.B &&
      y_elems * int64_t{sizeof(float)} <= kSharedNormalizerBytes) {
    // The chunks share Phi_s: computed once rather than once per chunk.
    table.resize(static_cast<size_t>(y_elems));
    ShiftSumNormalizer(ctx, p, table.data());
    normalizer = table.data();
  }
  ShiftSumScratch<float> scratch;
  const bool stream = out.half() && p.B * out_elems * kernels::StorageBytes(out.tensor.storage) >=
                                        kStreamingStoreBytes;

  for (int64_t b0 = 0; b0 < p.B; b0 += chunk) {
    const int64_t samples = std::min(chunk, p.B - b0);
    const ShiftSumProblem<float> sub = Samples(p, b0, samples);
    for (const Operand* o : {&in, &out}) {
      if (o->half() && o->read) Widen(ctx, *o, b0, samples);
    }
    const auto view = [&](const Operand& o) {
      return o.half() ? o.scratch.get() : reinterpret_cast<float*>(o.Sample(b0));
    };
    const float* src = view(in);
    float* dst = view(out);
    const float* norm = normalizer && p.PerSampleMask() ? normalizer + b0 * y_elems : normalizer;
    RunFloat(ctx, call, sub, norm, src, dst, &scratch);
    if (out.half()) Narrow(ctx, out, b0, samples, stream);
  }
}

// Along W, x rows (b, :, h), xs rows (b, :, h) and y row (b, h) make a problem of their
// own. So a slice of rows of one sample is one task: its tensors widened into the
// worker's float buffers, the float32 operator run on them on one thread, its output
// rounded back. Unlike sample chunks, a slice is small whatever C is: C = 512 went from
// 0.07-0.16 of a memcpy of its bytes to 0.20-0.81, and the two-thread rows no longer
// wait on a chunk's parallel loops. Float32 tensors of a mixed call are copied like
// half ones (an NCHW x slice is C runs, not one array).
// Slice size, seed 003's 16x28x256x256 bf16, 3 interleaved rounds, medians over 24 rows:
// 256 KiB lost the forward (0.29-0.38 vs 0.37-0.47 with sample chunks), 4 MiB the
// two-thread adjoint (0.39); 1 MiB was at or above the chunks but the NCHW forward
// (0.32-0.33 vs 0.37-0.39).
constexpr int64_t kSliceBytes = int64_t{1} << 20;  // float bytes of a slice's tensors

// Rows [h0, h0 + rows) of sample b of one tensor: `runs` runs of rows * row_elems
// elements, run k at the sample's start + k * run_stride + h0 * row_elems; in the
// slice's float buffer run k starts at k * rows * row_elems.
struct RowRuns {
  StoredTensor tensor;
  int64_t sample = 0;  // elements
  int64_t runs = 1, run_stride = 0, row_elems = 0;
  bool read = false, written = false;

  // Where run k of sample b's rows from h0 starts (the tensor's data is writable: `out`).
  char* At(int64_t b, int64_t k, int64_t h0) const {
    const int64_t i = b * sample + k * run_stride + h0 * row_elems;
    return static_cast<char*>(tensor.data) + i * kernels::StorageBytes(tensor.storage);
  }
  int64_t Elems(int64_t rows) const { return runs * rows * row_elems; }
};

// An x-shaped tensor (x: width W; the shifted stack xs: width W').
RowRuns XRuns(const StoredTensor& t, const ShiftSumProblem<float>& p, int64_t width) {
  RowRuns r;
  r.tensor = t;
  r.sample = p.C * p.H * width;
  if (p.channels_last) {
    r.row_elems = width * p.C;
  } else {
    r.runs = p.C;
    r.run_stride = p.H * width;
    r.row_elems = width;
  }
  return r;
}

RowRuns YRuns(const StoredTensor& t, const ShiftSumProblem<float>& p) {
  RowRuns r;
  r.tensor = t;
  r.sample = p.H_out * p.W_out;
  r.row_elems = p.W_out;
  return r;
}

// Rows [h0, h0 + rows) of sample b of p, on compact float rows; the masks keep their
// planes.
ShiftSumProblem<float> RowSlice(const ShiftSumProblem<float>& p, int64_t b, int64_t h0,
                                int64_t rows) {
  ShiftSumProblem<float> s = p;
  s.B = 1;
  s.H = s.H_out = rows;
  s.mask_plane = shift_sum_rows::MaskPlane(p);
  const int64_t mask_row = p.PhiMask() ? p.W_out : p.W;
  if (s.mask) s.mask += (p.PerSampleMask() ? b * p.C * s.mask_plane : 0) + h0 * mask_row;
  return s;
}

struct SliceWorker {
  AlignedArray<float> in, out;
  ShiftSumScratch<float> scratch;
};

void RowSlices(const normkit_context& ctx, const ShiftSumProblem<float>& p,
               const ShiftSumStoredCall& call) {
  RowRuns in, out;
  switch (call.op) {
    case ShiftSumOp::kForward:
      in = XRuns(call.in, p, p.W);
      out = YRuns(call.out, p);
      break;
    case ShiftSumOp::kShift:
      in = XRuns(call.in, p, p.W);
      out = XRuns(call.out, p, p.W_out);
      break;
    case ShiftSumOp::kUnshift:
      in = XRuns(call.in, p, p.W_out);
      out = XRuns(call.out, p, p.W);
      break;
    case ShiftSumOp::kAdjoint:
    case ShiftSumOp::kPinv:
    case ShiftSumOp::kGapStep:
      in = YRuns(call.in, p);
      out = XRuns(call.out, p, p.W);
      break;
  }
  in.read = true;
  out.written = true;
  out.read = call.op == ShiftSumOp::kGapStep;  // x in place

  const int64_t row_bytes = 4 * (in.Elems(1) + out.Elems(1));
  const int64_t rows = std::clamp<int64_t>(kSliceBytes / row_bytes, 1, p.H);
  const int64_t slices = (p.H + rows - 1) / rows;
  const int64_t tasks = p.B * slices;
  const int64_t stored_bytes = p.B * (in.sample * kernels::StorageBytes(in.tensor.storage) +
                                      out.sample * kernels::StorageBytes(out.tensor.storage));
  const normkit_context& loop = ContextForBytes(ctx, stored_bytes);
  const bool stream =
      p.B * out.sample * kernels::StorageBytes(out.tensor.storage) >= kStreamingStoreBytes;

  // Phi_s: given, or computed once here for the samples to share, or (per-sample masks,
  // one sample, a table too large) row by row inside each slice as the float call does.
  const float* normalizer = call.normalizer;
  std::vector<float> table;
  const int64_t y_elems = p.H_out * p.W_out;
  if (UsesNormalizer(call) && !normalizer && !p.PerSampleMask() && p.B >= 2 &&
      y_elems * int64_t{sizeof(float)} <= kSharedNormalizerBytes) {
    table.resize(static_cast<size_t>(y_elems));
    ShiftSumNormalizer(ctx, p, table.data());
    normalizer = table.data();
  }

  const auto run = [&](int64_t t, SliceWorker& w, bool dry) {
    const int64_t b = t / slices, h0 = (t % slices) * rows;
    const int64_t n = std::min(rows, p.H - h0);
    for (const RowRuns* r : {&in, &out}) {
      if (!r->read || dry) continue;
      float* buf = r == &in ? w.in.get() : w.out.get();
      for (int64_t k = 0; k < r->runs; ++k) {
        kernels::WidenToFloat(r->At(b, k, h0), r->tensor.storage, n * r->row_elems,
                              buf + k * n * r->row_elems);
      }
    }
    const float* norm =
        normalizer ? normalizer + ((p.PerSampleMask() ? b * p.H_out : 0) + h0) * p.W_out : nullptr;
    RunFloat(SerialContext(), call, RowSlice(p, b, h0, n), norm, w.in.get(), w.out.get(),
             &w.scratch);
    if (dry) return;
    for (int64_t k = 0; k < out.runs; ++k) {
      kernels::NarrowFromFloat(w.out.get() + k * n * out.row_elems, n * out.row_elems,
                               out.At(b, k, h0), out.tensor.storage, stream);
    }
    if (stream) hwy::FlushStream();
  };

  // Everything is allocated before any output is written: each worker's buffers, and
  // the float operator's scratch, sized by running it once on the first (largest)
  // slice of zeros (a copy would not keep the capacity some paths only reserve).
  std::vector<SliceWorker> workers(static_cast<size_t>(ParallelWorkers(loop, tasks)));
  for (SliceWorker& w : workers) {
    w.in = AllocateAligned<float>(static_cast<size_t>(in.Elems(rows)));
    w.out = AllocateAligned<float>(static_cast<size_t>(out.Elems(rows)));
    std::fill(w.in.get(), w.in.get() + in.Elems(rows), 0.0f);
    std::fill(w.out.get(), w.out.get() + out.Elems(rows), 0.0f);
    run(0, w, /*dry=*/true);
  }

  ParallelForWorkers(loop, tasks, [&](int64_t t, int64_t worker) {
    run(t, workers[static_cast<size_t>(worker)], false);
  });
}

}  // namespace

void ShiftSumStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                    const ShiftSumStoredCall& call) {
  if (call.op == ShiftSumOp::kForward) return ShiftSumForwardStored(ctx, p, call.in, call.out);
  if (call.op == ShiftSumOp::kAdjoint && !p.along_h) {
    return ShiftSumAdjointStored(ctx, p, call.in, call.out);
  }
  if (call.op == ShiftSumOp::kPinv && !p.along_h) {
    return ShiftSumPinvStored(ctx, p, call.mode, call.normalizer, call.in, call.out);
  }
  if (call.op == ShiftSumOp::kGapStep && !p.along_h) {
    return ShiftSumGapStepStored(ctx, p, call.lambda, call.gamma, call.normalizer, call.in,
                                 call.out);
  }
  // One chunk holds a whole call that fits the last-level cache (a reconstruction
  // loop's one image): its three passes beat slices there, each worker's scratch sized by
  // a dry run on a slice (1 x 28 x 256 x 256 bf16: slices 0.63-0.97 of the chunk's speed).
  const auto [in_elems, out_elems] = SampleElems(p, call.op);
  if (p.along_h || p.B * (in_elems + out_elems) * int64_t{sizeof(float)} <= kChunkBytes) {
    return SampleChunks(ctx, p, call);
  }
  RowSlices(ctx, p, call);
}

}  // namespace cpu
}  // namespace normkit
