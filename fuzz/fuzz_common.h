// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the libFuzzer targets: descriptors built from fuzz input (any dtype,
// layout, rank and dims, including 0, negative, huge and overflowing ones) over buffers
// sized exactly to what the descriptor claims, and the checks every call must pass.
#ifndef NORMKIT_FUZZ_FUZZ_COMMON_H_
#define NORMKIT_FUZZ_FUZZ_COMMON_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "normkit/normkit.h"

namespace normkit_fuzz {

// Buffers larger than this are not allocated: a descriptor claiming more is given a
// small buffer, and the library must reject it (or ASan reports the overflow).
constexpr int64_t kMaxBufferBytes = int64_t{4} << 20;

// An enum value: valid ones (lo..hi) for most raw values, lo - 1, hi + 1 and an
// arbitrary int for the top three (an exhausted input gives lo).
inline int32_t PickEnum(FuzzedDataProvider& in, int32_t lo, int32_t hi) {
  const int32_t span = hi - lo + 1;
  const int32_t v = in.ConsumeIntegralInRange<int32_t>(0, span + 2);
  if (v < span) return lo + v;
  if (v == span) return lo - 1;
  if (v == span + 1) return hi + 1;
  return in.ConsumeIntegral<int32_t>();
}

inline int64_t PickDim(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 6: return 0;
    case 7: return -in.ConsumeIntegralInRange<int64_t>(1, 1000);
    case 8: return int64_t{1} << in.ConsumeIntegralInRange<int>(20, 62);
    case 9: return std::numeric_limits<int64_t>::max();
    default: return in.ConsumeIntegralInRange<int64_t>(1, 40);
  }
}

inline float PickFloat(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 4: return std::numeric_limits<float>::quiet_NaN();
    case 5: return std::numeric_limits<float>::infinity();
    case 6: return 0.0f;
    case 7: return -1.0f;
    default: return in.ConsumeFloatingPointInRange<float>(1e-8f, 1.0f);
  }
}

// Elements the descriptor claims, or -1 if that overflows or is not positive.
inline int64_t ClaimedElements(const normkit_tensor& t) {
  if (t.rank < 1 || t.rank > NORMKIT_MAX_RANK) return -1;
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 1 || __builtin_mul_overflow(n, t.shape[i], &n)) return -1;
  }
  return n;
}

inline int64_t ElementBytes(int32_t dtype) {
  switch (dtype) {
    case NORMKIT_DTYPE_FLOAT16:
    case NORMKIT_DTYPE_BFLOAT16: return 2;
    case NORMKIT_DTYPE_FLOAT64: return 8;
    default: return 4;
  }
}

// Owns the buffers of one fuzz iteration and remembers their bytes.
class Arena {
 public:
  // A buffer of `bytes` (clamped to kMaxBufferBytes, at least 16), filled from `in`.
  void* Make(FuzzedDataProvider& in, int64_t bytes) {
    if (bytes < 16 || bytes > kMaxBufferBytes) bytes = 16;
    buffers_.emplace_back(static_cast<size_t>(bytes));
    std::vector<uint8_t>& b = buffers_.back();
    // Values from a small generator seeded by the input (not one input byte per value:
    // that would spend the input on data and leave the parameters at their defaults).
    uint32_t state = in.ConsumeIntegral<uint32_t>() | 1u;
    for (size_t i = 0; i + 4 <= b.size(); i += 4) {
      state ^= state << 13, state ^= state >> 17, state ^= state << 5;
      const float v = static_cast<float>(static_cast<int32_t>(state % 2001) - 1000) / 250.0f;
      std::memcpy(&b[i], &v, 4);
    }
    return b.data();
  }
  // A buffer of exactly `bytes`; sets *skip when that is too large to allocate (the
  // caller drops the iteration instead of passing a buffer shorter than it claims).
  void* MakeExact(FuzzedDataProvider& in, int64_t bytes, bool* skip) {
    if (bytes > kMaxBufferBytes) *skip = true;
    return Make(in, bytes);
  }
  // Bytes of the buffer starting at p (0 if p is not the start of one).
  size_t SizeOf(const void* p) const {
    for (const auto& b : buffers_)
      if (b.data() == p) return b.size();
    return 0;
  }

 private:
  std::vector<std::vector<uint8_t>> buffers_;
};

