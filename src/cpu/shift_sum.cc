// SPDX-License-Identifier: Apache-2.0
#include "cpu/shift_sum.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "cpu/kernels/shift_sum.h"
#include "cpu/memory_plan.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::ShiftSumAccumulate;
using kernels::ShiftSumAddSquares;
using kernels::ShiftSumAxpy;
using kernels::ShiftSumDivide;
using kernels::ShiftSumDivideByMask;
using kernels::ShiftSumResidual;
using kernels::ShiftSumScale;
using kernels::ShiftSumScaledProduct;

// Bytes of x a task should cover: large enough to amortize the task, small enough to
// balance two or more threads on the smallest seed shapes.
constexpr int64_t kTaskBytes = int64_t{256} << 10;

// Runs body(begin, end) over [0, rows) in ranges of whole rows, `row_bytes` each.
template <class Body>
void ForRowRanges(const normkit_context& context, int64_t rows, int64_t row_bytes,
                  const Body& body) {
  const int64_t per_task = std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(row_bytes, 1));
  const int64_t tasks = (rows + per_task - 1) / per_task;
  const normkit_context& ctx = rows * row_bytes < kMinParallelBytes ? SerialContext() : context;
  ParallelFor(ctx, tasks,
              [&](int64_t t) { body(t * per_task, std::min(rows, (t + 1) * per_task)); });
}

// Where x row (c, h) lands in y: the y row and the column offset.
struct Placement {
  int64_t r;
  int64_t col;
};

template <class T>
Placement Place(const ShiftSumProblem<T>& p, int64_t c, int64_t h) {
  return p.along_h ? Placement{h + p.Offset(c), 0} : Placement{h, p.Offset(c)};
}

// The x row of channel c that lands in y row r, or -1 (only along H can there be none).
template <class T>
int64_t SourceRow(const ShiftSumProblem<T>& p, int64_t c, int64_t r) {
  if (!p.along_h) return r;
  const int64_t h = r - p.Offset(c);
  return h >= 0 && h < p.H ? h : -1;
}

// The mask values that multiply x row (b, c, h), element-aligned with it. Shifted-
// domain masks (Phi) are read at the y positions the row lands on.
template <class T>
const T* AlignedMask(const ShiftSumProblem<T>& p, int64_t b, int64_t c, int64_t h) {
  const Placement at = Place(p, c, h);
  switch (p.mask_kind) {
    case ShiftMask::kNone: return nullptr;
    case ShiftMask::kHW: return p.mask + h * p.W;
    case ShiftMask::kCHW: return p.mask + (c * p.H + h) * p.W;
    case ShiftMask::kBCHW: return p.mask + ((b * p.C + c) * p.H + h) * p.W;
    case ShiftMask::kPhiCHW: return p.mask + (c * p.H_out + at.r) * p.W_out + at.col;
    case ShiftMask::kPhiBCHW: return p.mask + ((b * p.C + c) * p.H_out + at.r) * p.W_out + at.col;
  }
  return nullptr;
}

// x rows of one channel. Channels-first rows are used in place; channels-last rows are
// gathered from (and scattered back to) the [W, C] row block through a small buffer.
template <class T>
struct XRows {
  const ShiftSumProblem<T>& p;
  std::vector<T> buffer;

  explicit XRows(const ShiftSumProblem<T>& problem)
      : p(problem), buffer(problem.channels_last ? static_cast<size_t>(problem.W) : 0) {}

  int64_t Offset(int64_t b, int64_t c, int64_t h) const {
    return p.channels_last ? (b * p.H + h) * p.W * p.C + c : ((b * p.C + c) * p.H + h) * p.W;
  }
  const T* Read(const T* x, int64_t b, int64_t c, int64_t h) {
    const T* src = x + Offset(b, c, h);
    if (!p.channels_last) return src;
    for (int64_t w = 0; w < p.W; ++w) buffer[w] = src[w * p.C];
    return buffer.data();
  }
  // Where to compute row (b, c, h) before Commit() stores it.
  T* Target(T* x, int64_t b, int64_t c, int64_t h) {
    return p.channels_last ? buffer.data() : x + Offset(b, c, h);
  }
  void Commit(T* x, int64_t b, int64_t c, int64_t h) {
    if (!p.channels_last) return;
    T* dst = x + Offset(b, c, h);
    for (int64_t w = 0; w < p.W; ++w) dst[w * p.C] = buffer[w];
  }
  // Read-modify-write of a row: load it (a copy for channels-last), then Commit.
  T* Modify(T* x, int64_t b, int64_t c, int64_t h) {
    if (!p.channels_last) return x + Offset(b, c, h);
    Read(x, b, c, h);
    return buffer.data();
  }
};

