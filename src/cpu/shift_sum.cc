// SPDX-License-Identifier: Apache-2.0
// CPU shift-sum: the forward operator A, its adjoint A^T, the normalizer and the
// pseudo-inverses, planned over output rows (see shift_sum_rows.h).
#include "cpu/shift_sum.h"

#include <vector>

#include "cpu/kernels/group_norm.h"
#include "cpu/shift_sum_rows.h"

namespace normkit {
namespace cpu {

using namespace shift_sum_rows;  // NOLINT: this file's own internals

// y rows [begin, end) (over B * H') of the forward from x stored as X, into `yrows`
// (y row `begin` first): a task of ShiftSumForward or ShiftSumForwardStored.
template <class T, class X>
void ForwardRows(const ShiftSumProblem<T>& p, ForwardPath path, const X* x, T* yrows, int64_t begin,
                 int64_t end, TaskRows<T>& s) {
  switch (path) {
    case ForwardPath::kChannelsFirst: break;
    case ForwardPath::kAlongH: {  // a y row sums rows of C different x rows
      XRows<T> xr(p, s.gather);
      for (int64_t row = begin; row < end; ++row) {
        ForwardRow(p, xr, x, row / p.H_out, row % p.H_out, yrows + (row - begin) * p.W_out);
      }
      return;
    }
    case ForwardPath::kSkewed: return ForwardChannelsLastSkewed(p, x, yrows, begin, end, s);
    case ForwardPath::kPhases: return ForwardChannelsLastPhases(p, x, yrows, begin, end, s);
    case ForwardPath::kPlanesInRegisters:
      return ForwardChannelsLastInRegisters(p, x, yrows, begin, end, s);
    case ForwardPath::kPlaneSlices: return ForwardChannelsLastSlices(p, x, yrows, begin, end, s);
  }
  XRows<T> xr(p, s.gather);  // channels-first: offsets only
  const bool phi = p.PhiMask();
  const int64_t tile_rows =
      p.along_h ? kForwardTileRows
                : std::clamp<int64_t>(kForwardTileBytes / (p.W_out * int64_t{sizeof(T)}), 1,
                                      kForwardGroupRows);
  ForTiles(begin, end, p.H_out, tile_rows, [&](int64_t b, int64_t r0, int64_t r1) {
    T* ytile = yrows + (b * p.H_out + r0 - begin) * p.W_out;
    std::fill(ytile, ytile + (r1 - r0) * p.W_out, T(0));
    if (!p.along_h) {  // every channel covers every row of the tile
      for (int64_t c0 = 0; c0 < p.C; c0 += kForwardGroupChannels) {
        for (int64_t r = r0; r < r1; ++r) {
          kernels::ShiftSumTile<T, X> tile{};
          tile.y = ytile + (r - r0) * p.W_out + p.Offset(c0);
          tile.y_channel_step = p.step;
          tile.x = x + xr.Offset(b, c0, r);
          tile.x_channel_stride = p.H * p.W;
          // This row of the next tile, of each channel in the group.
          tile.prefetch_offset = tile_rows * p.W;
          tile.prefetch_count = r + tile_rows < p.H ? p.W : 0;
          tile.m = AlignedMask(p, b, c0, r);
          tile.m_channel_stride = MaskChannelStride(p);
          tile.channels = std::min(kForwardGroupChannels, p.C - c0);
          tile.rows = 1;
          tile.n = p.W;
          ShiftSumAccumulateTile(tile);
        }
      }
    } else {
      const auto [c_first, c_last] = ChannelsReaching(p, r0, r1);
      for (int64_t c = c_first; c < c_last; ++c) {
        // The tile rows this channel reaches: consecutive x rows, one call.
        const int64_t ra = std::max(r0, p.Offset(c)), rb = std::min(r1, p.Offset(c) + p.H);
        if (ra >= rb) continue;
        const int64_t h = SourceRow(p, c, ra);
        kernels::ShiftSumTile<T, X> tile{};
        tile.y = ytile + (ra - r0) * p.W_out;
        tile.y_row_stride = p.W_out;
        tile.x = x + xr.Offset(b, c, h);
        tile.x_row_stride = p.W;
        tile.m = AlignedMask(p, b, c, h);
        tile.m_row_stride = phi ? p.W_out : p.W;
        tile.channels = 1;
        tile.rows = rb - ra;
        tile.n = p.W;
        ShiftSumAccumulateTile(tile);
      }
    }
    if (p.scale != T(1)) ShiftSumScale(ytile, p.scale, (r1 - r0) * p.W_out);
  });
}

template <class T>
void ShiftSumForward(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* y,
                     ShiftSumScratch<T>* scratch) {
  ShiftSumScratch<T> own;
  ShiftSumScratch<T>& pool = scratch ? *scratch : own;
  const ForwardPath path = ForwardPathOf(p);
  const auto make = [&](TaskRows<T>& s) { ForwardScratch(p, s); };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    ForwardRows(p, path, x, y + begin * p.W_out, begin, end, s);
  };
  ForRowRanges<T>(ctx, p.B * p.H_out, XRowBytes(p), pool.workers, make, task);
}

namespace {

// The forward of x stored as X into y as stored: each task sums its y rows in float
// (into a worker's rows when y is half: 1/C of x's values, in cache) and rounds them.
template <class X>
void ForwardStoredX(const normkit_context& ctx, const ShiftSumProblem<float>& p, const X* x,
                    StoredTensor y) {
  ShiftSumScratch<float> pool;
  const ForwardPath path = ForwardPathOf(p);
  const bool half_y = y.storage != kernels::Storage::kFloat32;
  const int64_t row_bytes = XRowBytes(p);
  const int64_t task_rows = std::min(RowsPerTask(row_bytes), p.B * p.H_out);
  const auto make = [&](TaskRows<float>& s) {
    ForwardScratch<float, X>(p, s);
    if (half_y) Zeroed(s.rows, task_rows * p.W_out);
  };
  const int64_t y_bytes = kernels::StorageBytes(y.storage);
  const auto task = [&](int64_t begin, int64_t end, TaskRows<float>& s) {
    if (!half_y) {
      return ForwardRows(p, path, x, static_cast<float*>(y.data) + begin * p.W_out, begin, end, s);
    }
    ForwardRows(p, path, x, s.rows.data(), begin, end, s);
    kernels::NarrowFromFloat(s.rows.data(), (end - begin) * p.W_out,
                             static_cast<char*>(y.data) + begin * p.W_out * y_bytes, y.storage,
                             /*stream=*/false);
  };
  ForRowRanges<float>(ctx, p.B * p.H_out, row_bytes, pool.workers, make, task);
}

}  // namespace

void ShiftSumForwardStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                           StoredTensor x, StoredTensor y) {
  switch (x.storage) {
    case kernels::Storage::kBFloat16:
      return ForwardStoredX(ctx, p, static_cast<const hwy::bfloat16_t*>(x.data), y);
    case kernels::Storage::kFloat16:
      return ForwardStoredX(ctx, p, static_cast<const hwy::float16_t*>(x.data), y);
    case kernels::Storage::kFloat32:
      return ForwardStoredX(ctx, p, static_cast<const float*>(x.data), y);
  }
}

