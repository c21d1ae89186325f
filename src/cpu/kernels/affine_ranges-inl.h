// SPDX-License-Identifier: Apache-2.0
// The affine range drivers (broadcast, short planes, periodic), templates on the terms, the
// streaming choice and the stored types of x and y, and DispatchTerms, which turns a job's
// run-time terms into one of them. Included once per SIMD target by kernels/affine.cc
// (float32 x and y) and kernels/affine_half.cc (the half-storage pairs): two translation
// units, so that a two-core build compiles them side by side.

#if defined(NORMKIT_CPU_KERNELS_AFFINE_RANGES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_AFFINE_RANGES_INL_H_
#undef NORMKIT_CPU_KERNELS_AFFINE_RANGES_INL_H_
#else
#define NORMKIT_CPU_KERNELS_AFFINE_RANGES_INL_H_
#endif

#include <cstdint>
#include <numeric>
#include <type_traits>

#include "cpu/kernels/affine-inl.h"
#include "cpu/kernels/affine.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/cache_control.h"
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {

// Channels-first ranges walk the flat elements with a (plane, offset) cursor rather
// than plane by plane: a vector that crosses a plane boundary gets its parameters
// spliced from both planes, so short planes (7x7, 14x14) cost no partial vectors
// and no overlapping tail stores (which stall store forwarding, worst in place).
template <bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
inline void BroadcastRange(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t S = job.plane_size;
  const int64_t P = job.param_count;
  const auto* x = static_cast<const TX*>(job.x);  // may equal y (in place)
  auto* y = static_cast<TY*>(job.y);
  const auto scale = [&](int64_t p) { return kScale ? job.scale[p] : 0.0f; };
  const auto shift = [&](int64_t p) { return kShift ? job.shift[p] : 0.0f; };
  const auto center = [&](int64_t p) { return kCenter ? job.center[p] : 0.0f; };
  int64_t p = (begin / S) % P;  // parameter index of the element at i
  int64_t off = begin % S;      // its offset in its plane
  const auto next_plane = [&](int64_t q) { return q + 1 == P ? 0 : q + 1; };
  const auto one = [&](int64_t i) {
    AffineOne<kScale, kShift, kCenter>(x + i, y + i, scale(p), shift(p), center(p));
    if (++off == S) {
      off = 0;
      p = next_plane(p);
    }
  };
  int64_t i = begin;
  // Align the stores (required to stream; a split-line store costs two otherwise).
  for (; i < end && !IsVectorAligned(d, y + i); ++i) one(i);
  if (S == lanes && off == 0) {
    // Planes of exactly one vector (S = 16 at AVX-512, seed 001's 1024 x 16): four
    // planes a step, their loads first, none of the walk's bookkeeping per vector.
    for (; end - i >= 4 * lanes; i += 4 * lanes) {
      const int64_t p1 = next_plane(p), p2 = next_plane(p1), p3 = next_plane(p2);
      const auto x0 = LoadF(d, x + i);
      const auto x1 = LoadF(d, x + i + lanes);
      const auto x2 = LoadF(d, x + i + 2 * lanes);
      const auto x3 = LoadF(d, x + i + 3 * lanes);
      const auto put = [&](auto xv, int64_t q, int64_t at) {
        PutF<kStream>(d,
                      ApplyAffine<kScale, kShift, kCenter>(
                          xv, hn::Set(d, scale(q)), hn::Set(d, shift(q)), hn::Set(d, center(q))),
                      y + at);
      };
      put(x0, p, i);
      put(x1, p1, i + lanes);
      put(x2, p2, i + 2 * lanes);
      put(x3, p3, i + 3 * lanes);
      p = next_plane(p3);
    }
  }
  while (end - i >= lanes) {
    if (S - off >= lanes) {
      // Whole vectors inside the plane: one broadcast, a tight loop.
      int64_t run = S - off < end - i ? S - off : end - i;
      run &= ~(lanes - 1);  // lanes is a power of two
      const auto vs = hn::Set(d, scale(p));
      const auto vb = hn::Set(d, shift(p));
      const auto vc = hn::Set(d, center(p));
      int64_t k = 0;
      // Four loads before their stores keep more misses in flight (planes of four
      // vectors and more; one-vector planes, S = 16, lost 20-40% with it taken first).
      // From cache. From DRAM on Zen 5 each load next to its store was faster:
      // 64x256x64x64 in place, one thread, 0.84 -> 0.98 of the flat in-place scale
      // (out of place 1.26 -> 1.37 of memcpy); in cache it lost (1x64x56x56 in place
      // 1.03-1.14 -> 0.96-1.02).
      if (!job.from_memory && run >= 4 * lanes) {
        for (; k + 4 * lanes <= run; k += 4 * lanes) {
          const auto x0 = LoadF(d, x + i + k);
          const auto x1 = LoadF(d, x + i + k + lanes);
          const auto x2 = LoadF(d, x + i + k + 2 * lanes);
          const auto x3 = LoadF(d, x + i + k + 3 * lanes);
          PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x0, vs, vb, vc), y + i + k);
          PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x1, vs, vb, vc), y + i + k + lanes);
          PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x2, vs, vb, vc),
                        y + i + k + 2 * lanes);
          PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x3, vs, vb, vc),
                        y + i + k + 3 * lanes);
        }
      }
      for (; k < run; k += lanes) {
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(LoadF(d, x + i + k), vs, vb, vc),
                      y + i + k);
      }
      i += run;
      off += run;
      if (off == S) {
        off = 0;
        p = next_plane(p);
      }
      continue;
    }
    // One vector over a plane boundary (several when planes are shorter than it).
    auto vs = hn::Set(d, scale(p));
    auto vb = hn::Set(d, shift(p));
    auto vc = hn::Set(d, center(p));
    int64_t first = S - off;  // first lane of the next plane
    int64_t q = p;
    for (; first < lanes; first += S) {
      q = next_plane(q);
      const size_t lane = static_cast<size_t>(first);
      if constexpr (kScale) vs = SpliceFrom(d, vs, lane, scale(q));
      if constexpr (kShift) vb = SpliceFrom(d, vb, lane, shift(q));
      if constexpr (kCenter) vc = SpliceFrom(d, vc, lane, center(q));
    }
    PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(LoadF(d, x + i), vs, vb, vc), y + i);
    i += lanes;
    p = q;
    off = lanes - (first - S);  // lanes [first - S, lanes) are plane q's
    if (off == S) {
      off = 0;
      p = next_plane(p);
    }
  }
  // Fewer than a vector left (the end of the tensor): one element at a time.
  for (; i < end; ++i) one(i);
  if constexpr (kStream) hwy::FlushStream();
}