// y row (b, r) = s * sum_c mask * x over the channels that land on it.
template <class T>
void ForwardRow(const ShiftSumProblem<T>& p, XRows<T>& xr, const T* x, int64_t b, int64_t r,
                T* yrow) {
  std::fill(yrow, yrow + p.W_out, T(0));
  for (int64_t c = 0; c < p.C; ++c) {
    const int64_t h = SourceRow(p, c, r);
    if (h < 0) continue;
    ShiftSumAccumulate(yrow + Place(p, c, h).col, xr.Read(x, b, c, h), AlignedMask(p, b, c, h),
                       p.W);
  }
  if (p.scale != T(1)) ShiftSumScale(yrow, p.scale, p.W_out);
}

// Normalizer row (b, r): sum over covering channels of mask^2 (or 1).
template <class T>
void NormalizerRow(const ShiftSumProblem<T>& p, int64_t b, int64_t r, bool count_only, T* prow) {
  std::fill(prow, prow + p.W_out, T(0));
  for (int64_t c = 0; c < p.C; ++c) {
    const int64_t h = SourceRow(p, c, r);
    if (h < 0) continue;
    ShiftSumAddSquares(prow + Place(p, c, h).col,
                       count_only ? static_cast<const T*>(nullptr) : AlignedMask(p, b, c, h), p.W);
  }
}

// The given normalizer's row for (b, r), or one computed into `scratch`.
template <class T>
const T* NormalizerRowOrGiven(const ShiftSumProblem<T>& p, const T* given, int64_t b, int64_t r,
                              T* scratch) {
  if (given) return given + ((p.PerSampleMask() ? b * p.H_out : 0) + r) * p.W_out;
  NormalizerRow(p, b, r, false, scratch);
  return scratch;
}

// x rows of (b, h) from a y-shaped array: x_c = s * mask_c * window_c(src).
template <class T>
void AdjointRows(const ShiftSumProblem<T>& p, XRows<T>& xr, const T* src, int64_t b, int64_t h,
                 T* x) {
  for (int64_t c = 0; c < p.C; ++c) {
    const Placement at = Place(p, c, h);
    T* dst = xr.Target(x, b, c, h);
    ShiftSumScaledProduct(dst, src + (b * p.H_out + at.r) * p.W_out + at.col,
                          AlignedMask(p, b, c, h), p.scale, p.W);
    xr.Commit(x, b, c, h);
  }
}

template <class T>
int64_t XRowBytes(const ShiftSumProblem<T>& p) {
  return p.C * p.W * static_cast<int64_t>(sizeof(T));
}

}  // namespace

template <class T>
void FinishShiftSumProblem(ShiftSumProblem<T>* p) {
  const int64_t spread = (p->C - 1) * (p->step < 0 ? -p->step : p->step);
  p->base = p->step < 0 ? spread : 0;
  p->H_out = p->along_h ? p->H + spread : p->H;
  p->W_out = p->along_h ? p->W : p->W + spread;
}

template <class T>
void ShiftSumForward(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* y) {
  ForRowRanges(ctx, p.B * p.H_out, XRowBytes(p), [&](int64_t begin, int64_t end) {
    XRows<T> xr(p);
    for (int64_t row = begin; row < end; ++row) {
      ForwardRow(p, xr, x, row / p.H_out, row % p.H_out, y + row * p.W_out);
    }
  });
}

