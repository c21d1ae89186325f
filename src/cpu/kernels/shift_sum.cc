// SPDX-License-Identifier: Apache-2.0
// Shift-sum row kernels, compiled for every SIMD target and dispatched at run time.
#include "cpu/kernels/shift_sum.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/shift_sum.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
// clang-format on
#include "cpu/kernels/channel_planes-inl.h"
#include "cpu/kernels/storage-inl.h"
#include "cpu/kernels/store-inl.h"
#include "cpu/kernels/vec_slots-inl.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls f(d, i) over [0, n): whole vectors, then the tail with a 1-lane tag, so each
// element gets the same instruction sequence wherever the row starts.
template <class T, class F>
HWY_INLINE void ForRow(size_t n, const F& f) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) f(d, i);
  const hn::CappedTag<T, 1> d1;
  for (; i < n; ++i) f(d1, i);
}

// y[i] += m[i] * x[i] over [0, n). With pf, pf[0, pf_n) (pf_n <= n) is requested into
// L2 alongside, a line of it for each line of x read: spread over the row rather than
// in one burst before it (seed 003's channels-first forward, 1 thread, 8 rounds
// alternating: medians 0.86 -> 0.94 of memcpy).
// x stored as X: T itself, or a half type widened as it is loaded (the same sums).
template <class T, class X = T>
void AccumulateT(T* HWY_RESTRICT y, const X* HWY_RESTRICT x, const T* HWY_RESTRICT m, size_t n,
                 const X* pf = nullptr, size_t pf_n = 0) {
  constexpr size_t kLine = 64 / sizeof(X);
  const auto request = [&](auto d, size_t i) {
    if (hn::Lanes(d) > 1 && i < pf_n && i % kLine < hn::Lanes(d)) __builtin_prefetch(pf + i, 0, 2);
  };
  if (m) {
    ForRow<T>(n, [&](auto d, size_t i) {
      request(d, i);
      hn::StoreU(hn::MulAdd(hn::LoadU(d, m + i), LoadF(d, x + i), hn::LoadU(d, y + i)), d, y + i);
    });
  } else {
    ForRow<T>(n, [&](auto d, size_t i) {
      request(d, i);
      hn::StoreU(hn::Add(hn::LoadU(d, y + i), LoadF(d, x + i)), d, y + i);
    });
  }
}

// The ends of AccumulateTileRow's channel group: y positions [a, b), which only some of
// the cn channels reach (channel k: [k * step, k * step + n)), a vector at a time. Each
// lane adds the channels that reach it, in channel order, with the ops of AccumulateT:
// the same bits. Needs MaskedLoadsSafe<X>(): masked-off lanes may lie outside x, m and
// y. (A lane at a time, the ends were ~28% of a bfloat16 forward's kernel time at
// seed 003's C = 512, 4.7% of its elements.)
template <bool kMask, class T, class X>
void AccumulateEnds(T* HWY_RESTRICT y, const X* HWY_RESTRICT x, const T* HWY_RESTRICT m, int64_t a,
                    int64_t b, int64_t cn, int64_t step, int64_t n, int64_t x_channel_stride,
                    int64_t m_channel_stride) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto lanes = [N](int64_t j, int64_t v) {  // position v as a lane of the vector at j
    return static_cast<size_t>(std::clamp<int64_t>(v - j, 0, N));
  };
  for (int64_t j = a; j < b; j += N) {
    const auto in = LanesBetween(d, 0, lanes(j, b));
    auto acc = hn::MaskedLoad(in, d, y + j);
    for (int64_t k = 0; k < cn; ++k) {
      const int64_t lo = std::max(j, k * step), hi = std::min(b, k * step + n);
      if (lo >= hi) continue;
      const size_t l0 = lanes(j, lo), l1 = lanes(j, hi);
      const auto valid = LanesBetween(d, l0, l1);
      const auto xv = LoadLanesF(d, x + k * x_channel_stride + (j - k * step), l0, l1);
      if constexpr (kMask) {
        const auto mv = hn::MaskedLoad(valid, d, m + k * m_channel_stride + (j - k * step));
        acc = hn::IfThenElse(valid, hn::MulAdd(mv, xv, acc), acc);
      } else {
        acc = hn::IfThenElse(valid, hn::Add(acc, xv), acc);
      }
    }
    hn::BlendedStore(acc, in, d, y + j);
  }
}

// Where the whole vectors of the body [begin, end) stop.
template <class T>
int64_t BodyVectorsEnd(int64_t begin, int64_t end) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  return begin + (end - begin) / L * L;
}

// The body of AccumulateTileRow for half x (every channel reaches [begin, end)): two
// vectors at a time, two independent sums through the channels (a vector's sum is a
// chain of cn dependent adds), then one; the part-vector left a lane at a time unless
// masked loads are safe (then the caller's ends take it). No lines requested ahead (GCC
// 12 dropped the requests from this loop; measured so). In cache, bfloat16 x
// [1, 64, 64, 256]: 182 -> 91 us; seed 003 C = 512 bf16 forward, 1 thread, 0.53 -> 0.62
// of a copy. (Float32 x keeps its loop: this one read it at 0.80 against 0.91.)
template <bool kMask, class T, class X>
void AccumulateBodyHalfX(T* HWY_RESTRICT y, const X* HWY_RESTRICT x, const T* HWY_RESTRICT m,
                         int64_t begin, int64_t end, int64_t cn, int64_t dx, int64_t dm) {
  const auto body = [&](auto d, int64_t j, auto two) {  // [j, j + (two ? 2 : 1) * L)
    constexpr bool kTwo = decltype(two)::value;
    const int64_t L = static_cast<int64_t>(hn::Lanes(d));
    const X* px = x + j;
    const T* pm = kMask ? m + j : nullptr;
    auto acc0 = hn::LoadU(d, y + j);
    auto acc1 = kTwo ? hn::LoadU(d, y + j + L) : acc0;
    for (int64_t k = 0; k < cn; ++k, px += dx) {
      if constexpr (kMask) {
        acc0 = hn::MulAdd(hn::LoadU(d, pm), LoadF(d, px), acc0);
        if (kTwo) acc1 = hn::MulAdd(hn::LoadU(d, pm + L), LoadF(d, px + L), acc1);
        pm += dm;
      } else {
        acc0 = hn::Add(acc0, LoadF(d, px));
        if (kTwo) acc1 = hn::Add(acc1, LoadF(d, px + L));
      }
    }
    hn::StoreU(acc0, d, y + j);
    if (kTwo) hn::StoreU(acc1, d, y + j + L);
  };
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = begin;
  for (; j + 2 * L <= end; j += 2 * L) body(d, j, std::true_type());
  for (; j + L <= end; j += L) body(d, j, std::false_type());
  if constexpr (!MaskedLoadsSafe<X>()) {
    for (; j < end; ++j) body(hn::CappedTag<T, 1>(), j, std::false_type());
  }
}

