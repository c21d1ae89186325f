// SPDX-License-Identifier: Apache-2.0
// CUDA shift-sum family. One thread per output element (the per-element arithmetic is
// cuda/shift_sum_math.h): every output is computed by one thread in a fixed channel
// order, so results are deterministic and nothing is accumulated with atomics. Blocks
// cover a few columns of one row, so the row's coordinates are decoded once per row
// and consecutive threads touch consecutive addresses (channels-first).
#include <algorithm>
#include <type_traits>

#include "cuda/async_copy.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "cuda/shift_sum_math.h"
#include "cuda/shift_sum_stored.h"

namespace normkit {
namespace cuda {
namespace {

constexpr int kColsPerThread = 4;
constexpr int64_t kMaxGridY = 65535;

// Runs fn(fn.Row(row), col) over rows x cols.
template <class Fn>
__global__ void GridKernel(int64_t rows, int64_t cols, Fn fn) {
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * blockDim.x * kColsPerThread + threadIdx.x;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const auto at = fn.Row(row);
    for (int j = 0; j < kColsPerThread; ++j) {
      const int64_t col = col0 + static_cast<int64_t>(j) * blockDim.x;
      if (col < cols) fn(at, col);
    }
  }
}

template <class Fn>
normkit_status Launch(const char* op, cudaStream_t stream, int64_t rows, int64_t cols,
                      const Fn& fn) {
  const int64_t per_block = static_cast<int64_t>(kBlockThreads) * kColsPerThread;
  const dim3 grid(static_cast<unsigned>((cols + per_block - 1) / per_block),
                  static_cast<unsigned>(std::min(rows, kMaxGridY)));
  GridKernel<<<grid, kBlockThreads, 0, stream>>>(rows, cols, fn);
  return LaunchStatus(op);
}

struct ShiftedCoord {
  int64_t b, r;
};

// Rows (b, r) of the shifted domain, columns v; op(m, b, r, v).
template <class T, class ElemOp>
struct ShiftedDomain {
  ShiftSumMath<T> m;
  ElemOp op;
  __device__ ShiftedCoord Row(int64_t row) const {
    ShiftedCoord at;
    m.ShiftedRow(row, &at.b, &at.r);
    return at;
  }
  __device__ void operator()(const ShiftedCoord& at, int64_t v) const { op(m, at.b, at.r, v); }
};

// Rows of x or of the stack (see PlaneCoord); op(m, b, c, i, j).
template <class T, class ElemOp>
struct PlaneDomain {
  ShiftSumMath<T> m;
  ElemOp op;
  int64_t per_plane;
  __device__ PlaneCoord Row(int64_t row) const { return m.PlaneRow(row, per_plane); }
  __device__ void operator()(const PlaneCoord& at, int64_t col) const {
    int64_t c, j;
    m.PlaneCol(at, col, &c, &j);
    op(m, at.b, c, at.i, j);
  }
};

// The flat kernels of the row walks (channels-first x shifted along W, tensors below
// 2^31 elements): thread t of a block takes elements t, t + kBlockThreads, ... of the
// block's kFlatItems, computes all their values first (so their loads are in flight
// together; a store between them would have to wait, as it may alias a later load),
// then stores them. op.Value(i) and op.Store(i, value).
constexpr int kFlatUnroll = 4;
constexpr uint32_t kFlatItems = kBlockThreads * kFlatUnroll;

template <class T, class Op>
__global__ void FlatKernel(uint32_t count, Op op) {
  const uint32_t first = blockIdx.x * kFlatItems + threadIdx.x;
  T v[kFlatUnroll];
#pragma unroll
  for (int j = 0; j < kFlatUnroll; ++j) {
    const uint32_t i = first + j * kBlockThreads;
    if (i < count) v[j] = op.Value(i);
  }
#pragma unroll
  for (int j = 0; j < kFlatUnroll; ++j) {
    const uint32_t i = first + j * kBlockThreads;
    if (i < count) op.Store(i, v[j]);
  }
}

template <class T, class Op>
normkit_status LaunchFlat(const char* op_name, cudaStream_t stream, int64_t count, const Op& op) {
  const auto n = static_cast<uint32_t>(count);
  FlatKernel<T, Op><<<(n + kFlatItems - 1) / kFlatItems, kBlockThreads, 0, stream>>>(n, op);
  return LaunchStatus(op_name);
}

// The row walks apply: channels-first, along W, x and y below 2^31 elements.
template <class T>
bool UseFlat(const ShiftSumProblem<T>& p) {
  return ShiftSumMath<T>{p}.RowWalks() && p.B * p.C * p.H * p.W < kMaxIndex32 &&
         p.B * p.H_out * p.W_out < kMaxIndex32;
}

template <class T>
FlatDecode DecodeX(const ShiftSumProblem<T>& p) {
  return {U32Divider::Of(static_cast<uint32_t>(p.W)), U32Divider::Of(static_cast<uint32_t>(p.H)),
          U32Divider::Of(static_cast<uint32_t>(p.C))};
}

template <class T>
FlatDecode DecodeY(const ShiftSumProblem<T>& p) {
  return {U32Divider::Of(static_cast<uint32_t>(p.W_out)),
          U32Divider::Of(static_cast<uint32_t>(p.H_out)), U32Divider::Of(1)};
}

// y (b, r, v) = A x, element i of y. SX / SY: how x and y are stored (T, or a half
// type with float math).
template <class T, class SX = T, class SY = T>
struct ForwardFlat {
  ShiftSumMath<T> m;
  FlatDecode d;
  const SX* x;
  SY* y;
  __device__ T Value(uint32_t i) const {
    int64_t b, r, v;
    d.Y(i, &b, &r, &v);
    return m.ForwardWalk(x, b, r, v);
  }
  __device__ void Store(uint32_t i, T value) const { y[i] = StoredAs<SY>(value); }
};

// The GAP residual (y - A x) / (s^2 Phi_s + gamma), element i of y.
template <class T, class SX = T, class SY = T>
struct ResidualFlat {
  ShiftSumMath<T> m;
  FlatDecode d;
  const SX* x;
  const SY* y;
  const T* phi_s;
  T gamma;
  T* residual;
  __device__ T Value(uint32_t i) const {
    int64_t b, r, v;
    d.Y(i, &b, &r, &v);
    return m.GapResidualWalk(x, y, phi_s, gamma, b, r, v);
  }
  __device__ void Store(uint32_t i, T value) const { residual[i] = value; }
};

// Element i of x from the shifted domain: A^T z, the pseudo-inverse, or the GAP update.
enum class XFlatKind { kAdjoint, kPinv, kGapUpdate };

template <class T, XFlatKind kKind, class SZ = T, class SX = T>
struct XFlat {
  ShiftSumMath<T> m;
  FlatDecode d;
  const SZ* z;     // y, or the GAP residual
  const T* phi_s;  // kPinv
  T lambda;        // kGapUpdate
  SX* x;
  __device__ T Value(uint32_t i) const {
    int64_t b, c, h, w;
    d.X(i, &b, &c, &h, &w);
    const typename ShiftSumMath<T>::XRow r = m.XRowAt(b, c, h);
    if constexpr (kKind == XFlatKind::kAdjoint) return m.AdjointRow(z, r, w);
    if constexpr (kKind == XFlatKind::kPinv) return m.PinvMoorePenroseRow(z, phi_s, r, w);
    return ValueAt<T>(x, i) + lambda * m.AdjointRow(z, r, w);
  }
  __device__ void Store(uint32_t i, T value) const { x[i] = StoredAs<SX>(value); }
};

template <class T, class ElemOp>
normkit_status LaunchShifted(const char* op, cudaStream_t stream, const ShiftSumProblem<T>& p,
                             int64_t samples, const ElemOp& elem) {
  return Launch(op, stream, samples * p.H_out, p.W_out,
                ShiftedDomain<T, ElemOp>{ShiftSumMath<T>{p}, elem});
}

template <class T, class ElemOp>
normkit_status LaunchX(const char* op, cudaStream_t stream, const ShiftSumProblem<T>& p,
                       const ElemOp& elem) {
  const ShiftSumMath<T> m{p};
  return Launch(op, stream, m.PlaneRows(p.H), m.PlaneCols(p.W),
                PlaneDomain<T, ElemOp>{m, elem, p.H});
}

template <class T, class ElemOp>
normkit_status LaunchStack(const char* op, cudaStream_t stream, const ShiftSumProblem<T>& p,
                           const ElemOp& elem) {
  const ShiftSumMath<T> m{p};
  return Launch(op, stream, m.PlaneRows(p.H_out), m.PlaneCols(p.W_out),
                PlaneDomain<T, ElemOp>{m, elem, p.H_out});
}

// ---- element ops ----

template <class T>
struct ForwardOp {
  const T* x;
  T* y;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t r, int64_t v) const {
    y[m.YOffset(b, r, v)] = m.Forward(x, b, r, v);
  }
};

template <class T>
struct NormalizerOp {
  T* phi_s;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t r, int64_t v) const {
    phi_s[m.NormalizerOffset(b, r, v)] = m.Normalizer(b, r, v, false);
  }
};