// Channels-first planes of one to kShortPlaneVectors vectors (7x7 at 16 lanes): the
// walk above spends more instructions per plane than the plane has vectors. A block
// of lcm(S, lanes) elements holds whole planes (at most `lanes`) and whole vectors,
// so with vectors on lane multiples of the flat index, the parameters of vector k of
// a block are the block's plane values in a fixed order: one table lookup each, from
// indices built once per range. 1x1024x7x7 in place, one thread: 0.65-0.76 of the
// in-place reference -> 0.83-0.91. (Kept out of BroadcastRange: inside it, the
// 14x14 walk measured 5-10% slower.) Planes of whole vectors (S = 16, 32, 64 at 16
// lanes) have no vector to splice and stay on the walk above: the table walk took
// them to 0.26-0.60 of memcpy from 0.65-1.45 (32x1024x16, seed 001, 1 thread:
// 0.32 against 0.83-0.86).
#if HWY_TARGET != HWY_SCALAR
constexpr int64_t kShortPlaneVectors = 4;

// Tensors up to this size count as cache-resident for the choice below.
constexpr int64_t kShortPlaneCacheBytes = 4 << 20;

// Where the table walk beats the plain walk. Measured at 16 lanes (AVX3), 1 thread,
// N x 1024 x S, alternating the two walks in one binary (ratios to memcpy):
//  - in place it wins up to S = 52 (S=49: 1.11-1.56 against 0.85-1.07) and loses
//    from S = 56 (1.19-2.46 against 1.26-2.67);
//  - out of place it wins below 1.75 vectors at every size (S=24, 6 MB: 0.89-0.96
//    against 0.63-0.66), up to 2.5 vectors while the tensor fits the caches (S=33,
//    0.5 MB: 0.88-0.89 against 0.78-0.79), and loses beyond (S=36, 9 MB: 0.87-0.89
//    against 1.16-1.22; S=49: 0.71-0.89 against 0.85-1.08 at every size).
inline bool UseShortPlanes(const AffineBroadcastJob& job, bool stream) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  const int64_t S = job.plane_size;
  if (stream || S % lanes == 0 || S <= lanes || S >= kShortPlaneVectors * lanes) return false;
  if (job.x == job.y) return 2 * S < 7 * lanes;  // in place: below 3.5 vectors
  if (4 * S < 7 * lanes) return true;            // out of place: below 1.75 vectors
  const bool cached = job.numel * StorageBytes(job.x_storage) <= kShortPlaneCacheBytes;
  return cached && 2 * S < 5 * lanes;  // below 2.5 vectors while in cache
}