// Channels [c0, c0 + cn) of tile t on row r. Where all of them cover a y position (the
// body: y shifted by at most (cn - 1) * step), its sum is carried in a register through
// the channels, one load and one store of y for cn vectors of x; the positions fewer
// channels reach (the ends) take AccumulateT a channel at a time. Each position still
// sums its channels in order: the bits of the channel-by-channel walk. (Channel by
// channel, every vector of x cost a load and a store of y, both split across lines as
// the shift moves them: a bfloat16 forward read its x at 0.46-0.55 of a copy.)
template <bool kMask, class T, class X>
void AccumulateTileRow(const ShiftSumTile<T, X>& t, int64_t r, int64_t c0, int64_t cn) {
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(X));
  const int64_t n = t.n, step = t.y_channel_step;
  T* y = t.y + r * t.y_row_stride + c0 * step;  // channel c0 + k adds at y + k * step
  const X* x = t.x + r * t.x_row_stride + c0 * t.x_channel_stride;
  const T* m = kMask ? t.m + r * t.m_row_stride + c0 * t.m_channel_stride : nullptr;
  // Row r requests its share of the prefetch range, [r * n, (r + 1) * n), at
  // x_row(c, 0) + prefetch_offset + r * n: pf_delta past the element read.
  const int64_t pf_n = std::clamp<int64_t>(t.prefetch_count - r * t.n, 0, t.n);
  const int64_t pf_delta = t.prefetch_offset + r * t.n - r * t.x_row_stride;
  const auto channel = [&](int64_t k, int64_t a, int64_t b, bool prefetch) {  // [a, b) of y
    if (a >= b) return;
    const int64_t e = a - k * step;  // its element in channel k's rows
    const X* xk = x + k * t.x_channel_stride + e;
    const int64_t pf_count = prefetch ? std::clamp<int64_t>(pf_n - e, 0, b - a) : 0;
    AccumulateT(y + a, xk, kMask ? m + k * t.m_channel_stride + e : nullptr,
                static_cast<size_t>(b - a), pf_count ? xk + pf_delta : nullptr,
                static_cast<size_t>(pf_count));
  };
  const int64_t last = (cn - 1) * step;
  const int64_t body_begin = std::max<int64_t>(0, last), body_end = std::min<int64_t>(n, n + last);
  if (cn == 1 || body_begin >= body_end) {
    for (int64_t k = 0; k < cn; ++k) channel(k, k * step, k * step + n, true);
    return;
  }
  const auto ends = [&](int64_t a, int64_t b) {  // [a, b): the positions before or after the body
    if constexpr (MaskedLoadsSafe<X>()) {
      AccumulateEnds<kMask>(y, x, m, a, b, cn, step, n, t.x_channel_stride, t.m_channel_stride);
    } else {
      for (int64_t k = 0; k < cn; ++k) {
        channel(k, std::max(a, k * step), std::min(b, k * step + n), false);
      }
    }
  };
  ends(std::min<int64_t>(0, last), body_begin);
  const int64_t dx = t.x_channel_stride - step, dm = t.m_channel_stride - step;
  if constexpr (sizeof(X) < sizeof(T)) {
    AccumulateBodyHalfX<kMask>(y, x, m, body_begin, body_end, cn, dx, dm);
    // The body's last part-vector with the right ends where masked loads are safe.
    const int64_t j = MaskedLoadsSafe<X>() ? BodyVectorsEnd<T>(body_begin, body_end) : body_end;
    ends(j, std::max(n, n + last));
  } else {
    ForRow<T>(static_cast<size_t>(body_end - body_begin), [&](auto d, size_t i) {
      const int64_t j = body_begin + static_cast<int64_t>(i);
      const X* px = x + j;
      int64_t e = j;  // element of channel k's row
      const auto request = [&] {
        if (hn::Lanes(d) > 1 && e < pf_n && e % kLine < static_cast<int64_t>(hn::Lanes(d))) {
          __builtin_prefetch(px + pf_delta, 0, 2);
        }
      };
      auto acc = hn::LoadU(d, y + j);
      if constexpr (kMask) {
        const T* pm = m + j;
        for (int64_t k = 0; k < cn; ++k, px += dx, pm += dm, e -= step) {
          request();
          acc = hn::MulAdd(hn::LoadU(d, pm), LoadF(d, px), acc);
        }
      } else {
        for (int64_t k = 0; k < cn; ++k, px += dx, e -= step) {
          request();
          acc = hn::Add(acc, LoadF(d, px));
        }
      }
      hn::StoreU(acc, d, y + j);
    });
    ends(body_end, std::max(n, n + last));
  }
  // The lines of x the body did not request: each channel's ends.
  for (int64_t k = 0; k < cn && pf_n > 0; ++k) {
    const X* pk = x + k * t.x_channel_stride + pf_delta;
    __builtin_prefetch(pk, 0, 2);
    __builtin_prefetch(pk + std::min(n, pf_n) - 1, 0, 2);
  }
}

// Channels in groups of up to kTileGroupChannels (their x pointers stepped from one
// base: no pointer per channel held), each group over all rows before the next.
constexpr int64_t kTileGroupChannels = 8;

template <class T, class X>
void AccumulateTileT(const ShiftSumTile<T, X>& t) {
  for (int64_t c0 = 0; c0 < t.channels; c0 += kTileGroupChannels) {
    const int64_t cn = std::min(kTileGroupChannels, t.channels - c0);
    for (int64_t r = 0; r < t.rows; ++r) {
      t.m ? AccumulateTileRow<true>(t, r, c0, cn) : AccumulateTileRow<false>(t, r, c0, cn);
    }
  }
}

// Where pixel t's run of C values starts in the phase rows (`len` values each) of a
// step of |step| = a: phase t mod a, index t / a, or counted from the row's end when
// the phases are stored reversed (step < 0, `reversed`).
HWY_INLINE int64_t PhaseRunStart(int64_t t, int64_t a, int64_t len, int64_t C, bool reversed) {
  const int64_t q = t / a;
  return (t % a) * len + (reversed ? len - C - q : q);
}