template <class T>
struct ResidualOp {
  const T* x;
  const T* y;
  const T* phi_s;
  T gamma;
  T* residual;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t r, int64_t v) const {
    residual[m.YOffset(b, r, v)] = m.GapResidual(x, y, phi_s, gamma, b, r, v);
  }
};

template <class T>
struct AdjointOp {
  const T* y;
  T* x;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t c, int64_t h,
                             int64_t w) const {
    x[m.XOffset(b, c, h, w)] = m.Adjoint(y, b, c, h, w);
  }
};

template <class T>
struct GapUpdateOp {
  const T* residual;
  T lambda;
  T* x;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t c, int64_t h,
                             int64_t w) const {
    x[m.XOffset(b, c, h, w)] += lambda * m.Adjoint(residual, b, c, h, w);
  }
};

template <class T>
struct PinvOp {
  const T* y;
  const T* phi_s;
  bool divide_by_mask;
  T* x;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t c, int64_t h,
                             int64_t w) const {
    x[m.XOffset(b, c, h, w)] = divide_by_mask ? m.PinvDivideByMask(y, b, c, h, w)
                                              : m.PinvMoorePenrose(y, phi_s, b, c, h, w);
  }
};

// x (b, c, h, w) <- xs at the position it was shifted to.
template <class T>
struct UnshiftOp {
  const T* xs;
  T* x;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t c, int64_t h,
                             int64_t w) const {
    x[m.XOffset(b, c, h, w)] = xs[m.StackOffset(b, c, m.Row(c, h), m.Col(c, w))];
  }
};