template <class T>
void ShiftSumAdjoint(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* y, T* x) {
  ForRowRanges(ctx, p.B * p.H, XRowBytes(p), [&](int64_t begin, int64_t end) {
    XRows<T> xr(p);
    for (int64_t row = begin; row < end; ++row) AdjointRows(p, xr, y, row / p.H, row % p.H, x);
  });
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
                  const T* normalizer, const T* y, T* x) {
  // z = y / (s^2 Phi_s) (Moore-Penrose) or y / (s * count) (divide-by-mask): y-sized,
  // 1/C of x, so the extra pass is cheap; then the adjoint-like pass over x.
  std::vector<T> z(static_cast<size_t>(p.B * p.H_out * p.W_out));
  const bool mp = mode == PinvMode::kMoorePenrose;
  ForRowRanges(ctx, p.B * p.H_out, XRowBytes(p), [&](int64_t begin, int64_t end) {
    std::vector<T> prow(static_cast<size_t>(p.W_out));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H_out, r = row % p.H_out;
      const T* pr;
      if (mp) {
        pr = NormalizerRowOrGiven(p, normalizer, b, r, prow.data());
      } else {
        NormalizerRow(p, b, r, true, prow.data());
        pr = prow.data();
      }
      ShiftSumDivide(&z[row * p.W_out], y + row * p.W_out, pr, mp ? p.scale * p.scale : p.scale,
                     T(0), p.W_out);
    }
  });
  if (mp) {
    ShiftSumAdjoint(ctx, p, z.data(), x);
    return;
  }
  ForRowRanges(ctx, p.B * p.H, XRowBytes(p), [&](int64_t begin, int64_t end) {
    XRows<T> xr(p);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      for (int64_t c = 0; c < p.C; ++c) {
        const Placement at = Place(p, c, h);
        const T* zrow = &z[(b * p.H_out + at.r) * p.W_out + at.col];
        T* dst = xr.Target(x, b, c, h);
        const T* m = AlignedMask(p, b, c, h);
        if (m) {
          ShiftSumDivideByMask(dst, zrow, m, p.W);
        } else {
          std::copy(zrow, zrow + p.W, dst);
        }
        xr.Commit(x, b, c, h);
      }
    }
  });
}

template <class T>
void ShiftSumGapStep(const normkit_context& ctx, const ShiftSumProblem<T>& p, T lambda, T gamma,
                     const T* normalizer, const T* y, T* x) {
  const T step_scale = lambda * p.scale;
  if (!p.along_h) {
    // Along W, y row h depends on x rows (., h) only: one task forms A x for the row,
    // the residual, and updates the C rows while they are still in cache.
    ForRowRanges(ctx, p.B * p.H, XRowBytes(p), [&](int64_t begin, int64_t end) {
      std::vector<T> res(static_cast<size_t>(p.W_out)), prow(static_cast<size_t>(p.W_out));
      std::vector<T> block(p.channels_last ? static_cast<size_t>(p.C * p.W) : 0);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / p.H, h = row % p.H;
        // Channels-last: transpose the [W, C] row block once, update, transpose back.
        const auto xrow = [&](int64_t c) -> T* {
          return p.channels_last ? &block[c * p.W] : x + ((b * p.C + c) * p.H + h) * p.W;
        };
        T* xb = x + (b * p.H + h) * p.W * p.C;
        if (p.channels_last) {
          for (int64_t w = 0; w < p.W; ++w)
            for (int64_t c = 0; c < p.C; ++c) block[c * p.W + w] = xb[w * p.C + c];
        }
        std::fill(res.begin(), res.end(), T(0));
        for (int64_t c = 0; c < p.C; ++c) {
          ShiftSumAccumulate(&res[p.Offset(c)], xrow(c), AlignedMask(p, b, c, h), p.W);
        }
        if (p.scale != T(1)) ShiftSumScale(res.data(), p.scale, p.W_out);
        ShiftSumResidual(res.data(), y + row * p.W_out, p.W_out);
        const T* pr = NormalizerRowOrGiven(p, normalizer, b, h, prow.data());
        ShiftSumDivide(res.data(), res.data(), pr, T(1), gamma, p.W_out);
        for (int64_t c = 0; c < p.C; ++c) {
          ShiftSumAxpy(xrow(c), &res[p.Offset(c)], AlignedMask(p, b, c, h), step_scale, p.W);
        }
        if (p.channels_last) {
          for (int64_t w = 0; w < p.W; ++w)
            for (int64_t c = 0; c < p.C; ++c) xb[w * p.C + c] = block[c * p.W + w];
        }
      }
    });
    return;
  }
  // Along H a y row mixes C different x rows: form the residual for all of y first.
  std::vector<T> res(static_cast<size_t>(p.B * p.H_out * p.W_out));
  ShiftSumForward(ctx, p, x, res.data());
  ForRowRanges(ctx, p.B * p.H_out, XRowBytes(p), [&](int64_t begin, int64_t end) {
    std::vector<T> prow(static_cast<size_t>(p.W_out));
    for (int64_t row = begin; row < end; ++row) {
      T* rr = &res[row * p.W_out];
      ShiftSumResidual(rr, y + row * p.W_out, p.W_out);
      const T* pr = NormalizerRowOrGiven(p, normalizer, row / p.H_out, row % p.H_out, prow.data());
      ShiftSumDivide(rr, rr, pr, T(1), gamma, p.W_out);
    }
  });
  ForRowRanges(ctx, p.B * p.H, XRowBytes(p), [&](int64_t begin, int64_t end) {
    XRows<T> xr(p);
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
  });
}

