// SPDX-License-Identifier: Apache-2.0
// CPU shift-sum: the fused GAP / ADMM step, and the plain shift / unshift.
#include <type_traits>
#include <vector>

#include "cpu/shift_sum.h"
#include "cpu/shift_sum_rows.h"

namespace normkit {
namespace cpu {

using namespace shift_sum_rows;  // NOLINT: this file's own internals

namespace {

// The GAP step along W on x stored as X (T, or a half type with T = float: read and
// written in its own bytes, the updates rounded as they are stored) and y from `y`.
template <class T, class X>
void GapStepAlongW(const normkit_context& ctx, const ShiftSumProblem<T>& p, T lambda, T gamma,
                   const T* given_normalizer, const YSource<T>& y, X* x, ShiftSumScratch<T>& pool) {
  const T step_scale = lambda * p.scale;
  const T* normalizer = SharedNormalizer(ctx, p, given_normalizer, pool.table);
  const auto y_row_scratch = [&](TaskRows<T>& s) {
    if (!y.plain) Zeroed(s.y_row, p.W_out);
  };
  if (p.channels_last && CanSkewGapRows(p)) {
    // Two rows at a time: A x straight from their [W, C] rows, the residual, and the
    // update of the rows, none transposed (see CanSkewGapRows).
    const auto make = [&](TaskRows<T>& s) {
      Zeroed(s.rows, 2 * p.W_out);
      Zeroed(s.normalizer, p.W_out);
      SkewScratch<T, X>(p, s);
      y_row_scratch(s);
    };
    const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
      for (int64_t row = begin; row < end; row += 2) {
        const int64_t n = std::min<int64_t>(2, end - row);
        T* res_rows[2] = {s.rows.data(), s.rows.data() + p.W_out};
        // Rows past the range are another task's to update: not read.
        SkewRows(p, static_cast<const X*>(x), row, n, res_rows, end, PaddedRows<X>(s));
        kernels::ShiftSumSkewAxpyRows<T, X> update{};
        update.W = p.W;
        update.C = p.C;
        update.step = p.step;
        update.a = step_scale;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t b = (row + i) / p.H, h = (row + i) % p.H;
          const T* pr = NormalizerRowOrGiven(p, normalizer, b, h, s.normalizer.data());
          ShiftSumGapResidual(res_rows[i], y.Row(p, row + i, s.y_row.data()), pr, T(1),
                              p.scale * p.scale, gamma, p.W_out);
          update.x[i] = x + ChannelsLastRow(p, b, h);
          update.r[i] = res_rows[i];
          update.m[i] = AlignedMask(p, b, 0, h);
        }
        kernels::ShiftSumSkewAxpy(update);
      }
    };
    ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make, task);
    return;
  }
  if (CanSumPhases(p) && !CanSkewRows(p)) {  // as the forward: C past four vectors
    const auto make = [&](TaskRows<T>& s) {
      Zeroed(s.rows, p.W_out);
      Zeroed(s.normalizer, p.W_out);
      PhasesScratch(p, s);
      y_row_scratch(s);
    };
    const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
      GapStepChannelsLastPhases(p, step_scale, gamma, normalizer, y, x, begin, end, s);
    };
    ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make, task);
    return;
  }
  // Along W, y row h depends on x rows (., h) only: one task forms A x for a tile of
  // rows, the residual, and updates the C rows of each while they are in cache.
  const auto make = [&](TaskRows<T>& s) {
    Zeroed(s.rows, kTileRows * p.W_out);
    Zeroed(s.normalizer, p.W_out);
    if (p.channels_last) Zeroed(s.planes, kTileRows * p.C * p.W);
    FromPlanesRowScratch<T, X>(p, s);
    y_row_scratch(s);
  };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    std::vector<T>& res = s.rows;
    std::vector<T>& block = s.planes;
    const int64_t ahead = std::max<int64_t>(kTileRows, kGapPrefetchBytes / XRowBytes(p));
    ForTiles(begin, end, p.H, kTileRows, [&](int64_t b, int64_t h0, int64_t h1) {
      // Channels-first: the rows `ahead` below, requested a channel at a time as the
      // sums go (see ShiftSumForward; one burst of C rows of requests is partly
      // dropped). Channels-last: each [W, C] row block is transposed to planes once
      // (prefetching as it goes), updated, and transposed back.
      const int64_t pf0 = h0 + ahead, pf1 = std::min(h1 + ahead, p.H);
      const auto plane = [&](int64_t c, int64_t h) { return &block[((h - h0) * p.C + c) * p.W]; };
      const auto xrow = [&](int64_t c, int64_t h) { return x + ((b * p.C + c) * p.H + h) * p.W; };
      if (p.channels_last) {
        for (int64_t h = h0; h < h1; ++h) {
          const PlanesPrefetch<X> pf = PrefetchAhead(p, static_cast<const X*>(x), b * p.H + h, 1);
          ShiftSumToPlanes(static_cast<const X*>(x + ChannelsLastRow(p, b, h)), p.W, p.C, p.C,
                           plane(0, h), p.W, pf.begin, pf.count);
        }
      }
      std::fill(res.begin(), res.end(), T(0));
      // A x for the tile, as in ShiftSumForward, from the planes or x's rows.
      const auto sum = [&](const auto* x0) {
        kernels::ShiftSumTile<T, std::remove_const_t<std::remove_pointer_t<decltype(x0)>>> tile{};
        tile.y = res.data() + p.Offset(0);
        tile.y_row_stride = p.W_out;
        tile.y_channel_step = p.step;
        tile.x = x0;
        tile.x_row_stride = p.channels_last ? p.C * p.W : p.W;
        tile.x_channel_stride = p.channels_last ? p.W : p.H * p.W;
        tile.m = AlignedMask(p, b, 0, h0);
        tile.m_row_stride = p.PhiMask() ? p.W_out : p.W;
        tile.m_channel_stride = MaskChannelStride(p);
        tile.channels = p.C;
        tile.rows = h1 - h0;
        tile.n = p.W;
        if (!p.channels_last && pf0 < pf1) {
          tile.prefetch_offset = (pf0 - h0) * p.W;
          tile.prefetch_count = (pf1 - pf0) * p.W;
        }
        ShiftSumAccumulateTile(tile);
      };
      if (p.channels_last) {
        sum(static_cast<const T*>(plane(0, h0)));
      } else {
        sum(static_cast<const X*>(xrow(0, h0)));
      }
      for (int64_t h = h0; h < h1; ++h) {
        T* rr = &res[(h - h0) * p.W_out];
        const T* pr = NormalizerRowOrGiven(p, normalizer, b, h, s.normalizer.data());
        ShiftSumGapResidual(rr, y.Row(p, b * p.H + h, s.y_row.data()), pr, p.scale,
                            p.scale * p.scale, gamma, p.W_out);
      }
      if (p.channels_last) {  // the update and the transposition back in one walk
        for (int64_t h = h0; h < h1; ++h) {
          FromPlanesAxpyToRow(plane(0, h), p.W, &res[(h - h0) * p.W_out + p.Offset(0)], p.step,
                              AlignedMask(p, b, 0, h), MaskChannelStride(p), step_scale, p.W, p.C,
                              x + ChannelsLastRow(p, b, h), s.x_row);
        }
        return;
      }
      // A large tile's x rows are in L2 (the sums just read them), a few lines each, C
      // apart: too short for the L1 prefetchers to follow. The rows two channels on are
      // requested into L1 as these are updated (bfloat16 2x512x256x256, one thread: 1.09x,
      // best of 15 calls; float32 within noise; 28 channels' 57 KB tiles 0.93-0.97x, so
      // small tiles skip it).
      const int64_t row_bytes = p.W * static_cast<int64_t>(sizeof(X));
      const bool prefetch = p.C * (h1 - h0) * row_bytes > kGapUpdatePrefetchBytes;
      for (int64_t c = 0; c < p.C; ++c) {
        for (int64_t h = h0; h < h1; ++h) {
          if (prefetch && c + 2 < p.C) {
            const char* next = reinterpret_cast<const char*>(xrow(c + 2, h));
            for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(next + o, 1, 3);
          }
          ShiftSumAxpy(xrow(c, h), &res[(h - h0) * p.W_out + p.Offset(c)], AlignedMask(p, b, c, h),
                       step_scale, p.W);
        }
      }
    });
  };
  ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make, task);
}

}  // namespace