// xs (b, c, r, v) <- x at its source pixel, or 0.
template <class T>
struct ShiftOp {
  const T* x;
  T* xs;
  __device__ void operator()(const ShiftSumMath<T>& m, int64_t b, int64_t c, int64_t r,
                             int64_t v) const {
    int64_t h, w;
    xs[m.StackOffset(b, c, r, v)] = m.Source(c, r, v, &h, &w) ? x[m.XOffset(b, c, h, w)] : T(0);
  }
};

// Runs of 4 consecutive elements of an x row (W % 4 == 0, x 16-byte aligned): one
// decode per run and one vector store, else as XFlat.
constexpr int kRun = 4;
constexpr int kRunUnroll = 2;
constexpr uint32_t kRunsPerBlock = kBlockThreads * kRunUnroll;

template <class T>
struct Run {
  T v[kRun];
};

__device__ inline Run<float> LoadRun(const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  return {{a.x, a.y, a.z, a.w}};
}
__device__ inline Run<double> LoadRun(const double* p) {
  const double2 a = reinterpret_cast<const double2*>(p)[0],
                b = reinterpret_cast<const double2*>(p)[1];
  return {{a.x, a.y, b.x, b.y}};
}
__device__ inline void StoreRun(float* p, const Run<float>& r) {
  *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
}
__device__ inline void StoreRun(double* p, const Run<double>& r) {
  reinterpret_cast<double2*>(p)[0] = make_double2(r.v[0], r.v[1]);
  reinterpret_cast<double2*>(p)[1] = make_double2(r.v[2], r.v[3]);
}
// A run of bfloat16 / float16 in float math: widened from one 8-byte load, rounded into
// one 8-byte store.
template <class S>
__device__ inline Run<float> LoadRun(const S* p) {
  const Float4 v = Load4(p);
  return {{v.x, v.y, v.z, v.w}};
}
template <class S>
__device__ inline void StoreRun(S* p, const Run<float>& r) {
  Store4(p, {r.v[0], r.v[1], r.v[2], r.v[3]});
}