namespace {

template <class T, class X>
void AdjointImpl(const normkit_context& ctx, const ShiftSumProblem<T>& p, const YSource<T>& y, X* x,
                 ShiftSumScratch<T>& pool) {
  const auto make = [&](TaskRows<T>& s) {
    if (AdjointByPhases(p)) PhasesScratch(p, s);
    FromPlanesRowScratch<T, X>(p, s);
    PixelWindowsScratch(p, !AdjointByPhases(p) && AdjointByPixelWindows<T, X>(p), s);
    if (!y.plain) Zeroed(s.rows, p.W_out);
  };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    const bool stream = StreamX(p);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      const T* widened = y.plain ? nullptr : y.Row(p, b * p.H_out + h, s.rows.data());
      const auto row_of = [&](int64_t r) {
        return widened ? widened : y.plain + (b * p.H_out + r) * p.W_out;
      };
      AdjointRow(p, row_of, b, h, x, stream, s);
    }
    if (stream) hwy::FlushStream();
  };
  ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make, task);
}

template <class T, class X>
void PinvImpl(const normkit_context& ctx, const ShiftSumProblem<T>& p, PinvMode mode,
              const T* given_normalizer, const YSource<T>& y, X* x, ShiftSumScratch<T>& pool) {
  const bool mp = mode == PinvMode::kMoorePenrose;
  const T* normalizer = mp ? SharedNormalizer(ctx, p, given_normalizer, pool.table) : nullptr;
  if (mp && !p.along_h) {
    // Along W, x row (b, h) reads y row (b, h) alone: z = y / (s^2 Phi_s) a row at a
    // time, in L1, then the adjoint of that row, instead of a whole z zeroed, written
    // and read back (5 MB at seed 003's shape). Alternating builds, 4 rounds, medians,
    // 1 / 2 threads: 16x28 NCHW 0.97 / 0.84 -> 1.08 / 0.92, 16x31 NHWC 0.83 / 0.76 ->
    // 0.87 / 0.84 of memcpy. Same rows, same bits.
    const auto make = [&](TaskRows<T>& s) {
      Zeroed(s.rows, p.W_out);
      Zeroed(s.normalizer, p.W_out);
      if (AdjointByPhases(p)) PhasesScratch(p, s);
      FromPlanesRowScratch<T, X>(p, s);
      PixelWindowsScratch(p, !AdjointByPhases(p) && AdjointByPixelWindows<T, X>(p), s);
    };
    const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
      const bool stream = StreamX(p);
      T* z = s.rows.data();
      const auto row_of = [&](int64_t) { return static_cast<const T*>(z); };
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / p.H, h = row % p.H;
        const T* pr = NormalizerRowOrGiven(p, normalizer, b, h, s.normalizer.data());
        // A half y row is widened into z and divided in place.
        ShiftSumDivide(z, y.Row(p, row, z), pr, p.scale * p.scale, T(0), p.W_out);
        AdjointRow(p, row_of, b, h, x, stream, s);
      }
      if (stream) hwy::FlushStream();
    };
    ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make, task);
    return;
  }
  // z = y / (s^2 Phi_s) (Moore-Penrose) or y / (s * count) (divide-by-mask): y-sized,
  // 1/C of x, so the extra pass is cheap; then the adjoint-like pass over x.
  std::vector<T>& z = pool.ys;
  z.assign(static_cast<size_t>(p.B * p.H_out * p.W_out), T(0));
  // The counts of covering channels depend on neither the sample nor, along W, the
  // row: one row of them (along H one per y row), summed once.
  const int64_t count_rows = mp ? 0 : p.along_h ? p.H_out : 1;
  std::vector<T>& counts = pool.counts;
  counts.assign(static_cast<size_t>(count_rows * p.W_out), T(0));
  for (int64_t r = 0; r < count_rows; ++r) NormalizerRow(p, 0, r, true, &counts[r * p.W_out]);
  const auto make_z = [&](TaskRows<T>& s) {
    if (mp) Zeroed(s.normalizer, p.W_out);
  };
  const auto divide = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H_out, r = row % p.H_out;
      const T* pr = mp ? NormalizerRowOrGiven(p, normalizer, b, r, s.normalizer.data())
                       : &counts[(p.along_h ? r : 0) * p.W_out];
      T* zrow = &z[row * p.W_out];
      ShiftSumDivide(zrow, y.Row(p, row, zrow), pr, mp ? p.scale * p.scale : p.scale, T(0),
                     p.W_out);
    }
  };
  ForRowRanges<T>(ctx, p.B * p.H_out, XRowBytes(p), pool.workers, make_z, divide);
  if (mp) {
    AdjointImpl(ctx, p, YSource<T>{z.data()}, x, pool);
    return;
  }
  const auto make_x = [&](TaskRows<T>& s) {
    if (p.channels_last) Zeroed(s.planes, p.C * p.W);
    FromPlanesRowScratch<T, X>(p, s);
    PixelWindowsScratch(p, DivideByPixelWindows<T, X>(p), s);
  };
  const auto task = [&](int64_t begin, int64_t end, TaskRows<T>& s) {
    std::vector<T>& planes = s.planes;
    // x streamed when large, as the adjoint's: channels-first rows straight from z,
    // channels-last ones from the L1 planes.
    const bool stream = StreamX(p);
    const bool stream_rows = stream && !p.channels_last;
    // x_c = window_c(z) / M_c (0 where M_c = 0) into dst, a plane or an x row.
    const auto divide_row = [&](auto* dst, const T* zrow, const T* m) {
      if (m) {
        ShiftSumDivideByMask(dst, zrow, m, p.W, stream_rows);
      } else {
        ShiftSumScaledProduct(dst, zrow, static_cast<const T*>(nullptr), T(1), p.W, stream_rows);
      }
    };
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      if (DivideByPixelWindows<T, X>(p)) {
        const T* m = AlignedMask(p, b, 0, h);
        PixelsFromWindows(p, &z[(b * p.H_out + h) * p.W_out], m, T(1), m != nullptr,
                          x + ChannelsLastRow(p, b, h), stream, s);
        continue;
      }
      for (int64_t c = 0; c < p.C; ++c) {
        const Placement at = Place(p, c, h);
        const T* zrow = &z[(b * p.H_out + at.r) * p.W_out + at.col];
        const T* m = AlignedMask(p, b, c, h);
        if (p.channels_last) {
          divide_row(&planes[c * p.W], zrow, m);
        } else {
          divide_row(x + ((b * p.C + c) * p.H + h) * p.W, zrow, m);
        }
      }
      if (p.channels_last) {
        FromPlanesToRow(planes.data(), p.W, static_cast<const T*>(nullptr), 0, T(1), p.W, p.C,
                        x + ChannelsLastRow(p, b, h), stream, s.x_row);
      }
    }
    if (stream) hwy::FlushStream();
  };
  ForRowRanges<T>(ctx, p.B * p.H, XRowBytes(p), pool.workers, make_x, task);
}

}  // namespace