template <class T>
void ShiftSumGapStep(const normkit_context& ctx, const ShiftSumProblem<T>& p, T lambda, T gamma,
                     const T* given_normalizer, const T* y, T* x, ShiftSumScratch<T>* scratch) {
  ShiftSumScratch<T> own;
  ShiftSumScratch<T>& pool = scratch ? *scratch : own;
  if (!p.along_h) {
    GapStepAlongW(ctx, p, lambda, gamma, given_normalizer, YSource<T>{y}, x, pool);
    return;
  }
  const T step_scale = lambda * p.scale;
  const T* normalizer = SharedNormalizer(ctx, p, given_normalizer, pool.table);
  // Along H a y row mixes C different x rows: form the residual for all of y first.
  std::vector<T>& res = pool.ys;
  res.assign(static_cast<size_t>(p.B * p.H_out * p.W_out), T(0));
  ShiftSumForward(ctx, p, x, res.data(), &pool);
  const auto make_res = [&](TaskRows<T>& s) { Zeroed(s.normalizer, p.W_out); };
  const auto residual = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    for (int64_t row = begin; row < end; ++row) {
      T* rr = &res[row * p.W_out];
      const T* pr =
          NormalizerRowOrGiven(p, normalizer, row / p.H_out, row % p.H_out, s.normalizer.data());
      ShiftSumGapResidual(rr, y + row * p.W_out, pr, T(1), p.scale * p.scale, gamma, p.W_out);
    }
  };
  ForRowRanges<T>(ctx, p.B * p.H_out, XRowBytes(p), pool.workers, make_res, residual);
  const auto make_x = [&](TaskRows<T>& s) { XRowsScratch(p, s); };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    XRows<T> xr(p, s.gather);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      for (int64_t c = 0; c < p.C; ++c) {
        const Placement at = Place(p, c, h);
        T* dst = xr.Modify(x, b, c, h);
        ShiftSumAxpy(dst, &res[(b * p.H_out + at.r) * p.W_out + at.col], AlignedMask(p, b, c, h),
                     step_scale, p.W);
        xr.Commit(x, b, c, h);
      }
    }
  };
  ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make_x, task);
}

void ShiftSumGapStepStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                           float lambda, float gamma, const float* normalizer, StoredTensor y,
                           StoredTensor x) {
  ShiftSumScratch<float> pool;
  WithStoredX(x, [&](auto* xs) {
    GapStepAlongW(ctx, p, lambda, gamma, normalizer, YSourceOf(y), xs, pool);
  });
}

namespace {

// Channels-first shift (forward) or unshift, stored as XI in and XO out (T: the math type
// of the problem), in the output's memory order: each output row is one window of an
// input row, its other values zeros, written a batch of rows at a time as one span. An
// output past the last-level cache is streamed (plain stores read each line before
// writing it: seed 003's float32 shift ran at 0.44 of a copy).
template <class T, class XI, class XO>
void ShiftChannelsFirst(const normkit_context& ctx, const ShiftSumProblem<T>& p, bool forward,
                        const XI* in, XO* out) {
  const int64_t width = forward ? p.W_out : p.W, plane_rows = forward ? p.H_out : p.H;
  const int64_t rows = p.B * p.C * plane_rows;
  const int64_t row_bytes = width * static_cast<int64_t>(sizeof(XO));
  const bool stream = rows * row_bytes >= kStreamingStoreBytes;
  constexpr int64_t kBatch = 64;
  ForRowRanges(ctx, rows, row_bytes, [&](int64_t begin, int64_t end) {
    const XI* src[kBatch];
    int64_t at[kBatch];
    for (int64_t q0 = begin; q0 < end; q0 += kBatch) {
      const int64_t n = std::min(kBatch, end - q0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t q = q0 + i, bc = q / plane_rows, c = bc % p.C, row = q % plane_rows;
        if (!forward) {  // x row (b, c, h): its window of the stack
          const Placement place = Place(p, c, row);
          src[i] = in + (bc * p.H_out + place.r) * p.W_out + place.col;
          at[i] = 0;
          continue;
        }
        const int64_t h = SourceRow(p, c, row);  // along H: -1 where no x row lands
        src[i] = h < 0 ? nullptr : in + (bc * p.H + h) * p.W;
        at[i] = h < 0 ? 0 : Place(p, c, h).col;
      }
      ShiftSumPlaceWindows(
          kernels::ShiftSumWindowRows<XI, XO>{src, at, p.W, n, width, out + q0 * width, stream});
    }
    if (stream) hwy::FlushStream();
  });
}

// Whether a channels-last stack or x written by shift / unshift is streamed.
template <class T>
bool StreamShiftOutput(const ShiftSumProblem<T>& p, bool forward, int64_t element_bytes) {
  const int64_t elems = p.B * p.C * (forward ? p.H_out * p.W_out : p.H * p.W);
  return elems * element_bytes >= kStreamingStoreBytes;
}

// Channels-last shift along W from x stored as XI into xs stored as XO, math in T: each
// x row's planes placed at their shifts in [C, W'] planes (zeroed once per worker: every
// row writes the same windows), transposed back into the xs row.
template <class T, class XI, class XO>
void ShiftChannelsLast(const normkit_context& ctx, const ShiftSumProblem<T>& p, const XI* x, XO* xs,
                       ShiftSumScratch<T>& pool) {
  const bool stream = StreamShiftOutput(p, true, sizeof(XO));
  const auto make = [&](TaskRows<T>& s) {
    Zeroed(s.planes, p.C * p.W_out);
    if (!std::is_same_v<XO, T>) Zeroed(s.x_row, p.W_out * p.C);
  };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H_out, r = row % p.H_out;
      ShiftSumToPlanes(x + ChannelsLastRow(p, b, r), p.W, p.C, p.C, &s.planes[p.Offset(0)],
                       p.W_out + p.step);
      FromPlanesToRow(s.planes.data(), p.W_out, static_cast<const T*>(nullptr), 0, T(1), p.W_out,
                      p.C, xs + row * p.W_out * p.C, stream, s.x_row);
    }
    if (stream) hwy::FlushStream();
  };
  ForRowRanges<T>(ctx, p.B * p.H_out, XRowBytes(p), pool.workers, make, task);
}