template <class T, XFlatKind kKind, class SZ, class SX>
__global__ void XRunKernel(uint32_t runs, XFlat<T, kKind, SZ, SX> op) {
  const uint32_t first = blockIdx.x * kRunsPerBlock + threadIdx.x;
  Run<T> out[kRunUnroll];
#pragma unroll
  for (int j = 0; j < kRunUnroll; ++j) {
    const uint32_t q = first + j * kBlockThreads;
    if (q >= runs) continue;
    int64_t b, c, h, w;
    op.d.X(kRun * q, &b, &c, &h, &w);
    const typename ShiftSumMath<T>::XRow r = op.m.XRowAt(b, c, h);
    Run<T> old{};
    if constexpr (kKind == XFlatKind::kGapUpdate) old = LoadRun(op.x + kRun * q);
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      if constexpr (kKind == XFlatKind::kAdjoint) out[j].v[k] = op.m.AdjointRow(op.z, r, w + k);
      if constexpr (kKind == XFlatKind::kPinv) {
        out[j].v[k] = op.m.PinvMoorePenroseRow(op.z, op.phi_s, r, w + k);
      }
      if constexpr (kKind == XFlatKind::kGapUpdate) {
        out[j].v[k] = old.v[k] + op.lambda * op.m.AdjointRow(op.z, r, w + k);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kRunUnroll; ++j) {
    const uint32_t q = first + j * kBlockThreads;
    if (q < runs) StoreRun(op.x + kRun * q, out[j]);
  }
}

// x-domain ops: runs where the layout allows, else one element per item.
template <class T, XFlatKind kKind, class SZ, class SX>
normkit_status LaunchXFlat(const char* op_name, cudaStream_t stream, const ShiftSumProblem<T>& p,
                           const XFlat<T, kKind, SZ, SX>& op) {
  const int64_t count = p.B * p.C * p.H * p.W;
  if (p.W % kRun == 0 && reinterpret_cast<uintptr_t>(op.x) % (kRun * sizeof(SX)) == 0) {
    const auto runs = static_cast<uint32_t>(count / kRun);
    XRunKernel<T, kKind, SZ, SX>
        <<<(runs + kRunsPerBlock - 1) / kRunsPerBlock, kBlockThreads, 0, stream>>>(runs, op);
    return LaunchStatus(op_name);
  }
  return LaunchFlat<T>(op_name, stream, count, op);
}

// ---- The forward operator on Hopper: block (b, r) bulk-copies the C rows of x it reads
// (and the HW mask's row) into shared memory, every byte in flight at once, then each
// thread sums its outputs from there (ShiftSumMath::ForwardFromRows). The walk straight
// from memory stalled on its loads at 0.62-0.72 of a copy. The GAP residual is the same
// kernel with another ending. ----
enum class RowEpilogue { kForward, kGapResidual };

// SX / SOut / SY: how x, the output and y are stored (T, or a half type).
template <class T, class SX = T, class SOut = T, class SY = T>
struct ForwardRowArgs {
  ShiftSumMath<T> m;
  const SX* x;
  SOut* out;       // y, or the GAP residual
  const SY* y;     // kGapResidual
  const T* phi_s;  // kGapResidual (NULL: computed)
  T gamma;         // kGapResidual
};

template <class T, RowEpilogue kEpilogue, class SX, class SOut, class SY>
__global__ void ForwardRowKernel(ForwardRowArgs<T, SX, SOut, SY> a) {
  extern __shared__ __align__(16) unsigned char row_smem[];
  SX* rows = reinterpret_cast<SX*>(row_smem);
  const ShiftSumProblem<T>& p = a.m.p;
  const bool masked = p.mask_kind == ShiftMask::kHW;
  // After the C rows of x (each a multiple of 16 bytes: UseForwardRows).
  T* mask_row = masked ? reinterpret_cast<T*>(rows + p.C * p.W) : nullptr;
  const int64_t b = blockIdx.x / p.H, r = blockIdx.x - b * p.H;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ uint64_t barrier;
  const auto row_bytes = static_cast<uint32_t>(p.W * sizeof(SX));
  const auto mask_bytes = static_cast<uint32_t>(masked ? p.W * sizeof(T) : 0);
  const BulkCopies copies(&barrier, row_bytes * static_cast<uint32_t>(p.C) + mask_bytes);
  if (threadIdx.x == 0) {
    for (int64_t c = 0; c < p.C; ++c) {
      copies.Copy(rows + c * p.W, a.x + ((b * p.C + c) * p.H + r) * p.W, row_bytes);
    }
    if (masked) copies.Copy(mask_row, p.mask + r * p.W, mask_bytes);
  }
  copies.Wait();
  const int64_t yb = (b * p.H_out + r) * p.W_out;
  for (int64_t v = threadIdx.x; v < p.W_out; v += blockDim.x) {
    const T forward = a.m.ForwardFromRows(rows, mask_row, r, v);
    if constexpr (kEpilogue == RowEpilogue::kForward) {
      a.out[yb + v] = StoredAs<SOut>(forward);
    } else {
      a.out[yb + v] = a.m.GapResidualOf(a.y, a.phi_s, a.gamma, b, r, v, forward);
    }
  }
#endif
}

// Rows of x (stored as SX) and the mask row for ForwardRowKernel, in bytes.
template <class T, class SX = T>
int64_t ForwardRowBytes(const ShiftSumProblem<T>& p) {
  return p.C * p.W * static_cast<int64_t>(sizeof(SX)) +
         (p.mask_kind == ShiftMask::kHW ? p.W * static_cast<int64_t>(sizeof(T)) : 0);
}

// Hopper, channels-first along W, no mask or an HW mask, rows of 16-byte multiples at
// 16-byte aligned addresses, and rows that fit a block's shared memory.
template <class T, class SX>
bool UseForwardRows(const ShiftSumProblem<T>& p, const SX* x) {
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  return UseFlat(p) && (p.mask_kind == ShiftMask::kNone || p.mask_kind == ShiftMask::kHW) &&
         (p.W * static_cast<int64_t>(sizeof(SX))) % 16 == 0 &&
         (p.W * static_cast<int64_t>(sizeof(T))) % 16 == 0 && aligned(x) &&
         (p.mask == nullptr || aligned(p.mask)) &&
         ForwardRowBytes<T, SX>(p) <= MaxDynamicShared() && p.B * p.H < (int64_t{1} << 31) &&
         ComputeCapabilityMajor() >= 9;
}

template <class T, RowEpilogue kEpilogue, class SX = T, class SOut = T, class SY = T>
normkit_status LaunchForwardRows(const char* op, cudaStream_t stream,
                                 const ForwardRowArgs<T, SX, SOut, SY>& a) {
  const ShiftSumProblem<T>& p = a.m.p;
  const int64_t bytes = ForwardRowBytes<T, SX>(p);
  if (bytes > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(ForwardRowKernel<T, kEpilogue, SX, SOut, SY>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != cudaSuccess) return CudaFail(op, "cudaFuncSetAttribute", e);
  }
  ForwardRowKernel<T, kEpilogue, SX, SOut, SY>
      <<<static_cast<unsigned>(p.B * p.H), kBlockThreads, static_cast<size_t>(bytes), stream>>>(a);
  return LaunchStatus(op);
}

// The Moore-Penrose pseudo-inverse's y / (s^2 Phi_s) (0 where Phi_s = 0), element i of y,
// for the adjoint to spread: x = s * M * that, PinvMoorePenroseRow's arithmetic.
template <class T, class SY = T>
struct PinvScaledFlat {
  ShiftSumMath<T> m;
  FlatDecode d;
  const SY* y;
  const T* phi_s;
  T* z;
  __device__ T Value(uint32_t i) const {
    int64_t b, r, v;
    d.Y(i, &b, &r, &v);
    const T n = phi_s[m.NormalizerOffset(b, r, v)];
    return n == T(0) ? T(0) : ValueAt<T>(y, i) / (m.p.scale * m.p.scale * n);
  }
  __device__ void Store(uint32_t i, T value) const { z[i] = value; }
};

#define NORMKIT_ENTER_DEVICE(op, device)                                                   \
  DeviceScope scope(device);                                                               \
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status()); \
  const cudaStream_t stream = StreamOf(ctx)

}  // namespace