template <class T, class X>
void PhasesT(const ShiftSumPhaseRow<T, X>& s) {
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(X));
  const int64_t a = s.step < 0 ? -s.step : s.step;
  const bool forwards = s.step < 0;
  const size_t C = static_cast<size_t>(s.C);
  // Pixel k of the walk (counted in walk order, into the next row past this one's end).
  const auto walk_pixel = [&](int64_t k) -> const X* {
    const X* row = k < s.W ? s.x : s.next_x;
    if (k >= s.W) k -= s.W;
    if (!row || k >= s.W) return nullptr;
    return row + (forwards ? k : s.W - 1 - k) * s.C;
  };
  for (int64_t k = 0; k < s.W; ++k) {
    if (const X* ahead = walk_pixel(k + s.ahead)) {
      for (int64_t i = 0; i < s.C; i += kLine) __builtin_prefetch(ahead + i, 0, 2);
    }
    const int64_t t = forwards ? k : s.W - 1 - k;
    T* HWY_RESTRICT y = s.phases + PhaseRunStart(t, a, s.len, s.C, forwards);
    const X* HWY_RESTRICT x = s.x + t * s.C;
    if (s.m) {
      const T mt = s.m[t];
      ForRow<T>(C, [&](auto d, size_t i) {
        hn::StoreU(hn::MulAdd(hn::Set(d, mt), LoadF(d, x + i), hn::LoadU(d, y + i)), d, y + i);
      });
    } else {
      ForRow<T>(C, [&](auto d, size_t i) {
        hn::StoreU(hn::Add(hn::LoadU(d, y + i), LoadF(d, x + i)), d, y + i);
      });
    }
  }
}

// Four y blocks at a time: each sums its channels in one dependent chain of
// multiply-adds, so independent blocks side by side hide the latency (one block at a
// time ran at a quarter of the speed). kSumBlocks vectors past either end of a plane stay
// within its padding.
constexpr int64_t kSumBlocks =
    std::max<int64_t>(1, std::min<int64_t>(4, kShiftSumPlanePadBytes / HWY_MAX_BYTES));

template <class T>
void SumPlanesT(const ShiftSumPlanesRow<T>& r) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr int64_t B = kSumBlocks;
  alignas(64) T part[HWY_MAX_BYTES / sizeof(T)];
  for (int64_t j = r.y_begin; j < r.y_end; j += B * N) {
    int64_t lanes[B];  // of each block within [y_begin, y_end): N, fewer, or none
    for (int64_t k = 0; k < B; ++k)
      lanes[k] = std::max<int64_t>(0, std::min(N, r.y_end - j - k * N));
    VecSlots<hn::ScalableTag<T>, B> acc;
    for (int64_t k = 0; k < B; ++k) acc.Set(k, hn::Zero(d));
    const int64_t span = std::min(B * N, r.y_end - j);
    for (int64_t c = 0; c < r.channels; ++c) {
      const int64_t i = j - (r.offset0 + c * r.step);  // the first block's first x position
      if (i >= r.n || i + span <= 0) continue;         // the channel misses these blocks
      // Lanes outside the channel's [0, n) read the zero padding: m * 0 + acc = acc
      // (acc is never -0), so they keep their sums.
      const T* x = r.planes + c * r.plane_stride + i;
      if (r.m) {
        const T* m = r.m + c * r.m_channel_stride + i;
        for (int64_t k = 0; k < B; ++k)
          acc.Set(k, hn::MulAdd(hn::LoadU(d, m + k * N), hn::LoadU(d, x + k * N), acc.Get(k)));
      } else {
        for (int64_t k = 0; k < B; ++k) acc.Set(k, hn::Add(acc.Get(k), hn::LoadU(d, x + k * N)));
      }
    }
    for (int64_t k = 0; k < B; ++k) {
      if (r.scale != T(1)) acc.Set(k, hn::Mul(acc.Get(k), hn::Set(d, r.scale)));
      if (lanes[k] == N) {
        hn::StoreU(acc.Get(k), d, r.y + j + k * N);
      } else if (lanes[k] > 0) {
        hn::Store(acc.Get(k), d, part);
        std::copy(part, part + lanes[k], r.y + j + k * N);
      }
    }
  }
}