// Channels-last unshift along W from xs stored as XI into x stored as XO: the xs row as
// [C, W'] planes, each channel's window transposed back into the x row.
template <class T, class XI, class XO>
void UnshiftChannelsLast(const normkit_context& ctx, const ShiftSumProblem<T>& p, const XI* xs,
                         XO* x, ShiftSumScratch<T>& pool) {
  const bool stream = StreamShiftOutput(p, false, sizeof(XO));
  const auto make = [&](TaskRows<T>& s) {
    Zeroed(s.planes, p.C * p.W_out);
    FromPlanesRowScratch<T, XO>(p, s);
  };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      ShiftSumToPlanes(xs + row * p.W_out * p.C, p.W_out, p.C, p.C, s.planes.data(), p.W_out);
      FromPlanesToRow(&s.planes[p.Offset(0)], p.W_out + p.step, static_cast<const T*>(nullptr), 0,
                      T(1), p.W, p.C, x + ChannelsLastRow(p, b, h), stream, s.x_row);
    }
    if (stream) hwy::FlushStream();
  };
  ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make, task);
}

}  // namespace

template <class T>
void Shift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* xs,
           ShiftSumScratch<T>* scratch) {
  if (!p.channels_last) return ShiftChannelsFirst(ctx, p, true, x, xs);
  if (!p.along_h) {
    ShiftSumScratch<T> own;
    return ShiftChannelsLast(ctx, p, x, xs, scratch ? *scratch : own);
  }
  // xs has x's layout with (H', W') spatial dims. Channels-last along H: each channel's
  // pixels copied from its source row, strided.
  const bool stream = StreamShiftOutput(p, true, sizeof(T));
  const auto task = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H_out, r = row % p.H_out;
      T* block = xs + row * p.W_out * p.C;
      std::fill(block, block + p.W_out * p.C, T(0));
      for (int64_t c = 0; c < p.C; ++c) {
        const int64_t h = SourceRow(p, c, r);
        if (h < 0) continue;
        const T* src = x + (b * p.H + h) * p.W * p.C + c;
        T* dst = block + Place(p, c, h).col * p.C + c;
        for (int64_t w = 0; w < p.W; ++w) dst[w * p.C] = src[w * p.C];
      }
    }
    if (stream) hwy::FlushStream();
  };
  ForRowRanges(ctx, p.B * p.H_out, XRowBytes(p), task);
}