template <class T>
normkit_status ShiftSumForward(const char* op, const normkit_context* ctx, int32_t device,
                               const ShiftSumProblem<T>& p, const T* x, T* y) {
  NORMKIT_ENTER_DEVICE(op, device);
  if (UseForwardRows(p, x)) {
    return LaunchForwardRows<T, RowEpilogue::kForward>(
        op, stream, {ShiftSumMath<T>{p}, x, y, nullptr, nullptr, T(0)});
  }
  if (UseFlat(p)) {
    return LaunchFlat<T>(op, stream, p.B * p.H_out * p.W_out,
                         ForwardFlat<T>{ShiftSumMath<T>{p}, DecodeY(p), x, y});
  }
  return LaunchShifted(op, stream, p, p.B, ForwardOp<T>{x, y});
}

template <class T>
normkit_status ShiftSumAdjoint(const char* op, const normkit_context* ctx, int32_t device,
                               const ShiftSumProblem<T>& p, const T* y, T* x) {
  NORMKIT_ENTER_DEVICE(op, device);
  if (UseFlat(p)) {
    return LaunchXFlat(
        op, stream, p,
        XFlat<T, XFlatKind::kAdjoint>{ShiftSumMath<T>{p}, DecodeX(p), y, nullptr, T(0), x});
  }
  return LaunchX(op, stream, p, AdjointOp<T>{y, x});
}