template <bool kScale, bool kShift, bool kCenter, class TX, class TY>
inline void ShortPlanesRange(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  constexpr int64_t kMaxLanes = static_cast<int64_t>(hn::MaxLanes(d));
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t S = job.plane_size, P = job.param_count;
  const auto* x = static_cast<const TX*>(job.x);  // may equal y (in place)
  auto* y = static_cast<TY*>(job.y);
  const auto one = [&](int64_t i) {  // peel and tail: at most lanes - 1 each
    const int64_t p = (i / S) % P;
    AffineOne<kScale, kShift, kCenter>(x + i, y + i, kScale ? job.scale[p] : 0.0f,
                                       kShift ? job.shift[p] : 0.0f,
                                       kCenter ? job.center[p] : 0.0f);
  };
  int64_t i = begin;
  for (; i < end && i % lanes != 0; ++i) one(i);     // stores aligned when the tensor is
  const int64_t L = S / std::gcd(S, lanes) * lanes;  // block: L / S planes, L / lanes vectors
  alignas(64) int32_t plane_of[kShortPlaneVectors * kMaxLanes * kMaxLanes];
  for (int64_t j = 0, plane = 0, off = 0; j < L; ++j) {  // j / S without a division each
    plane_of[j] = static_cast<int32_t>(plane);
    if (++off == S) {
      off = 0;
      ++plane;
    }
  }
  int64_t phase = i % L;                  // where i is in its block
  int64_t first_plane = (i - phase) / S;  // the block's first plane
  hn::Vec<decltype(d)> block_scale = hn::Zero(d), block_shift = hn::Zero(d),
                       block_center = hn::Zero(d);
  const auto load_block = [&] {  // the parameters of the block's planes, wrapping at P
    const int64_t p0 = first_plane % P;
    alignas(64) float buf[kMaxLanes];
    const auto load = [&](const float* values) {
      if (p0 + lanes <= P) return hn::LoadU(d, values + p0);
      for (int64_t k = 0; k < lanes; ++k) buf[k] = values[(p0 + k) % P];
      return hn::Load(d, buf);
    };
    if constexpr (kScale) block_scale = load(job.scale);
    if constexpr (kShift) block_shift = load(job.shift);
    if constexpr (kCenter) block_center = load(job.center);
  };
  load_block();
  for (; end - i >= lanes; i += lanes) {
    const auto planes = hn::IndicesFromVec(d, hn::Load(di, plane_of + phase));
    const auto vs = kScale ? hn::TableLookupLanes(block_scale, planes) : hn::Zero(d);
    const auto vb = kShift ? hn::TableLookupLanes(block_shift, planes) : hn::Zero(d);
    const auto vc = kCenter ? hn::TableLookupLanes(block_center, planes) : hn::Zero(d);
    StoreF(d, ApplyAffine<kScale, kShift, kCenter>(LoadF(d, x + i), vs, vb, vc), y + i);
    phase += lanes;
    if (phase == L) {
      phase = 0;
      first_plane += L / S;
      load_block();
    }
  }
  for (; i < end; ++i) one(i);
}
#endif