// The systolic walk of ShiftSumSkew for NB vectors of channels and R rows side by
// side (two rows: two independent chains of multiply-add -> rotate -> blend, whose
// latency sets the pace of one). Lane j of block k holds channel k * L + j. A pixel's
// step adds its channels, then rotates every block up one lane: lane 0 of block k
// takes the top lane of block k - 1 (block 0: zero, a new sum), and the top lane of
// the last block (channel C - 1) is a finished y element, read from lane 0 of its
// rotation. Lanes past channel C - 1 in the last block only move up: what they read
// never reaches a sum. Pixels t = j - offset0 - c * step of one y element are a step
// apart only within a phase (t mod |step|), so each phase is a walk of its own, in
// the direction that meets channel 0 first.
template <class T, class X, int NB, int R, bool kMask>
void SkewT(const ShiftSumSkewRows<T, X>& s) {
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;
  using TI = hn::TFromD<decltype(di)>;
  using V = hn::Vec<decltype(d)>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t C = s.C, W = s.W, step = s.step, a = step < 0 ? -step : step;
  const int64_t top = C - 1 - (NB - 1) * L;  // the lane of channel C - 1
  HWY_ALIGN TI up[HWY_MAX_BYTES / sizeof(T)];
  HWY_ALIGN TI up_last[HWY_MAX_BYTES / sizeof(T)];
  for (int64_t j = 0; j < L; ++j) {
    up[j] = static_cast<TI>(j == 0 ? L - 1 : j - 1);
    up_last[j] = static_cast<TI>(j == 0 ? top : j - 1);
  }
  const auto rotate = hn::SetTableIndices(d, up);
  const auto rotate_last = hn::SetTableIndices(d, up_last);
  const auto lane0 = hn::FirstN(d, 1);
  // Multiplying by 1 is exact, so the scale is always applied (the tile kernel's bits).
  const T scale = s.scale;
  const X* xs[R];
  const T* ms[R];
  for (int r = 0; r < R; ++r) {
    xs[r] = s.x[r];
    ms[r] = s.m[r];
  }
  const int64_t offset0 = step < 0 ? (C - 1) * a : 0;
  const int64_t dt = -step;
  const auto pixels_of = [&](int64_t phase) { return (W - 1 - phase) / a + 1; };
  // Two phases of as many pixels are walked side by side when the registers allow:
  // twice the independent chains, and the two pixels of a step lie next to each other.
  constexpr bool kPairs = R * NB <= 4;
  const auto paired = [&](int64_t phase) {
    return kPairs && phase + 1 < a && pixels_of(phase) == pixels_of(phase + 1);
  };
  // Lines of the prefetch range requested a step, spread over all the walks' steps.
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(X));
  const int64_t lines = (s.prefetch_count + kLine - 1) / kLine;
  int64_t steps = 0;
  for (int64_t phase = 0; phase < a; phase += paired(phase) ? 2 : 1) {
    steps += pixels_of(phase) + C - 1;
  }
  const int64_t lines_a_step = (lines + steps - 1) / steps;
  const X* prefetch = s.prefetch;
  int64_t lines_left = lines;
  const auto request = [&]() {
    for (int64_t i = 0; i < lines_a_step && lines_left > 0; ++i, --lines_left) {
      __builtin_prefetch(prefetch, 0, 2);  // into L2 (prefetcht1)
      prefetch += kLine;
    }
  };
  // Walks phases [phase, phase + P), each its own systolic array per row.
  const auto walk = [&](int64_t phase, auto phases) NORMKIT_ATTR {
    constexpr int P = decltype(phases)::value;
    const int64_t pixels = pixels_of(phase);
    int64_t t0[P];  // the first pixel walked
    T* ys[R][P];
    for (int p = 0; p < P; ++p) {
      t0[p] = step > 0 ? phase + p + a * (pixels - 1) : phase + p;
      for (int r = 0; r < R; ++r) ys[r][p] = s.y[r] + t0[p] + offset0 + (C - 1) * step;
    }
    // Block k of row r, phase p: slot (r * P + p) * NB + k.
    VecSlots<hn::ScalableTag<T>, R * P * NB> acc;
    const auto at = [](int r, int p, int k) { return static_cast<size_t>((r * P + p) * NB + k); };
    for (int r = 0; r < R; ++r)
      for (int p = 0; p < P; ++p)
        for (int k = 0; k < NB; ++k) acc.Set(at(r, p, k), hn::Zero(d));
    // One step: every partial sum moves one channel up, and the top lane of the last
    // block, a finished y element, leaves.
    const auto advance = [&](int64_t q) NORMKIT_ATTR {
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < P; ++p) {
          VecSlots<hn::ScalableTag<T>, NB> moved;
          for (int k = 0; k < NB; ++k)
            moved.Set(
                k, hn::TableLookupLanes(acc.Get(at(r, p, k)), k == NB - 1 ? rotate_last : rotate));
          ys[r][p][q * dt] = hn::GetLane(moved.Get(NB - 1)) * scale;
          acc.Set(at(r, p, 0), hn::IfThenZeroElse(lane0, moved.Get(0)));
          for (int k = 1; k < NB; ++k)
            acc.Set(at(r, p, k), hn::IfThenElse(lane0, moved.Get(k - 1), moved.Get(k)));
        }
      }
    };
    int64_t q = 0;
    for (; q < pixels; ++q) {
      request();
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < P; ++p) {
          const int64_t t = t0[p] + q * dt;
          const X* x = xs[r] + t * C;
          if constexpr (kMask) {
            const V m = hn::Set(d, ms[r][t]);
            for (int k = 0; k < NB; ++k)
              acc.Set(at(r, p, k), hn::MulAdd(m, LoadF(d, x + k * L), acc.Get(at(r, p, k))));
          } else {
            for (int k = 0; k < NB; ++k)
              acc.Set(at(r, p, k), hn::Add(acc.Get(at(r, p, k)), LoadF(d, x + k * L)));
          }
        }
      }
      advance(q);
    }
    for (; q < pixels + C - 1; ++q) {  // the last pixels' sums drain out
      request();
      advance(q);
    }
  };
  // (Without kPairs no pair is walked, and the pair walk is not even compiled.)
  constexpr int kPair = kPairs ? 2 : 1;
  for (int64_t phase = 0; phase < a;) {
    if (paired(phase)) {
      walk(phase, std::integral_constant<int, kPair>());
      phase += 2;
    } else {
      walk(phase, std::integral_constant<int, 1>());
      phase += 1;
    }
  }
}

template <class T, class X, int NB>
void SkewBlocksT(const ShiftSumSkewRows<T, X>& s) {
  const bool two = s.y[1] != nullptr;
  if (s.m[0]) return two ? SkewT<T, X, NB, 2, true>(s) : SkewT<T, X, NB, 1, true>(s);
  return two ? SkewT<T, X, NB, 2, false>(s) : SkewT<T, X, NB, 1, false>(s);
}

template <class T, class X>
void SkewAnyT(const ShiftSumSkewRows<T, X>& s) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  const int64_t blocks = (s.C + L - 1) / L;
  switch (blocks) {
    case 1: return SkewBlocksT<T, X, 1>(s);
    case 2: return SkewBlocksT<T, X, 2>(s);
    case 3: return SkewBlocksT<T, X, 3>(s);
    default: return SkewBlocksT<T, X, 4>(s);
  }
}