template <class T>
normkit_status ShiftSumNormalizer(const char* op, const normkit_context* ctx, int32_t device,
                                  const ShiftSumProblem<T>& p, T* phi_s) {
  NORMKIT_ENTER_DEVICE(op, device);
  return LaunchShifted(op, stream, p, p.PerSampleMask() ? p.B : 1, NormalizerOp<T>{phi_s});
}

template <class T>
normkit_status ShiftSumPinv(const char* op, const normkit_context* ctx, int32_t device,
                            const ShiftSumProblem<T>& p, PinvMode mode, const T* normalizer,
                            const T* y, T* x) {
  NORMKIT_ENTER_DEVICE(op, device);
  const bool divide_by_mask = mode == PinvMode::kDivideByMask;
  Scratch scratch(stream);
  if (!divide_by_mask && normalizer == nullptr && p.mask_kind != ShiftMask::kNone) {
    // Phi_s once per position rather than once per channel covering it.
    const int64_t samples = p.PerSampleMask() ? p.B : 1;
    void* buffer = nullptr;
    NORMKIT_RETURN_IF_ERROR(scratch.Allocate(op, samples * p.H_out * p.W_out * sizeof(T), &buffer));
    NORMKIT_RETURN_IF_ERROR(
        LaunchShifted(op, stream, p, samples, NormalizerOp<T>{static_cast<T*>(buffer)}));
    normalizer = static_cast<const T*>(buffer);
  }
  if (!divide_by_mask && normalizer != nullptr && UseFlat(p)) {
    // y / (s^2 Phi_s) once per position of y, then the adjoint: a division per element
    // of x cost more than its bytes.
    const ShiftSumMath<T> m{p};
    Scratch z_scratch(stream);
    void* z = nullptr;
    NORMKIT_RETURN_IF_ERROR(z_scratch.Allocate(op, p.B * p.H_out * p.W_out * sizeof(T), &z));
    NORMKIT_RETURN_IF_ERROR(
        LaunchFlat<T>(op, stream, p.B * p.H_out * p.W_out,
                      PinvScaledFlat<T>{m, DecodeY(p), y, normalizer, static_cast<T*>(z)}));
    return LaunchXFlat(
        op, stream, p,
        XFlat<T, XFlatKind::kAdjoint>{m, DecodeX(p), static_cast<const T*>(z), nullptr, T(0), x});
  }
  return LaunchX(op, stream, p, PinvOp<T>{y, normalizer, divide_by_mask, x});
}