template <bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
inline void PeriodicRange(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  const auto* x = static_cast<const TX*>(job.x);
  auto* y = static_cast<TY*>(job.y);
  int64_t i = begin;
  while (i < end) {
    const int64_t sample = i / job.sample_elems;
    const int64_t sample_begin = sample * job.sample_elems;
    const int64_t sample_end = sample_begin + job.sample_elems;
    const int64_t stop = sample_end < end ? sample_end : end;
    const int64_t rep = sample * job.rep_stride;
    AffinePeriodicSpan<kScale, kShift, kStream, kCenter>(
        x + i, y + i, static_cast<size_t>(stop - i), kScale ? job.scale_rep + rep : nullptr,
        kShift ? job.shift_rep + rep : nullptr, kCenter ? job.center_rep + rep : nullptr,
        static_cast<size_t>(job.period), static_cast<size_t>((i - sample_begin) % job.period),
        job.rows_per_load, job.in_cache, job.from_memory);
    i = stop;
  }
  if constexpr (kStream) hwy::FlushStream();
}

// Turns the run-time (terms, stream) pair into one of the ten instantiations.
// Half storage gets both terms from the driver (an absent one as 1 or -0, which give the
// same results as skipping it), which keeps its instantiations to four.
template <template <bool, bool, bool, bool, class, class> class Fn, class TX, class TY, class Job>
inline void DispatchTerms(const Job& job, int64_t begin, int64_t end) {
  if constexpr (!std::is_same<TX, float>::value || !std::is_same<TY, float>::value) {
    if (job.terms == AffineTerms::kCenterScaleShift) {
      return job.stream ? Fn<true, true, true, true, TX, TY>::Run(job, begin, end)
                        : Fn<true, true, false, true, TX, TY>::Run(job, begin, end);
    }
    HWY_DASSERT(job.terms == AffineTerms::kScaleShift);
    return job.stream ? Fn<true, true, true, false, TX, TY>::Run(job, begin, end)
                      : Fn<true, true, false, false, TX, TY>::Run(job, begin, end);
  }
  switch (job.terms) {
    case AffineTerms::kCenterScaleShift:
      return job.stream ? Fn<true, true, true, true, TX, TY>::Run(job, begin, end)
                        : Fn<true, true, false, true, TX, TY>::Run(job, begin, end);
    case AffineTerms::kScaleShift:
      return job.stream ? Fn<true, true, true, false, TX, TY>::Run(job, begin, end)
                        : Fn<true, true, false, false, TX, TY>::Run(job, begin, end);
    case AffineTerms::kScale:
      return job.stream ? Fn<true, false, true, false, TX, TY>::Run(job, begin, end)
                        : Fn<true, false, false, false, TX, TY>::Run(job, begin, end);
    case AffineTerms::kShift:
      return job.stream ? Fn<false, true, true, false, TX, TY>::Run(job, begin, end)
                        : Fn<false, true, false, false, TX, TY>::Run(job, begin, end);
    case AffineTerms::kCopy:
      return job.stream ? Fn<false, false, true, false, TX, TY>::Run(job, begin, end)
                        : Fn<false, false, false, false, TX, TY>::Run(job, begin, end);
  }
}

template <bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
struct BroadcastFn {
  static void Run(const AffineBroadcastJob& job, int64_t b, int64_t e) {
#if HWY_TARGET != HWY_SCALAR
    if (UseShortPlanes(job, kStream)) {
      return ShortPlanesRange<kScale, kShift, kCenter, TX, TY>(job, b, e);
    }
#endif
    BroadcastRange<kScale, kShift, kStream, kCenter, TX, TY>(job, b, e);
  }
};
template <bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
struct PeriodicFn {
  static void Run(const AffinePeriodicJob& job, int64_t b, int64_t e) {
    PeriodicRange<kScale, kShift, kStream, kCenter, TX, TY>(job, b, e);
  }
};
}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_AFFINE_RANGES_INL_H_ toggle