// ShiftSumSkewAxpy for NB vectors of channels and R rows. Block k covers channels
// [c_k, c_k + L), c_k = k * L, the last one ending at channel C - 1 (it may overlap the
// one before: every block's x is loaded before any is stored, so the shared lanes
// store the same values). g[k] lane j holds r[t + offset0 + (c_k + j) * step] for the
// pixel t being updated; the next pixel of the phase, t + |step|, finds those values
// one lane down (step > 0) or up, and one new value in the top (bottom) lane.
template <class T, class X, int NB, int R, bool kMask>
void SkewAxpyT(const ShiftSumSkewAxpyRows<T, X>& s) {
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;
  using TI = hn::TFromD<decltype(di)>;
  using V = hn::Vec<decltype(d)>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t C = s.C, W = s.W, step = s.step, a = step < 0 ? -step : step;
  const int64_t offset0 = step < 0 ? (C - 1) * a : 0;
  HWY_ALIGN TI moves[HWY_MAX_BYTES / sizeof(T)];
  for (int64_t j = 0; j < L; ++j) {
    moves[j] = static_cast<TI>(step > 0 ? (j + 1 < L ? j + 1 : j) : (j > 0 ? j - 1 : 0));
  }
  const auto move = hn::SetTableIndices(d, moves);
  const auto fresh =
      step > 0 ? hn::Not(hn::FirstN(d, static_cast<size_t>(L - 1))) : hn::FirstN(d, 1);
  const int64_t fresh_lane = step > 0 ? L - 1 : 0;
  int64_t first[NB];
  for (int k = 0; k < NB; ++k) first[k] = k + 1 < NB ? k * L : C - L;
  X* xs[R];
  const T* rs[R];
  const T* ms[R];
  for (int r = 0; r < R; ++r) {
    xs[r] = s.x[r];
    rs[r] = s.r[r] + offset0;
    ms[r] = s.m[r];
  }
  HWY_ALIGN T lanes[HWY_MAX_BYTES / sizeof(T)];
  for (int64_t phase = 0; phase < a && phase < W; ++phase) {
    VecSlots<hn::ScalableTag<T>, R * NB> g;  // block k of row r: slot r * NB + k
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < NB; ++k) {
        for (int64_t j = 0; j < L; ++j) lanes[j] = rs[r][phase + (first[k] + j) * step];
        g.Set(r * NB + k, hn::Load(d, lanes));
      }
    for (int64_t t = phase; t < W; t += a) {
      for (int r = 0; r < R; ++r) {
        X* x = xs[r] + t * C;
        const V f = hn::Set(d, kMask ? s.a * ms[r][t] : s.a);
        VecSlots<hn::ScalableTag<T>, NB> v;
        for (int k = 0; k < NB; ++k) v.Set(k, LoadF(d, x + first[k]));
        for (int k = 0; k < NB; ++k)
          StoreF(d, hn::MulAdd(f, g.Get(r * NB + k), v.Get(k)), x + first[k]);
        if (t + a < W) {
          for (int k = 0; k < NB; ++k) {
            const T in = rs[r][t + a + (first[k] + fresh_lane) * step];
            g.Set(r * NB + k, hn::IfThenElse(fresh, hn::Set(d, in),
                                             hn::TableLookupLanes(g.Get(r * NB + k), move)));
          }
        }
      }
    }
  }
}

template <class T, class X, int NB>
void SkewAxpyBlocksT(const ShiftSumSkewAxpyRows<T, X>& s) {
  const bool two = s.x[1] != nullptr;
  if (s.m[0]) return two ? SkewAxpyT<T, X, NB, 2, true>(s) : SkewAxpyT<T, X, NB, 1, true>(s);
  return two ? SkewAxpyT<T, X, NB, 2, false>(s) : SkewAxpyT<T, X, NB, 1, false>(s);
}

template <class T, class X>
void SkewAxpyAnyT(const ShiftSumSkewAxpyRows<T, X>& s) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  switch ((s.C + L - 1) / L) {
    case 1: return SkewAxpyBlocksT<T, X, 1>(s);
    case 2: return SkewAxpyBlocksT<T, X, 2>(s);
    case 3: return SkewAxpyBlocksT<T, X, 3>(s);
    default: return SkewAxpyBlocksT<T, X, 4>(s);
  }
}

template <class T>
int64_t SkewAxpyMinChannelsT() {
  return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
}

template <class T>
int64_t SkewMaxChannelsT() {
  return 4 * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
}

// y stored as Y: T, or a half type (each value rounded as it is stored). The peel, body
// and tail are written out here, in DivideByMaskT and in PhasesAdjointT: one shared row
// helper (a ForRow with the streaming peel) changed GCC's inlining, and the bfloat16
// adjoint on malloc'd x went from 12.7-12.9 to 15.6-16.9 ms (bench/shift_sum_half_timer.c).
template <bool kStream, class T, class Y>
void ScaledProductT(Y* HWY_RESTRICT y, const T* HWY_RESTRICT x, const T* HWY_RESTRICT m, T s,
                    size_t n) {
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 1> d1;
  const size_t N = hn::Lanes(d);
  const auto one = [&](auto dt, size_t i) {
    const auto v = hn::Mul(hn::Set(dt, s), hn::LoadU(dt, x + i));
    PutF<kStream>(dt, m ? hn::Mul(v, hn::LoadU(dt, m + i)) : v, y + i);
  };
  size_t i = 0;
  if constexpr (kStream) {  // Stream needs aligned addresses: peel to the next one
    for (; i < n && !IsVectorAligned(d, y + i); ++i) one(d1, i);
  }
  for (; i + N <= n; i += N) one(d, i);
  for (; i < n; ++i) one(d1, i);
}

// How ShiftSumWindowsToPixels forms a pixel's values from its window values v.
enum class PixelForm { kScale, kScaleMask, kDivideByMask };

// ShiftSumWindowsToPixels for one step and form: a pixel's channels [c, c + N) are
// a[w + (c + k) * kStep], k < N.
template <int kStep, PixelForm kForm, class T>
void WindowsToPixelsT(const T* HWY_RESTRICT a, const T* HWY_RESTRICT m, T s, int64_t pixels,
                      int64_t channels, T* HWY_RESTRICT x) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t w = 0; w < pixels; ++w) {
    for (int64_t c = 0; c < channels; ++c) {
      const T v = a[w + c * kStep];
      T out = s * v;
      if constexpr (kForm == PixelForm::kScaleMask) out = out * m[w];
      if constexpr (kForm == PixelForm::kDivideByMask) out = m[w] != T(0) ? v / m[w] : T(0);
      x[w * channels + c] = out;
    }
  }