template <class T>
normkit_status ShiftSumGapStep(const char* op, const normkit_context* ctx, int32_t device,
                               const ShiftSumProblem<T>& p, T lambda, T gamma, const T* normalizer,
                               const T* y, T* x) {
  NORMKIT_ENTER_DEVICE(op, device);
  Scratch scratch(stream);
  void* buffer = nullptr;
  NORMKIT_RETURN_IF_ERROR(scratch.Allocate(op, p.B * p.H_out * p.W_out * sizeof(T), &buffer));
  T* residual = static_cast<T*>(buffer);
  if (UseFlat(p)) {
    const ShiftSumMath<T> m{p};
    if (UseForwardRows(p, x)) {
      const ForwardRowArgs<T> rows{m, x, residual, y, normalizer, gamma};
      NORMKIT_RETURN_IF_ERROR((LaunchForwardRows<T, RowEpilogue::kGapResidual>(op, stream, rows)));
    } else {
      NORMKIT_RETURN_IF_ERROR(
          LaunchFlat<T>(op, stream, p.B * p.H_out * p.W_out,
                        ResidualFlat<T>{m, DecodeY(p), x, y, normalizer, gamma, residual}));
    }
    return LaunchXFlat(
        op, stream, p,
        XFlat<T, XFlatKind::kGapUpdate>{m, DecodeX(p), residual, nullptr, lambda, x});
  }
  NORMKIT_RETURN_IF_ERROR(
      LaunchShifted(op, stream, p, p.B, ResidualOp<T>{x, y, normalizer, gamma, residual}));
  return LaunchX(op, stream, p, GapUpdateOp<T>{residual, lambda, x});
}

template <class T>
normkit_status ShiftStack(const char* op, const normkit_context* ctx, int32_t device,
                          const ShiftSumProblem<T>& p, bool forward, const T* in, T* out) {
  NORMKIT_ENTER_DEVICE(op, device);
  if (forward) return LaunchStack(op, stream, p, ShiftOp<T>{in, out});
  return LaunchX(op, stream, p, UnshiftOp<T>{in, out});
}