template <class T>
void Unshift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* xs, T* x,
             ShiftSumScratch<T>* scratch) {
  if (!p.channels_last) return ShiftChannelsFirst(ctx, p, false, xs, x);
  if (!p.along_h) {
    ShiftSumScratch<T> own;
    return UnshiftChannelsLast(ctx, p, xs, x, scratch ? *scratch : own);
  }
  // Channels-last along H: each channel's window copied, strided.
  const bool stream = StreamShiftOutput(p, false, sizeof(T));
  const auto task = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      for (int64_t c = 0; c < p.C; ++c) {
        const Placement at = Place(p, c, h);
        const T* src = xs + ((b * p.H_out + at.r) * p.W_out + at.col) * p.C + c;
        T* dst = x + (b * p.H + h) * p.W * p.C + c;
        for (int64_t w = 0; w < p.W; ++w) dst[w * p.C] = src[w * p.C];
      }
    }
    if (stream) hwy::FlushStream();
  };
  ForRowRanges(ctx, p.B * p.H, XRowBytes(p), task);
}

namespace {

// Shift (forward) or unshift on stored tensors: channels-first in either direction,
// channels-last along W (along H it takes sample chunks, shift_sum_half.cc).
void ShiftStack(const normkit_context& ctx, const ShiftSumProblem<float>& p, bool forward,
                StoredTensor in, StoredTensor out) {
  WithStoredX(in, [&](auto* src) {
    WithStoredX(out, [&](auto* dst) {
      using XI = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
      using XO = std::remove_pointer_t<decltype(dst)>;
      // The API rejects bfloat16 <-> float16.
      if constexpr (std::is_same_v<XI, XO> || std::is_same_v<XI, float> ||
                    std::is_same_v<XO, float>) {
        if (!p.channels_last) return ShiftChannelsFirst(ctx, p, forward, src, dst);
        ShiftSumScratch<float> pool;
        forward ? ShiftChannelsLast(ctx, p, src, dst, pool)
                : UnshiftChannelsLast(ctx, p, src, dst, pool);
      }
    });
  });
}

}  // namespace

void ShiftStored(const normkit_context& ctx, const ShiftSumProblem<float>& p, StoredTensor x,
                 StoredTensor xs) {
  ShiftStack(ctx, p, true, x, xs);
}

void UnshiftStored(const normkit_context& ctx, const ShiftSumProblem<float>& p, StoredTensor xs,
                   StoredTensor x) {
  ShiftStack(ctx, p, false, xs, x);
}

#define NORMKIT_INSTANTIATE_SHIFT_SUM_GAP(T)                                                \
  template void ShiftSumGapStep<T>(const normkit_context&, const ShiftSumProblem<T>&, T, T, \
                                   const T*, const T*, T*, ShiftSumScratch<T>*);            \
  template void Shift<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, T*,   \
                         ShiftSumScratch<T>*);                                              \
  template void Unshift<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, T*, \
                           ShiftSumScratch<T>*);
NORMKIT_INSTANTIATE_SHIFT_SUM_GAP(float)
NORMKIT_INSTANTIATE_SHIFT_SUM_GAP(double)
#undef NORMKIT_INSTANTIATE_SHIFT_SUM_GAP

}  // namespace cpu
}  // namespace normkit