#else
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, s);
  const auto channel_vector = [&](const T* aw, int64_t c) {
    if constexpr (kStep == 1) {
      return hn::LoadU(d, aw + c);
    } else if constexpr (kStep == -1) {
      return hn::Reverse(d, hn::LoadU(d, aw - c - (N - 1)));
    } else if constexpr (kStep == 2) {
      return hn::ConcatEven(d, hn::LoadU(d, aw + 2 * c + N), hn::LoadU(d, aw + 2 * c));
    } else {  // -2: the even lanes of the 2N values ending at aw - 2c, reversed
      const T* p = aw - 2 * c - 2 * N + 2;
      return hn::Reverse(d, hn::ConcatEven(d, hn::LoadU(d, p + N), hn::LoadU(d, p)));
    }
  };
  for (int64_t w = 0; w < pixels; ++w) {
    T* xw = x + w * channels;
    if constexpr (kForm == PixelForm::kDivideByMask) {
      // ShiftSumDivideByMask's steps: z / m, or 0 where m = 0 (never 0 / 0).
      if (m[w] == T(0)) {
        for (int64_t c = 0; c < channels; c += N) hn::StoreU(hn::Zero(d), d, xw + c);
        continue;
      }
      const auto mw = hn::Set(d, m[w]);
      for (int64_t c = 0; c < channels; c += N) {
        hn::StoreU(hn::Div(channel_vector(a + w, c), mw), d, xw + c);
      }
    } else {
      const auto mw = kForm == PixelForm::kScaleMask ? hn::Set(d, m[w]) : vs;
      for (int64_t c = 0; c < channels; c += N) {
        const auto v = hn::Mul(vs, channel_vector(a + w, c));
        hn::StoreU(kForm == PixelForm::kScaleMask ? hn::Mul(v, mw) : v, d, xw + c);
      }
    }
  }
#endif
}

template <class T>
void WindowsToPixelsAny(const T* a, int64_t step, const T* m, T s, int64_t pixels, int64_t channels,
                        T* x, bool divide) {
  const auto walk = [&](auto form) {
    constexpr PixelForm kForm = decltype(form)::value;
    switch (step) {
      case 1: return WindowsToPixelsT<1, kForm>(a, m, s, pixels, channels, x);
      case -1: return WindowsToPixelsT<-1, kForm>(a, m, s, pixels, channels, x);
      case 2: return WindowsToPixelsT<2, kForm>(a, m, s, pixels, channels, x);
      default: return WindowsToPixelsT<-2, kForm>(a, m, s, pixels, channels, x);
    }
  };
  if (!m) return walk(std::integral_constant<PixelForm, PixelForm::kScale>());
  if (divide) return walk(std::integral_constant<PixelForm, PixelForm::kDivideByMask>());
  walk(std::integral_constant<PixelForm, PixelForm::kScaleMask>());
}

template <bool kStream, bool kUpdate, class T, class X>
void PhasesAdjointT(const ShiftSumPhaseAdjointRow<T, X>& s) {
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 1> d1;
  const size_t N = hn::Lanes(d), C = static_cast<size_t>(s.C);
  const int64_t a = s.step < 0 ? -s.step : s.step;
  const bool forwards = s.step < 0;
  for (int64_t t = 0; t < s.W; ++t) {
    const T* HWY_RESTRICT src = s.phases + PhaseRunStart(t, a, s.len, s.C, forwards);
    X* HWY_RESTRICT dst = s.x + t * s.C;
    const T mt = s.m ? s.m[t] : T(1);
    const auto one = [&](auto dt, size_t i) {
      if constexpr (kUpdate) {
        const auto a = s.m ? hn::Mul(hn::Set(dt, s.scale), hn::Set(dt, mt)) : hn::Set(dt, s.scale);
        StoreF(dt, hn::MulAdd(a, hn::LoadU(dt, src + i), LoadF(dt, dst + i)), dst + i);
      } else {
        const auto v = hn::Mul(hn::Set(dt, s.scale), hn::LoadU(dt, src + i));
        PutF<kStream>(dt, s.m ? hn::Mul(v, hn::Set(dt, mt)) : v, dst + i);
      }
    };
    size_t i = 0;
    if constexpr (kStream) {  // Stream needs aligned addresses: peel to the next one
      for (; i < C && !IsVectorAligned(d, dst + i); ++i) one(d1, i);
    }
    for (; i + N <= C; i += N) one(d, i);
    for (; i < C; ++i) one(d1, i);
  }
}

template <class T>
void ScaleT(T* HWY_RESTRICT y, T s, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    hn::StoreU(hn::Mul(hn::Set(d, s), hn::LoadU(d, y + i)), d, y + i);
  });
}

template <class T>
void AddSquaresT(T* HWY_RESTRICT p, const T* HWY_RESTRICT m, size_t n) {
  if (m) {
    ForRow<T>(n, [&](auto d, size_t i) {
      const auto v = hn::LoadU(d, m + i);
      hn::StoreU(hn::MulAdd(v, v, hn::LoadU(d, p + i)), d, p + i);
    });
  } else {
    ForRow<T>(n, [&](auto d, size_t i) {
      hn::StoreU(hn::Add(hn::LoadU(d, p + i), hn::Set(d, T(1))), d, p + i);
    });
  }
}

template <class T>
void DivideT(T* z, const T* y, const T* HWY_RESTRICT p, T a, T b, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    const auto den = hn::MulAdd(hn::Set(d, a), hn::LoadU(d, p + i), hn::Set(d, b));
    const auto nonzero = hn::Ne(den, hn::Zero(d));
    // Divide by 1 where the denominator is 0, then zero those lanes: never 0/0.
    const auto q = hn::Div(hn::LoadU(d, y + i), hn::IfThenElse(nonzero, den, hn::Set(d, T(1))));
    hn::StoreU(hn::IfThenElseZero(nonzero, q), d, z + i);
  });
}

// y - r after ScaleT (when kScale), then DivideT, in one pass: the same operations per element.
template <bool kScale, class T>
void GapResidualT(T* HWY_RESTRICT r, const T* HWY_RESTRICT y, const T* HWY_RESTRICT p, T scale, T a,
                  T b, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    auto v = hn::LoadU(d, r + i);
    if constexpr (kScale) v = hn::Mul(hn::Set(d, scale), v);
    v = hn::Sub(hn::LoadU(d, y + i), v);
    const auto den = hn::MulAdd(hn::Set(d, a), hn::LoadU(d, p + i), hn::Set(d, b));
    const auto nonzero = hn::Ne(den, hn::Zero(d));
    const auto q = hn::Div(v, hn::IfThenElse(nonzero, den, hn::Set(d, T(1))));
    hn::StoreU(hn::IfThenElseZero(nonzero, q), d, r + i);
  });
}