namespace {

// ShiftSumRowsStored for x stored as SX and y as SY.
template <class SX, class SY>
normkit_status RowsStored(const char* op, cudaStream_t stream, const ShiftSumProblem<float>& p,
                          const ShiftSumStoredCall& call) {
  const ShiftSumMath<float> m{p};
  if (call.op == ShiftSumOp::kForward) {
    const auto* x = static_cast<const SX*>(call.in.data);
    auto* y = static_cast<SY*>(call.out.data);
    if (UseForwardRows(p, x)) {
      return LaunchForwardRows<float, RowEpilogue::kForward, SX, SY>(
          op, stream, {m, x, y, nullptr, nullptr, 0.0f});
    }
    return LaunchFlat<float>(op, stream, p.B * p.H_out * p.W_out,
                             ForwardFlat<float, SX, SY>{m, DecodeY(p), x, y});
  }
  const auto* y = static_cast<const SY*>(call.in.data);
  auto* x = static_cast<SX*>(call.out.data);
  if (call.op == ShiftSumOp::kGapStep) {
    // As the float32 call: the residual in a float scratch, then x += lambda A^T r.
    Scratch scratch(stream);
    void* buffer = nullptr;
    NORMKIT_RETURN_IF_ERROR(scratch.Allocate(op, p.B * p.H_out * p.W_out * 4, &buffer));
    auto* residual = static_cast<float*>(buffer);
    if (UseForwardRows(p, x)) {
      NORMKIT_RETURN_IF_ERROR((LaunchForwardRows<float, RowEpilogue::kGapResidual, SX, float, SY>(
          op, stream, {m, x, residual, y, call.normalizer, call.gamma})));
    } else {
      NORMKIT_RETURN_IF_ERROR(LaunchFlat<float>(
          op, stream, p.B * p.H_out * p.W_out,
          ResidualFlat<float, SX, SY>{m, DecodeY(p), x, y, call.normalizer, call.gamma, residual}));
    }
    return LaunchXFlat(op, stream, p,
                       XFlat<float, XFlatKind::kGapUpdate, float, SX>{m, DecodeX(p), residual,
                                                                      nullptr, call.lambda, x});
  }
  if (call.op == ShiftSumOp::kAdjoint) {
    return LaunchXFlat(
        op, stream, p,
        XFlat<float, XFlatKind::kAdjoint, SY, SX>{m, DecodeX(p), y, nullptr, 0.0f, x});
  }
  // The Moore-Penrose pseudo-inverse as the float32 call's flat path: y / (s^2 Phi_s) once
  // per position of y into a float scratch (Phi_s computed first when not given: the
  // value the float32 kernels compute per element, so the same bits), then the adjoint.
  Scratch scratch(stream);
  void* buffer = nullptr;
  const int64_t y_elems = p.B * p.H_out * p.W_out;
  const int64_t phi_elems =
      call.normalizer != nullptr ? 0 : (p.PerSampleMask() ? p.B : 1) * p.H_out * p.W_out;
  NORMKIT_RETURN_IF_ERROR(scratch.Allocate(op, (y_elems + phi_elems) * 4 + 16, &buffer));
  float* z = static_cast<float*>(buffer);
  const float* normalizer = call.normalizer;
  if (normalizer == nullptr) {
    float* phi = z + y_elems;
    NORMKIT_RETURN_IF_ERROR(
        LaunchShifted(op, stream, p, p.PerSampleMask() ? p.B : 1, NormalizerOp<float>{phi}));
    normalizer = phi;
  }
  NORMKIT_RETURN_IF_ERROR(LaunchFlat<float>(
      op, stream, y_elems, PinvScaledFlat<float, SY>{m, DecodeY(p), y, normalizer, z}));
  return LaunchXFlat(
      op, stream, p,
      XFlat<float, XFlatKind::kAdjoint, float, SX>{m, DecodeX(p), z, nullptr, 0.0f, x});
}

}  // namespace

normkit_status ShiftSumRowsStored(const char* op, const normkit_context* ctx, int32_t device,
                                  const ShiftSumProblem<float>& p, const ShiftSumStoredCall& call,
                                  bool* taken) {
  const bool pinv = call.op == ShiftSumOp::kPinv && call.mode == PinvMode::kMoorePenrose;
  *taken = UseFlat(p) && (call.op == ShiftSumOp::kForward || call.op == ShiftSumOp::kAdjoint ||
                          call.op == ShiftSumOp::kGapStep || pinv);
  if (!*taken) return NORMKIT_SUCCESS;
  NORMKIT_ENTER_DEVICE(op, device);
  // DispatchStoragePair gives the types of (in, out): (x, y) for the forward, (y, x) else.
  return DispatchStoragePair(call.in.dtype, call.out.dtype, [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    if (call.op == ShiftSumOp::kForward) return RowsStored<In, Out>(op, stream, p, call);
    return RowsStored<Out, In>(op, stream, p, call);
  });
}

NORMKIT_CUDA_INSTANTIATE_SHIFT_SUM(float)
NORMKIT_CUDA_INSTANTIATE_SHIFT_SUM(double)

}  // namespace cuda
}  // namespace normkit