template <class T>
void Shift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* xs) {
  // xs has x's layout with (H', W') spatial dims; each xs row (b, c, r) is zeros plus
  // at most one x row.
  ForRowRanges(ctx, p.B * p.H_out, XRowBytes(p), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H_out, r = row % p.H_out;
      if (p.channels_last) {
        T* block = xs + row * p.W_out * p.C;
        std::fill(block, block + p.W_out * p.C, T(0));
        for (int64_t c = 0; c < p.C; ++c) {
          const int64_t h = SourceRow(p, c, r);
          if (h < 0) continue;
          const T* src = x + (b * p.H + h) * p.W * p.C + c;
          T* dst = block + Place(p, c, h).col * p.C + c;
          for (int64_t w = 0; w < p.W; ++w) dst[w * p.C] = src[w * p.C];
        }
        continue;
      }
      for (int64_t c = 0; c < p.C; ++c) {
        T* dst = xs + ((b * p.C + c) * p.H_out + r) * p.W_out;
        std::fill(dst, dst + p.W_out, T(0));
        const int64_t h = SourceRow(p, c, r);
        if (h < 0) continue;
        const T* src = x + ((b * p.C + c) * p.H + h) * p.W;
        std::copy(src, src + p.W, dst + Place(p, c, h).col);
      }
    }
  });
}

template <class T>
void Unshift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* xs, T* x) {
  ForRowRanges(ctx, p.B * p.H, XRowBytes(p), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.H, h = row % p.H;
      for (int64_t c = 0; c < p.C; ++c) {
        const Placement at = Place(p, c, h);
        if (p.channels_last) {
          const T* src = xs + ((b * p.H_out + at.r) * p.W_out + at.col) * p.C + c;
          T* dst = x + (b * p.H + h) * p.W * p.C + c;
          for (int64_t w = 0; w < p.W; ++w) dst[w * p.C] = src[w * p.C];
        } else {
          const T* src = xs + ((b * p.C + c) * p.H_out + at.r) * p.W_out + at.col;
          std::copy(src, src + p.W, x + ((b * p.C + c) * p.H + h) * p.W);
        }
      }
    }
  });
}

#define NORMKIT_INSTANTIATE_SHIFT_SUM(T)                                                        \
  template void FinishShiftSumProblem<T>(ShiftSumProblem<T>*);                                  \
  template void ShiftSumForward<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, \
                                   T*);                                                         \
  template void ShiftSumAdjoint<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, \
                                   T*);                                                         \
  template void ShiftSumNormalizer<T>(const normkit_context&, const ShiftSumProblem<T>&, T*);   \
  template void ShiftSumPinv<T>(const normkit_context&, const ShiftSumProblem<T>&, PinvMode,    \
                                const T*, const T*, T*);                                        \
  template void ShiftSumGapStep<T>(const normkit_context&, const ShiftSumProblem<T>&, T, T,     \
                                   const T*, const T*, T*);                                     \
  template void Shift<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, T*);      \
  template void Unshift<T>(const normkit_context&, const ShiftSumProblem<T>&, const T*, T*);
NORMKIT_INSTANTIATE_SHIFT_SUM(float)
NORMKIT_INSTANTIATE_SHIFT_SUM(double)
#undef NORMKIT_INSTANTIATE_SHIFT_SUM

}  // namespace cpu
}  // namespace normkit