// A descriptor from fuzz input over its own buffer, sized exactly to what it claims.
// `like` (optional) lends its rank and shape. A descriptor whose claim is valid but too
// large to allocate sets *skip (the caller drops the iteration: the library would
// rightly read that much); one whose claim is invalid (a dim < 1, an overflowing count)
// gets a small buffer, since the library must reject it before touching any.
inline normkit_tensor MakeTensor(FuzzedDataProvider& in, Arena& arena, int32_t dtype,
                                 int32_t layout, int32_t rank, bool* skip,
                                 const normkit_tensor* like = nullptr) {
  normkit_tensor t;
  int64_t shape[NORMKIT_MAX_RANK] = {};
  if (like) {
    rank = like->rank;
    std::memcpy(shape, like->shape, sizeof(shape));
  } else {
    const int32_t r = rank < 0 ? 0 : (rank > NORMKIT_MAX_RANK ? NORMKIT_MAX_RANK : rank);
    for (int i = 0; i < r; ++i) shape[i] = PickDim(in);
  }
  // Valid enum values through the init helper, then the raw (possibly invalid) int32
  // fields, the way a caller from another language sets them.
  normkit_tensor_init(&t, nullptr, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, rank,
                      shape);
  t.dtype = dtype;
  t.layout = layout;
  if (like) std::memcpy(t.shape, like->shape, sizeof(t.shape));
  if (in.ConsumeIntegralInRange<int>(0, 31) == 31) t.struct_size = in.ConsumeIntegral<uint32_t>();
  if (in.ConsumeIntegralInRange<int>(0, 31) == 31) t.device = PickEnum(in, 0, 1);
  const int64_t n = ClaimedElements(t);
  int64_t bytes = 16;
  if (n > 0 && !__builtin_mul_overflow(n, ElementBytes(dtype), &bytes)) {
    if (bytes > kMaxBufferBytes) *skip = true;
  } else {
    bytes = 16;
  }
  t.data = in.ConsumeIntegralInRange<int>(0, 31) == 31 ? nullptr : arena.Make(in, bytes);
  return t;
}

// Channels (shape[1]) and batch (shape[0]) of a descriptor whose buffer was allocated
// exactly (whatever its dtype), else 1: parameter arrays are sized from these.
inline int64_t DimOr1(const normkit_tensor& t, int i) {
  const int64_t n = ClaimedElements(t);
  int64_t bytes = 0;
  const bool exact = n > 0 && !__builtin_mul_overflow(n, ElementBytes(t.dtype), &bytes) &&
                     bytes <= kMaxBufferBytes;
  return t.rank > i && exact ? t.shape[i] : 1;
}

// Accepted / rejected calls, printed at exit when NORMKIT_FUZZ_STATS is set (to see
// that the fuzzer reaches the kernels, not only the validation).
struct CallStats {
  int64_t accepted = 0, rejected = 0;
  ~CallStats() {
    if (std::getenv("NORMKIT_FUZZ_STATS")) {
      std::fprintf(stderr, "calls accepted: %lld, rejected: %lld\n",
                   static_cast<long long>(accepted), static_cast<long long>(rejected));
    }
  }
};
inline CallStats& Stats() {
  static CallStats stats;
  return stats;
}

// The contract of every call: a non-OK status comes with a message, and a rejected
// call leaves its outputs untouched.
inline void CheckStatus(normkit_status status) {
  ++(status == NORMKIT_SUCCESS ? Stats().accepted : Stats().rejected);
  static const bool verbose = std::getenv("NORMKIT_FUZZ_VERBOSE") != nullptr;
  if (verbose && status != NORMKIT_SUCCESS) std::fprintf(stderr, "%s\n", normkit_last_error());
  if (status != NORMKIT_SUCCESS && std::strlen(normkit_last_error()) == 0) {
    std::fprintf(stderr, "status %d with an empty message\n", status);
    std::abort();
  }
}

struct Snapshot {
  const void* p;
  std::vector<uint8_t> bytes;
};

inline Snapshot Take(const void* p, size_t n) {
  Snapshot s{p, {}};
  if (p) s.bytes.assign(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  return s;
}

inline void ExpectUntouched(normkit_status status, const std::vector<Snapshot>& outputs) {
  if (status == NORMKIT_SUCCESS) return;
  for (const Snapshot& s : outputs) {
    if (s.p && !s.bytes.empty() && std::memcmp(s.p, s.bytes.data(), s.bytes.size()) != 0) {
      std::fprintf(stderr, "rejected call (%s) wrote its output\n", normkit_last_error());
      std::abort();
    }
  }
}

}  // namespace normkit_fuzz

#endif  // NORMKIT_FUZZ_FUZZ_COMMON_H_