template <bool kStream, class T, class X>
void DivideByMaskT(X* HWY_RESTRICT x, const T* HWY_RESTRICT z, const T* HWY_RESTRICT m, size_t n) {
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 1> d1;
  const size_t N = hn::Lanes(d);
  const auto one = [&](auto dt, size_t i) {
    const auto mv = hn::LoadU(dt, m + i);
    const auto nonzero = hn::Ne(mv, hn::Zero(dt));
    const auto q = hn::Div(hn::LoadU(dt, z + i), hn::IfThenElse(nonzero, mv, hn::Set(dt, T(1))));
    PutF<kStream>(dt, hn::IfThenElseZero(nonzero, q), x + i);
  };
  size_t i = 0;
  if constexpr (kStream) {  // Stream needs aligned addresses: peel to the next one
    for (; i < n && !IsVectorAligned(d, x + i); ++i) one(d1, i);
  }
  for (; i + N <= n; i += N) one(d, i);
  for (; i < n; ++i) one(d1, i);
}

template <class T, class X>
void AxpyT(X* HWY_RESTRICT x, const T* HWY_RESTRICT r, const T* HWY_RESTRICT m, T a, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    const auto t = m ? hn::Mul(hn::Set(d, a), hn::LoadU(d, m + i)) : hn::Set(d, a);
    StoreF(d, hn::MulAdd(t, hn::LoadU(d, r + i), LoadF(d, x + i)), x + i);
  });
}

// ShiftSumPlaceWindows in math type T (float or double), the rows walked as one span (so
// that only its ends are peeled: a row of seed 003's bfloat16 stack is 620 bytes, and
// plain stores of each row's ends between streamed lines left it at 0.25-0.39 of a
// copy). A vector lies in a window, in zeros, across an edge of a window (the window's
// first or last vector, its lanes moved into place in registers; assembled in memory
// instead, the load waits for every streamed store before it) or across rows (the
// rows' parts, each zero outside its row, or-ed).
template <bool kStream, class T, class XI, class XO>
void PlaceWindowsT(const ShiftSumWindowRows<XI, XO>& s) {
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;
  using TI = hn::TFromD<decltype(di)>;
  const hn::CappedTag<T, 1> d1;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), len = s.len;
  // Lanes l of row k at columns c + l (c may be negative), zero outside the window.
  const auto row_vector = [&](auto dt, int64_t k, int64_t c) {
    const XI* HWY_RESTRICT src = s.src[k];
    const int64_t n = static_cast<int64_t>(hn::Lanes(dt)), at = s.at[k], end = at + len;
    if (src == nullptr || c + n <= at || c >= end) return hn::Zero(dt);
    if (c >= at && c + n <= end) return LoadF(dt, src + (c - at));
    if constexpr (hn::MaxLanes(decltype(dt)()) > 1) {
      const auto lane = hn::Iota(di, TI(0));
      if (len >= N && c < at) {  // lanes [at - c, N): the window's first values
        const TI k0 = static_cast<TI>(at - c);
        const auto idx = hn::Max(hn::Sub(lane, hn::Set(di, k0)), hn::Zero(di));
        const auto v = hn::TableLookupLanes(LoadF(d, src), hn::IndicesFromVec(d, idx));
        return hn::IfThenZeroElse(hn::FirstN(d, static_cast<size_t>(k0)), v);
      }
      if (len >= N) {  // lanes [0, end - c): the window's last values
        const TI k1 = static_cast<TI>(end - c);
        const auto idx = hn::Min(hn::Add(lane, hn::Set(di, static_cast<TI>(N) - k1)),
                                 hn::Set(di, static_cast<TI>(N - 1)));
        const auto v = hn::TableLookupLanes(LoadF(d, src + (len - N)), hn::IndicesFromVec(d, idx));
        return hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(k1)), v);
      }
      auto v = hn::Zero(d);  // a window shorter than a vector: lane by lane
      for (int64_t l = std::max<int64_t>(0, at - c); l < N && c + l < end; ++l) {
        const auto only_l = hn::AndNot(hn::FirstN(d, static_cast<size_t>(l)),
                                       hn::FirstN(d, static_cast<size_t>(l + 1)));
        v = hn::IfThenElse(only_l, hn::Set(d, hn::GetLane(LoadF(d1, src + (c + l - at)))), v);
      }
      return v;
    } else {
      return hn::Zero(dt);  // unreachable: one lane is in the window or out of it
    }
  };
  const int64_t total = s.rows * s.width;
  int64_t t = 0, k = 0, c = 0;  // position in the span, its row and column
  const auto advance = [&](int64_t n) {
    t += n;
    c += n;
    while (c >= s.width && k + 1 < s.rows) c -= s.width, ++k;
  };
  if constexpr (kStream) {  // Stream needs aligned addresses: peel to the next one
    while (t < total && !IsVectorAligned(d, s.dst + t)) {
      StoreF(d1, row_vector(d1, k, c), s.dst + t);
      advance(1);
    }
  }
  for (; t + N <= total; advance(N)) {
    auto v = row_vector(d, k, c);
    for (int64_t kk = k + 1, cc = c - s.width; cc + N > 0 && kk < s.rows; ++kk, cc -= s.width) {
      v = hn::Or(v, row_vector(d, kk, cc));  // rows shorter than a vector: more than two
    }
    PutF<kStream>(d, v, s.dst + t);
  }
  for (; t < total; advance(1)) StoreF(d1, row_vector(d1, k, c), s.dst + t);
}

template <class T, class XI, class XO>
void PlaceWindowsAny(const ShiftSumWindowRows<XI, XO>& rows) {
  rows.stream ? PlaceWindowsT<true, T>(rows) : PlaceWindowsT<false, T>(rows);
}