template <class T>
void ShiftSumAdjoint(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* y, T* x,
                     ShiftSumScratch<T>* scratch) {
  ShiftSumScratch<T> own;
  AdjointImpl(ctx, p, YSource<T>{y}, x, scratch ? *scratch : own);
}

template <class T>
void ShiftSumNormalizer(const normkit_context& ctx, const ShiftSumProblem<T>& p, T* phi_s) {
  const int64_t samples = p.PerSampleMask() ? p.B : 1;
  ForRowRanges(ctx, samples * p.H_out, XRowBytes(p), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      NormalizerRow(p, row / p.H_out, row % p.H_out, false, phi_s + row * p.W_out);
    }
  });
}

template <class T>
void ShiftSumPinv(const normkit_context& ctx, const ShiftSumProblem<T>& p, PinvMode mode,
                  const T* given_normalizer, const T* y, T* x, ShiftSumScratch<T>* scratch) {
  ShiftSumScratch<T> own;
  PinvImpl(ctx, p, mode, given_normalizer, YSource<T>{y}, x, scratch ? *scratch : own);
}

void ShiftSumAdjointStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                           StoredTensor y, StoredTensor x) {
  ShiftSumScratch<float> pool;
  WithStoredX(x, [&](auto* xs) { AdjointImpl(ctx, p, YSourceOf(y), xs, pool); });
}

void ShiftSumPinvStored(const normkit_context& ctx, const ShiftSumProblem<float>& p, PinvMode mode,
                        const float* normalizer, StoredTensor y, StoredTensor x) {
  ShiftSumScratch<float> pool;
  WithStoredX(x, [&](auto* xs) { PinvImpl(ctx, p, mode, normalizer, YSourceOf(y), xs, pool); });
}

#define NORMKIT_INSTANTIATE_SHIFT_SUM(T)                                                        \
  template void ShiftSumForward<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, \
                                   T*, ShiftSumScratch<T>*);                                    \
  template void ShiftSumAdjoint<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, \
                                   T*, ShiftSumScratch<T>*);                                    \
  template void ShiftSumNormalizer<T>(const normkit_context&, const ShiftSumProblem<T>&, T*);   \
  template void ShiftSumPinv<T>(const normkit_context&, const ShiftSumProblem<T>&, PinvMode,    \
                                const T*, const T*, T*, ShiftSumScratch<T>*);
NORMKIT_INSTANTIATE_SHIFT_SUM(float)
NORMKIT_INSTANTIATE_SHIFT_SUM(double)
#undef NORMKIT_INSTANTIATE_SHIFT_SUM

}  // namespace cpu
}  // namespace normkit