// The entry points of one stored type T, as a table of function pointers: HWY_EXPORT takes
// plain functions, so one exported function per type returns its table (a new storage type
// adds one line here and one in the dispatch below, no kernel body).
template <class T>
const ShiftSumKernelTable<T>* KernelTableT() {
  static constexpr ShiftSumKernelTable<T> kTable = {
      [](T* y, const T* x, const T* m, int64_t n) { AccumulateT(y, x, m, n); },
      [](const ShiftSumTile<T>& tile) { AccumulateTileT(tile); },
      [](const ShiftSumPlanesRow<T>& row) { SumPlanesT(row); },
      [](const ShiftSumSkewRows<T>& rows) { SkewAnyT(rows); },
      [] { return SkewMaxChannelsT<T>(); },
      [](const ShiftSumPhaseRow<T>& row) { PhasesT(row); },
      [](const ShiftSumPhaseAdjointRow<T>& row) {
        row.update   ? PhasesAdjointT<false, true>(row)
        : row.stream ? PhasesAdjointT<true, false>(row)
                     : PhasesAdjointT<false, false>(row);
      },
      [](const ShiftSumSkewAxpyRows<T>& rows) { SkewAxpyAnyT(rows); },
      [] { return SkewAxpyMinChannelsT<T>(); },
      [](T* y, const T* x, const T* m, T s, int64_t n, bool stream) {
        stream ? ScaledProductT<true>(y, x, m, s, n) : ScaledProductT<false>(y, x, m, s, n);
      },
      [](const T* x, int64_t pixels, int64_t channels, int64_t pixel_stride, T* planes,
         int64_t plane_stride, const T* prefetch, int64_t prefetch_count) {
        ToPlanesT(x, pixels, channels, pixel_stride, planes, plane_stride, prefetch,
                  prefetch_count);
      },
      [](const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s, int64_t pixels,
         int64_t channels, T* x,
         bool stream) { FromPlanesAny(a, a_stride, m, m_stride, s, pixels, channels, x, stream); },
      [](const T* a, int64_t step, const T* m, T s, int64_t pixels, int64_t channels, T* x,
         bool divide) { WindowsToPixelsAny(a, step, m, s, pixels, channels, x, divide); },
      [](const T* planes, int64_t plane_stride, const T* r, int64_t r_step, const T* m,
         int64_t m_stride, T a, int64_t pixels, int64_t channels, T* x) {
        FromPlanesAxpyT(planes, plane_stride, r, r_step, m, m_stride, a, pixels, channels, x);
      },
      [](T* y, T s, int64_t n) { ScaleT(y, s, n); },
      [](T* p, const T* m, int64_t n) { AddSquaresT(p, m, n); },
      [](T* z, const T* y, const T* p, T a, T b, int64_t n) { DivideT(z, y, p, a, b, n); },
      [](T* r, const T* y, const T* p, T scale, T a, T b, int64_t n) {
        scale != T(1) ? GapResidualT<true>(r, y, p, scale, a, b, n)
                      : GapResidualT<false>(r, y, p, scale, a, b, n);
      },
      [](T* x, const T* z, const T* m, int64_t n, bool stream) {
        stream ? DivideByMaskT<true>(x, z, m, n) : DivideByMaskT<false>(x, z, m, n);
      },
      [](T* x, const T* r, const T* m, T a, int64_t n) { AxpyT(x, r, m, a, n); },
      [](const ShiftSumWindowRows<T, T>& rows) { PlaceWindowsAny<T>(rows); },
  };
  return &kTable;
}

const ShiftSumKernelTable<float>* KernelTableFloat() {
  return KernelTableT<float>();
}
const ShiftSumKernelTable<double>* KernelTableDouble() {
  return KernelTableT<double>();
}

// The kernels that read x, for x stored as X and float math (ShiftSumStoredXKernelTable).
template <class X>
const ShiftSumStoredXKernelTable<X>* StoredXKernelTableT() {
  static constexpr ShiftSumStoredXKernelTable<X> kTable = {
      [](const ShiftSumTile<float, X>& tile) { AccumulateTileT(tile); },
      [](const ShiftSumSkewRows<float, X>& rows) { SkewAnyT(rows); },
      [](const ShiftSumPhaseRow<float, X>& row) { PhasesT(row); },
      [](const X* x, int64_t pixels, int64_t channels, int64_t pixel_stride, float* planes,
         int64_t plane_stride, const X* prefetch, int64_t prefetch_count) {
        ToPlanesT(x, pixels, channels, pixel_stride, planes, plane_stride, prefetch,
                  prefetch_count);
      },
      [](const ShiftSumPhaseAdjointRow<float, X>& row) {
        row.update   ? PhasesAdjointT<false, true>(row)
        : row.stream ? PhasesAdjointT<true, false>(row)
                     : PhasesAdjointT<false, false>(row);
      },
      [](X* y, const float* x, const float* m, float s, int64_t n, bool stream) {
        stream ? ScaledProductT<true>(y, x, m, s, n) : ScaledProductT<false>(y, x, m, s, n);
      },
      [](const float* a, int64_t a_stride, const float* m, int64_t m_stride, float s,
         int64_t pixels, int64_t channels, X* x,
         bool stream) { FromPlanesAny(a, a_stride, m, m_stride, s, pixels, channels, x, stream); },
      [](X* x, const float* z, const float* m, int64_t n, bool stream) {
        stream ? DivideByMaskT<true>(x, z, m, n) : DivideByMaskT<false>(x, z, m, n);
      },
      [](const ShiftSumSkewAxpyRows<float, X>& rows) { SkewAxpyAnyT(rows); },
      [](X* x, const float* r, const float* m, float a, int64_t n) { AxpyT(x, r, m, a, n); },
      [](const ShiftSumWindowRows<X, X>& rows) { PlaceWindowsAny<float>(rows); },
      [](const ShiftSumWindowRows<X, float>& rows) { PlaceWindowsAny<float>(rows); },
      [](const ShiftSumWindowRows<float, X>& rows) { PlaceWindowsAny<float>(rows); },
  };
  return &kTable;
}

const ShiftSumStoredXKernelTable<hwy::bfloat16_t>* StoredXKernelTableBF16() {
  return StoredXKernelTableT<hwy::bfloat16_t>();
}
const ShiftSumStoredXKernelTable<hwy::float16_t>* StoredXKernelTableF16() {
  return StoredXKernelTableT<hwy::float16_t>();
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(KernelTableFloat);
HWY_EXPORT(KernelTableDouble);
HWY_EXPORT(StoredXKernelTableBF16);
HWY_EXPORT(StoredXKernelTableF16);

template <>
const ShiftSumKernelTable<float>& ShiftSumKernels<float>() {
  return *HWY_DYNAMIC_DISPATCH(KernelTableFloat)();
}
template <>
const ShiftSumKernelTable<double>& ShiftSumKernels<double>() {
  return *HWY_DYNAMIC_DISPATCH(KernelTableDouble)();
}
template <>
const ShiftSumStoredXKernelTable<hwy::bfloat16_t>& ShiftSumStoredXKernels<hwy::bfloat16_t>() {
  return *HWY_DYNAMIC_DISPATCH(StoredXKernelTableBF16)();
}
template <>
const ShiftSumStoredXKernelTable<hwy::float16_t>& ShiftSumStoredXKernels<hwy::float16_t>() {
  return *HWY_DYNAMIC_DISPATCH(StoredXKernelTableF16)();
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
