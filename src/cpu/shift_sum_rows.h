// SPDX-License-Identifier: Apache-2.0
// The row plans of the CPU shift-sum drivers (shift_sum.cc: A, A^T, normalizer, pinv;
// shift_sum_gap.cc: the GAP step, shift / unshift): task sizing, per-worker scratch, the
// geometry of a row, and the channels-last paths (skewed, phases, planes). Internal to
// those two files.
#ifndef NORMKIT_CPU_SHIFT_SUM_ROWS_H_
#define NORMKIT_CPU_SHIFT_SUM_ROWS_H_

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/kernels/shift_sum.h"
#include "cpu/kernels/storage.h"
#include "cpu/memory_plan.h"
#include "cpu/shift_sum.h"
#include "hwy/cache_control.h"

namespace normkit {
namespace cpu {
namespace shift_sum_rows {

using kernels::ShiftSumAccumulate;
using kernels::ShiftSumAccumulateTile;
using kernels::ShiftSumAddSquares;
using kernels::ShiftSumAxpy;
using kernels::ShiftSumDivide;
using kernels::ShiftSumDivideByMask;
using kernels::ShiftSumFromPlanes;
using kernels::ShiftSumFromPlanesAxpy;
using kernels::ShiftSumGapResidual;
using kernels::ShiftSumPlaceWindows;
using kernels::ShiftSumScale;
using kernels::ShiftSumScaledProduct;
using kernels::ShiftSumToPlanes;
using kernels::ShiftSumWindowsToPixels;

// Bytes of x a task should cover: large enough to amortize the task, small enough to
// balance two or more threads on the smallest seed shapes.
constexpr int64_t kTaskBytes = int64_t{1} << 20;

// The rows a task works in. Each worker of a loop gets its own, made before the loop
// (ForRowRanges' `make`), so that no loop allocates: an allocation that fails does so
// before any output is written (NORMKIT_ERROR_OUT_OF_MEMORY, outputs untouched).
// Workers take tasks in any order, so a task may count on nothing they hold but what
// `make` zeroed and no task writes (the planes' paddings).
template <class T>
struct TaskRows {
  std::vector<T> rows;                          // y-sized rows: z, residuals
  std::vector<T> normalizer;                    // a row of Phi_s, computed as it goes
  std::vector<T> planes;                        // x rows as channel planes
  std::vector<T> mask_planes;                   // the mask rows beside them
  std::vector<T> phases;                        // the phase rows of a y row
  std::vector<T> padded[2];                     // reserved for copies of x rows read past their end
  std::vector<hwy::bfloat16_t> padded_bf16[2];  // the same of half x (the forward's)
  std::vector<hwy::float16_t> padded_f16[2];
  std::vector<T> gather;  // one channel's row of channels-last x (XRows)
  std::vector<T> x_row;   // a channels-last x row in float, for a half x (FromPlanesToRow)
                          // or any x (PixelWindowsShape)
  std::vector<T> window;  // a y row with room either side (PixelWindowsShape)
  std::vector<T> y_row;   // a half y row widened (the GAP step's; YSource)
};

// The TaskRows vectors for padded copies of x rows stored as X.
template <class X, class T>
std::vector<X> (&PaddedRows(TaskRows<T>& s))[2] {
  if constexpr (std::is_same_v<X, T>) {
    return s.padded;
  } else if constexpr (std::is_same_v<X, hwy::bfloat16_t>) {
    return s.padded_bf16;
  } else {
    return s.padded_f16;
  }
}

// The storage of a half x type (the scalar widenings of XRows).
template <class X>
constexpr kernels::Storage kStorageOf =
    std::is_same_v<X, hwy::bfloat16_t> ? kernels::Storage::kBFloat16 : kernels::Storage::kFloat16;

// Everything a driver allocates, kept by the caller when it runs a driver more than once
// (cpu/shift_sum.h): after the first, largest, run no run allocates, so an allocation
// that fails does so before any output is written.
template <class T>
struct ShiftSumScratch {
  std::vector<TaskRows<T>> workers;
  std::vector<T> table;  // a shared normalizer (SharedNormalizer)
  std::vector<T> ys;     // y-sized: z of the pseudo-inverses, the GAP step's residual
  std::vector<T> counts;
};

// Runs body(begin, end) over [0, rows) in ranges of whole rows, `row_bytes` each.
// y as the adjoint-like passes read it: T values in place, or a half y (T = float) whose
// rows are widened into a worker's row as they are needed (along W only: a y row of its
// own for each x row; ShiftSumStored keeps sample chunks along H).
template <class T>
struct YSource {
  const T* plain = nullptr;
  const void* half = nullptr;
  kernels::Storage storage = kernels::Storage::kFloat32;

  // y row `row` (over B * H'): in place, or widened into `buffer` (W' values).
  const T* Row(const ShiftSumProblem<T>& p, int64_t row, T* buffer) const {
    if (plain) return plain + row * p.W_out;
    if constexpr (std::is_same_v<T, float>) {
      const int64_t bytes = kernels::StorageBytes(storage);
      kernels::WidenToFloat(static_cast<const char*>(half) + row * p.W_out * bytes, storage,
                            p.W_out, buffer);
    }
    return buffer;
  }
};

// fn(x as its stored type): X = float, hwy::bfloat16_t or hwy::float16_t.
template <class Fn>
void WithStoredX(StoredTensor x, const Fn& fn) {
  switch (x.storage) {
    case kernels::Storage::kBFloat16: return fn(static_cast<hwy::bfloat16_t*>(x.data));
    case kernels::Storage::kFloat16: return fn(static_cast<hwy::float16_t*>(x.data));
    case kernels::Storage::kFloat32: return fn(static_cast<float*>(x.data));
  }
}

inline YSource<float> YSourceOf(StoredTensor y) {
  YSource<float> source;
  if (y.storage == kernels::Storage::kFloat32) {
    source.plain = static_cast<const float*>(y.data);
  } else {
    source.half = y.data;
    source.storage = y.storage;
  }
  return source;
}

// Rows a task of ForRowRanges covers.
inline int64_t RowsPerTask(int64_t row_bytes) {
  return std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(row_bytes, 1));
}

template <class Body>
void ForRowRanges(const normkit_context& context, int64_t rows, int64_t row_bytes,
                  const Body& body) {
  const int64_t per_task = RowsPerTask(row_bytes);
  const int64_t tasks = (rows + per_task - 1) / per_task;
  const normkit_context& ctx = ContextForBytes(context, rows * row_bytes);
  ParallelFor(ctx, tasks,
              [&](int64_t t) { body(t * per_task, std::min(rows, (t + 1) * per_task)); });
}

// The same with body(begin, end, rows): `rows` is the task's worker's TaskRows, which
// make(rows) sized for each worker before the loop. The TaskRows come from `pool`,
// emptied first but keeping their capacity: a driver that runs again on a problem no
// larger (the half-storage driver, a chunk of samples at a time) allocates nothing.
template <class T, class Make, class Body>
void ForRowRanges(const normkit_context& context, int64_t rows, int64_t row_bytes,
                  std::vector<TaskRows<T>>& pool, const Make& make, const Body& body) {
  const int64_t per_task = RowsPerTask(row_bytes);
  const int64_t tasks = (rows + per_task - 1) / per_task;
  const normkit_context& ctx = ContextForBytes(context, rows * row_bytes);
  const size_t workers = static_cast<size_t>(ParallelWorkers(ctx, tasks));
  if (pool.size() < workers) pool.resize(workers);
  for (size_t i = 0; i < workers; ++i) {
    TaskRows<T>& s = pool[i];
    for (std::vector<T>* v : {&s.rows, &s.normalizer, &s.planes, &s.mask_planes, &s.phases,
                              &s.padded[0], &s.padded[1], &s.gather, &s.x_row, &s.y_row}) {
      v->clear();
    }
    for (int i = 0; i < 2; ++i) {
      s.padded_bf16[i].clear();
      s.padded_f16[i].clear();
    }
    make(s);
  }
  ParallelForWorkers(ctx, tasks, [&](int64_t t, int64_t worker) {
    body(t * per_task, std::min(rows, (t + 1) * per_task), pool[static_cast<size_t>(worker)]);
  });
}

template <class T>
void Zeroed(std::vector<T>& v, int64_t n) {
  v.assign(static_cast<size_t>(n), T(0));
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

// Channels whose x rows can land in y rows [r0, r1), as [first, last): along W all of
// them; along H channel c covers rows [Offset(c), Offset(c) + H), so only a band of
// channels does, and loops over all C would make a call with many channels and few
// rows cost C * H' steps. The band is widened by one each side; the loops still check
// SourceRow for each channel in it.
template <class T>
std::pair<int64_t, int64_t> ChannelsReaching(const ShiftSumProblem<T>& p, int64_t r0, int64_t r1) {
  if (!p.along_h || p.step == 0) return {0, p.C};
  const auto floor_div = [](int64_t n, int64_t d) {
    return n / d - ((n % d != 0) && ((n < 0) != (d < 0)));
  };
  int64_t first, last;
  if (p.step > 0) {  // Offset(c) < r1 and Offset(c) + H > r0
    first = floor_div(r0 - p.base - p.H, p.step);
    last = floor_div(r1 - 1 - p.base, p.step) + 2;
  } else {
    const int64_t a = -p.step;
    first = floor_div(p.base - r1, a);
    last = floor_div(p.base + p.H - 1 - r0, a) + 2;
  }
  return {std::clamp<int64_t>(first, 0, p.C), std::clamp<int64_t>(last, 0, p.C)};
}

// Elements between a mask's channel planes.
template <class T>
int64_t MaskPlane(const ShiftSumProblem<T>& p) {
  return p.PhiMask() ? p.H_out * p.W_out : p.H * p.W;
}

// The mask values that multiply x row (b, c, h), element-aligned with it. Shifted-
// domain masks (Phi) are read at the y positions the row lands on.
template <class T>
const T* AlignedMask(const ShiftSumProblem<T>& p, int64_t b, int64_t c, int64_t h) {
  const Placement at = Place(p, c, h);
  const int64_t plane = MaskPlane(p);
  switch (p.mask_kind) {
    case ShiftMask::kNone: return nullptr;
    case ShiftMask::kHW: return p.mask + h * p.W;
    case ShiftMask::kCHW: return p.mask + c * plane + h * p.W;
    case ShiftMask::kBCHW: return p.mask + (b * p.C + c) * plane + h * p.W;
    case ShiftMask::kPhiCHW: return p.mask + c * plane + at.r * p.W_out + at.col;
    case ShiftMask::kPhiBCHW: return p.mask + (b * p.C + c) * plane + at.r * p.W_out + at.col;
  }
  return nullptr;
}

// Elements of y between where consecutive channels of one x row land.
template <class T>
int64_t YChannelStride(const ShiftSumProblem<T>& p) {
  return p.along_h ? p.step * p.W_out : p.step;
}

// Elements between the aligned masks of consecutive channels (same sample and row).
template <class T>
int64_t MaskChannelStride(const ShiftSumProblem<T>& p) {
  switch (p.mask_kind) {
    case ShiftMask::kNone:
    case ShiftMask::kHW: return 0;
    case ShiftMask::kCHW:
    case ShiftMask::kBCHW: return MaskPlane(p);
    case ShiftMask::kPhiCHW:
    case ShiftMask::kPhiBCHW: return MaskPlane(p) + YChannelStride(p);  // next plane, shifted
  }
  return 0;
}

// Channels-last x row (b, h): its [W, C] block.
template <class T>
int64_t ChannelsLastRow(const ShiftSumProblem<T>& p, int64_t b, int64_t h) {
  return (b * p.H + h) * p.W * p.C;
}

// How far ahead of the rows it transposes ShiftSumToPlanes prefetches channels-last x.
constexpr int64_t kPlanesPrefetchBytes = int64_t{64} << 10;

// What a walk over channels-last x rows [row, row + rows) (rows counted over B * H)
// requests into L2 as it goes: the rows kPlanesPrefetchBytes further on, clipped to x.
template <class X>
struct PlanesPrefetch {
  const X* begin;
  int64_t count;
};

template <class T, class X>
PlanesPrefetch<X> PrefetchAhead(const ShiftSumProblem<T>& p, const X* x, int64_t row,
                                int64_t rows) {
  const int64_t total = p.B * p.H * p.W * p.C;
  const int64_t from =
      std::min(total, row * p.W * p.C + kPlanesPrefetchBytes / static_cast<int64_t>(sizeof(X)));
  return {x + from, std::min(rows * p.W * p.C, total - from)};
}

// x rows of one channel. Channels-first rows are used in place; channels-last rows are
// gathered from (and scattered back to) the [W, C] row block through a small buffer,
// one strided scalar walk per channel: only the paths along H use it, where the rows of
// one y row come from C different x rows (along W, channels-last rows are transposed
// to planes whole: ShiftSumToPlanes / ShiftSumFromPlanes).
template <class T>
struct XRows {
  const ShiftSumProblem<T>& p;
  std::vector<T>& buffer;  // W values where channels-last (XRowsScratch)

  XRows(const ShiftSumProblem<T>& problem, std::vector<T>& gather) : p(problem), buffer(gather) {}

  int64_t Offset(int64_t b, int64_t c, int64_t h) const {
    return p.channels_last ? (b * p.H + h) * p.W * p.C + c : ((b * p.C + c) * p.H + h) * p.W;
  }
  const T* Read(const T* x, int64_t b, int64_t c, int64_t h) {
    const T* src = x + Offset(b, c, h);
    if (!p.channels_last) return src;
    for (int64_t w = 0; w < p.W; ++w) buffer[w] = src[w * p.C];
    return buffer.data();
  }
  // A half x's channels-last row, widened as it is gathered.
  template <class X>
  const T* Read(const X* x, int64_t b, int64_t c, int64_t h) {
    const X* src = x + Offset(b, c, h);
    const int64_t stride = p.channels_last ? p.C : 1;
    for (int64_t w = 0; w < p.W; ++w)
      buffer[w] = kernels::ElementAt(src, kStorageOf<X>, w * stride);
    return buffer.data();
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

template <class T>
void XRowsScratch(const ShiftSumProblem<T>& p, TaskRows<T>& s) {
  if (p.channels_last) Zeroed(s.gather, p.W);
}

// y row (b, r) = s * sum_c mask * x over the channels that land on it.
template <class T, class X>
void ForwardRow(const ShiftSumProblem<T>& p, XRows<T>& xr, const X* x, int64_t b, int64_t r,
                T* yrow) {
  std::fill(yrow, yrow + p.W_out, T(0));
  const auto [c0, c1] = ChannelsReaching(p, r, r + 1);
  for (int64_t c = c0; c < c1; ++c) {
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
  const auto [c0, c1] = ChannelsReaching(p, r, r + 1);
  for (int64_t c = c0; c < c1; ++c) {
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

// A channels-last x row ([pixels, channels]) from planes, as ShiftSumFromPlanes. A half
// x row is formed in float in `row` (pixels * channels values, in cache) and rounded
// into x in one pass, streamed when `stream`: the transposition's 4 x 4 tiles store 8
// bytes of half values, too short to stream, and seed 003's NHWC adjoint straight into a
// bf16 x ran at 0.79 of the float chunks' speed.
template <class T, class X>
void FromPlanesToRow(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s,
                     int64_t pixels, int64_t channels, X* x, bool stream, std::vector<T>& row) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumFromPlanes(a, a_stride, m, m_stride, s, pixels, channels, x, stream);
  } else {
    ShiftSumFromPlanes(a, a_stride, m, m_stride, s, pixels, channels, row.data(), false);
    kernels::NarrowFromFloat(row.data(), pixels * channels, x, kStorageOf<X>, stream);
  }
}

// The GAP step's update of a channels-last x row from its planes (ShiftSumFromPlanesAxpy),
// formed in float in `row` and rounded into x where x is half, as FromPlanesToRow.
template <class T, class X>
void FromPlanesAxpyToRow(const T* planes, int64_t plane_stride, const T* r, int64_t r_step,
                         const T* m, int64_t m_stride, T a, int64_t pixels, int64_t channels, X* x,
                         std::vector<T>& row) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumFromPlanesAxpy(planes, plane_stride, r, r_step, m, m_stride, a, pixels, channels, x);
  } else {
    ShiftSumFromPlanesAxpy(planes, plane_stride, r, r_step, m, m_stride, a, pixels, channels,
                           row.data());
    kernels::NarrowFromFloat(row.data(), pixels * channels, x, kStorageOf<X>, false);
  }
}

// Capacity for FromPlanesToRow's float row, where x is half.
template <class T, class X>
void FromPlanesRowScratch(const ShiftSumProblem<T>& p, TaskRows<T>& s) {
  if (!std::is_same_v<T, X> && p.channels_last) Zeroed(s.x_row, p.W * p.C);
}

// Values either side of a padded y row and past a staged x row (ShiftSumWindowsToPixels).
template <class T>
constexpr int64_t kWindowPad = 2 * kernels::kShiftSumPlanePadBytes /
                               static_cast<int64_t>(sizeof(T));

// Channels-last float rows along W with |step| <= 2 and no mask or a [H, W] one: each
// pixel's channels can be one vector (two for |step| = 2) of the y row
// (ShiftSumWindowsToPixels), formed in float in a row in cache and rounded or copied
// out in one streamed span, instead of tiles of channel planes transposed.
template <class T>
bool PixelWindowsShape(const ShiftSumProblem<T>& p) {
  const int64_t a = p.step < 0 ? -p.step : p.step;
  return std::is_same_v<T, float> && p.channels_last && !p.along_h &&
         (p.mask_kind == ShiftMask::kNone || p.mask_kind == ShiftMask::kHW) && p.C >= 2 &&
         (a == 1 || a == 2);
}

// The adjoint (and the Moore-Penrose pinv) that way where x is half: the 4 x 4 tiles
// into its float row cost about a cycle a value (a bfloat16 x took as long as a float
// one). Seed 003's NHWC bf16 adjoint / pinv (C = 28) 1.03-1.28x. A float x keeps the
// tiles, which stream straight into x (through the row here: 0.78-0.83x at one
// thread). The phases take C past four vectors.
template <class T, class X>
bool AdjointByPixelWindows(const ShiftSumProblem<T>& p) {
  return !std::is_same_v<X, float> && PixelWindowsShape(p);
}

// The divide-by-mask pinv that way where x is half, or where its [C, W] planes of a
// float x row would not fit in L1: seed 003's 2 x 512 NHWC 0.39 -> 1.00 of memcpy (bf16
// 0.28 -> 0.67); C = 28 float unchanged within the noise (0.86-1.10x).
constexpr int64_t kDividePlanesBytes = int64_t{32} << 10;
template <class T, class X>
bool DivideByPixelWindows(const ShiftSumProblem<T>& p) {
  return PixelWindowsShape(p) &&
         (!std::is_same_v<X, float> || p.C * p.W * int64_t{sizeof(T)} > kDividePlanesBytes);
}

// The padded y row and staged x row of PixelWindowsShape (`used`: the call takes it).
template <class T>
void PixelWindowsScratch(const ShiftSumProblem<T>& p, bool used, TaskRows<T>& s) {
  if (!used) return;
  Zeroed(s.window, p.W_out + 2 * kWindowPad<T>);
  Zeroed(s.x_row, p.W * p.C + kWindowPad<T>);
}

// A channels-last x row from y-shaped row `yrow` by ShiftSumWindowsToPixels (x_c =
// s * window_c * m, or with `divide` window_c / m), where PixelWindowsShape(p): the
// row copied into the padded window, the x row formed in x_row and rounded out.
template <class T, class X>
void PixelsFromWindows(const ShiftSumProblem<T>& p, const T* yrow, const T* m, T s, bool divide,
                       X* xrow, bool stream, TaskRows<T>& rows) {
  if constexpr (std::is_same_v<T, float>) {
    T* window = rows.window.data() + kWindowPad<T>;
    std::copy_n(yrow, p.W_out, window);
    ShiftSumWindowsToPixels(window + p.Offset(0), p.step, m, s, p.W, p.C, rows.x_row.data(),
                            divide);
    constexpr kernels::Storage kX =
        std::is_same_v<X, float> ? kernels::Storage::kFloat32 : kStorageOf<X>;
    kernels::NarrowFromFloat(rows.x_row.data(), p.W * p.C, xrow, kX, stream);
  }
}

// x rows of (b, h) from y-shaped rows: x_c = s * mask_c * window_c, where row_of(r) is
// row r of sample b (along W only row h is read). The windows of consecutive channels
// are YChannelStride apart, so channels-last rows are one transposition of those
// windows (read as planes; along H across rows, so row_of must then index one array).
template <class T, class X, class RowOf>
void AdjointRows(const ShiftSumProblem<T>& p, const RowOf& row_of, int64_t b, int64_t h, X* x,
                 bool stream, TaskRows<T>& s) {
  if (p.channels_last) {
    const Placement at = Place(p, 0, h);
    if (AdjointByPixelWindows<T, X>(p)) {
      PixelsFromWindows(p, row_of(h), AlignedMask(p, b, 0, h), p.scale, false,
                        x + ChannelsLastRow(p, b, h), stream, s);
      return;
    }
    FromPlanesToRow(row_of(at.r) + at.col, YChannelStride(p), AlignedMask(p, b, 0, h),
                    MaskChannelStride(p), p.scale, p.W, p.C, x + ChannelsLastRow(p, b, h), stream,
                    s.x_row);
    return;
  }
  for (int64_t c = 0; c < p.C; ++c) {
    const Placement at = Place(p, c, h);
    ShiftSumScaledProduct(x + ((b * p.C + c) * p.H + h) * p.W, row_of(at.r) + at.col,
                          AlignedMask(p, b, c, h), p.scale, p.W, stream);
  }
}

// x written by the adjoint or the pseudo-inverse bypasses the cache when it is larger
// than the last-level cache (no write-allocate reads of C output streams).
template <class T>
bool StreamX(const ShiftSumProblem<T>& p) {
  return p.B * p.C * p.H * p.W * static_cast<int64_t>(sizeof(T)) >= kStreamingStoreBytes;
}

template <class T>
int64_t XRowBytes(const ShiftSumProblem<T>& p) {
  return p.C * p.W * static_cast<int64_t>(sizeof(T));
}

// Channels-first x is summed a tile of y rows at a time:
// - The GAP step sums each channel's run of tile_rows * W values in turn and requests
//   runs further on into L2 (prefetcht1): C interleaved streams are more than the
//   hardware prefetchers follow, and prefetching into L1 only clogs its fill buffers.
//   One thread, seed 003's shape: 11.6 GB/s without, 17-20 GB/s with. It and the
//   channels-last forward keep 2-row tiles (with 1, C = 512 lost: channels-last
//   forward 0.41 -> 0.24, GAP step 0.72 -> 0.58).
// - The forward along W reads fewer streams at once: tiles of up to 16 rows whose y
//   stays in L1 (16 KiB), summed 7 channels at a time, row by row, each channel's row
//   of the next tile requested into L2 as it goes. A standalone read of seed 003's x
//   in this order ran at 16.7-19.8 GB/s against 14.4-15.7 for all 28 channels a row
//   (sequential 19-21). Against 1-row tiles of all channels (alternating builds,
//   medians of 3, 1 / 2 threads): seed 003 0.89 / 0.90 -> 0.87 / 0.92, C = 31 0.90 /
//   0.86 -> 0.94 / 0.91, C = 512 0.57 / 0.59 -> 0.70 / 0.72, 660x660 0.80 / 0.81 ->
//   0.78 / 0.87. 16 rows whatever W lost C = 512 (0.56 -> 0.44) and 660x660 (0.80 ->
//   0.70); groups of 4 channels lost in cache (B = 1: 0.47 -> 0.41).
// - The forward along H (a y row's channels come from different x rows) takes one row
//   a tile, each channel's rows in one call.
// Every y element still sums its channels in order c = 0, 1, ..., so the result is
// the same bit for bit whatever the tile.
constexpr int64_t kTileRows = 2;
constexpr int64_t kForwardTileRows = 1;                          // channels-first forward along H
constexpr int64_t kForwardGroupRows = 16;                        // along W: at most, rows a tile
constexpr int64_t kForwardTileBytes = int64_t{16} << 10;         // and bytes of y a tile
constexpr int64_t kForwardGroupChannels = 7;                     // channels summed a row at a time
constexpr int64_t kGapPrefetchBytes = int64_t{128} << 10;        // GAP: bytes of x ahead
constexpr int64_t kGapUpdatePrefetchBytes = int64_t{256} << 10;  // GAP: tiles of x prefetched

// Calls tile(b, r0, r1) over rows [begin, end) of a [B, rows_per_sample] range, in
// tiles of at most tile_rows rows that never cross a sample.
template <class Tile>
void ForTiles(int64_t begin, int64_t end, int64_t rows_per_sample, int64_t tile_rows,
              const Tile& tile) {
  for (int64_t row = begin; row < end;) {
    const int64_t b = row / rows_per_sample, r0 = row % rows_per_sample;
    const int64_t r1 = std::min({rows_per_sample, r0 + tile_rows, r0 + (end - row)});
    tile(b, r0, r1);
    row += r1 - r0;
  }
}

// Channels-last forward along W, rows [begin, end) of y, when a row's channel planes
// fit in kPlanesRowBytes (seed 003's C = 28: 36 KiB): each x row is transposed to
// zero-padded planes, and ShiftSumSumPlanes sums each y block over all channels in
// registers and stores it once. Transposition and sums alternate in chunks of pixels,
// so the planes are summed while in L1 and the DRAM reads keep going. Every y element
// sums its channels in order 0, 1, ... with the tile kernel's steps: the bits of
// channels-first. Seed 003's NHWC forward went from 0.43-0.46 of memcpy to 0.51-0.59 at
// 1 thread, 0.42-0.54 to 0.66-0.74 at 2 (alternating builds, 3 rounds); a row in L2
// took 1.6-1.8 us against 2.0-2.4. (The same sums straight from channels-first x rows,
// H * W apart, ran at half the tile kernel's speed: the rows share L1 sets.)
constexpr int64_t kPlanesRowBytes = int64_t{40} << 10;
constexpr int64_t kPlanesChunk = 64;  // pixels per chunk; y ranges are multiples of it

template <class T>
constexpr int64_t PlanePad() {  // elements of zero padding on either side of a plane
  return kernels::kShiftSumPlanePadBytes / static_cast<int64_t>(sizeof(T));
}

template <class T>
int64_t PlaneStride(const ShiftSumProblem<T>& p) {
  return p.W + PlanePad<T>();
}

template <class T>
bool SumsPlanesInRegisters(const ShiftSumProblem<T>& p) {
  return p.C * PlaneStride(p) * static_cast<int64_t>(sizeof(T)) <= kPlanesRowBytes;
}

// The mask rows go to zero-padded planes too, chunk by chunk: one row for all
// channels (a [H, W] mask) or one per channel.
template <class T>
int64_t MaskPlaneRows(const ShiftSumProblem<T>& p) {
  return p.mask_kind == ShiftMask::kNone ? 0 : MaskChannelStride(p) ? p.C : 1;
}

template <class T>
void InRegistersScratch(const ShiftSumProblem<T>& p, TaskRows<T>& s) {
  Zeroed(s.planes, PlanePad<T>() + p.C * PlaneStride(p));  // the paddings stay 0
  const int64_t mask_rows = MaskPlaneRows(p);
  if (mask_rows) Zeroed(s.mask_planes, PlanePad<T>() + mask_rows * PlaneStride(p));
}

template <class T, class X>
void ForwardChannelsLastInRegisters(const ShiftSumProblem<T>& p, const X* x, T* y, int64_t begin,
                                    int64_t end, TaskRows<T>& s) {
  const int64_t pad = PlanePad<T>();
  const int64_t stride = PlaneStride(p);
  const int64_t chunks = (p.W + kPlanesChunk - 1) / kPlanesChunk;
  T* planes = s.planes.data() + pad;
  const int64_t mask_rows = MaskPlaneRows(p);
  T* mask_planes = mask_rows ? s.mask_planes.data() + pad : nullptr;
  // y block [j, j + lanes) reads pixels up to j + lanes - 1 - (the least channel offset).
  const int64_t least = std::min(p.Offset(0), p.Offset(p.C - 1));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / p.H_out, h = row % p.H_out;
    const X* xrow = x + ChannelsLastRow(p, b, h);
    const T* mrow = AlignedMask(p, b, 0, h);
    const PlanesPrefetch<X> ahead = PrefetchAhead(p, x, b * p.H + h, 1);
    kernels::ShiftSumPlanesRow<T> sums{};
    sums.y = y + (row - begin) * p.W_out;
    sums.planes = planes;
    sums.plane_stride = stride;
    sums.n = p.W;
    sums.offset0 = p.Offset(0);
    sums.step = p.step;
    sums.m = mask_planes;
    sums.m_channel_stride = mask_rows > 1 ? stride : 0;
    sums.channels = p.C;
    sums.scale = p.scale;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * kPlanesChunk, t1 = std::min(p.W, t0 + kPlanesChunk);
      // Each chunk requests an equal share of the rows ahead.
      const int64_t pf0 = ahead.count * k / chunks, pf1 = ahead.count * (k + 1) / chunks;
      ShiftSumToPlanes(xrow + t0 * p.C, t1 - t0, p.C, p.C, planes + t0, stride, ahead.begin + pf0,
                       pf1 - pf0);
      for (int64_t c = 0; c < mask_rows; ++c) {
        const T* m = mrow + c * MaskChannelStride(p);
        std::copy(m + t0, m + t1, mask_planes + c * stride + t0);
      }
      sums.y_end =
          t1 == p.W
              ? p.W_out
              : std::min(p.W_out, sums.y_begin + std::max<int64_t>(0, t1 + least - sums.y_begin) /
                                                     kPlanesChunk * kPlanesChunk);
      ShiftSumSumPlanes(sums);
      sums.y_begin = sums.y_end;
    }
  }
}

// Channels-last forward along W with no mask or a [H, W] one, and C up to four
// vectors: ShiftSumSkew sums each y element straight from the [W, C] rows, two rows
// side by side, instead of transposing them to planes, and requests the next two rows
// into L2 as it goes (without that it waited on DRAM: 0.46-0.53 of memcpy). Seed
// 003's NHWC forward, alternating with the planes path, 3 rounds: 0.52-0.58 -> 0.88-0.90
// at 1 thread, 0.54-0.76 -> 0.90-1.01 at 2; one image in cache 0.25-0.30 -> 0.38-0.48.
// Per-channel and Phi masks would need a gather per pixel: they keep the planes. Rows
// whose last vector of channels would read past x are read from padded copies
// (SkewRows).
template <class T>
bool CanSkewRows(const ShiftSumProblem<T>& p) {
  const int64_t a = p.step < 0 ? -p.step : p.step;
  return (p.mask_kind == ShiftMask::kNone || p.mask_kind == ShiftMask::kHW) && p.C >= 2 && a >= 1 &&
         a <= p.W && p.C <= kernels::ShiftSumSkewMaxChannels<T>();
}

// The GAP step along W for channels-last x of one to four vectors of channels (at
// least one) with no mask or a [H, W] mask: ShiftSumSkew forms A x and ShiftSumSkewAxpy
// updates the rows, so x is neither transposed in nor out. Seed 003's NHWC GAP step,
// alternating with the planes path, 3 rounds: 0.59-0.69 of memcpy -> 1.11-1.13 at 1
// thread, 0.61-0.84 -> 0.98-1.46 at 2; one image in cache 0.42-0.45 -> 0.62-0.83.
template <class T>
bool CanSkewGapRows(const ShiftSumProblem<T>& p) {
  return CanSkewRows(p) && p.C >= kernels::ShiftSumSkewAxpyMinChannels<T>();
}

// ShiftSumSkew over x rows [row, row + n), n <= 2, into y_rows[0, n). The last vector
// of a pixel's channels reads up to ShiftSumSkewMaxChannels values past it: a row
// whose reads would reach x row `limit` (the end of x, or rows another task writes)
// is read from a padded copy (with short rows, more than the last one).
template <class T, class X>
void SkewRows(const ShiftSumProblem<T>& p, const X* x, int64_t row, int64_t n, T* const* y_rows,
              int64_t limit, std::vector<X> (&padded)[2]) {
  const int64_t row_elems = p.W * p.C;
  const int64_t over = kernels::ShiftSumSkewMaxChannels<T>();
  kernels::ShiftSumSkewRows<T, X> rows{};
  rows.W = p.W;
  rows.C = p.C;
  rows.step = p.step;
  rows.scale = p.scale;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = row + i;
    rows.y[i] = y_rows[i];
    rows.x[i] = x + r * row_elems;
    rows.m[i] = p.mask_kind == ShiftMask::kHW ? p.mask + (r % p.H) * p.W : nullptr;
    if ((r + 1) * row_elems + over > limit * row_elems) {
      // Within the capacity SkewScratch reserved: no allocation.
      padded[i].assign(static_cast<size_t>(row_elems + over), X{});
      std::copy(rows.x[i], rows.x[i] + row_elems, padded[i].begin());
      rows.x[i] = padded[i].data();
    }
  }
  const PlanesPrefetch<X> ahead = PrefetchAhead(p, x, row, 2);
  rows.prefetch = ahead.begin;
  rows.prefetch_count = ahead.count;
  kernels::ShiftSumSkew(rows);
}

// Capacity for SkewRows' padded copies of x rows stored as X (reserved, not written:
// few rows need one).
template <class T, class X = T>
void SkewScratch(const ShiftSumProblem<T>& p, TaskRows<T>& s) {
  for (std::vector<X>& copy : PaddedRows<X>(s)) {
    copy.reserve(static_cast<size_t>(p.W * p.C + kernels::ShiftSumSkewMaxChannels<T>()));
  }
}

template <class T, class X>
void ForwardChannelsLastSkewed(const ShiftSumProblem<T>& p, const X* x, T* y, int64_t begin,
                               int64_t end, TaskRows<T>& s) {
  for (int64_t row = begin; row < end; row += 2) {
    T* y_rows[2] = {y + (row - begin) * p.W_out, y + (row + 1 - begin) * p.W_out};
    SkewRows(p, x, row, std::min<int64_t>(2, end - row), y_rows, p.B * p.H, PaddedRows<X>(s));
  }
}

// Channels-last forward along W past the skewed walk's channels (C = 512: a 512 KiB
// row) with no mask or a [H, W] one: ShiftSumPhases adds each pixel's channels, one
// contiguous run, into the phases of its y row (L1-resident: a 5 KiB y row at C = 512),
// which then interleave into y. x is read once, in place, with no transposition.
// Seed 003's C = 512 NHWC forward: the planes path (channel slices transposed to L1
// planes) ran at 0.34-0.39 of memcpy at 1 thread, 0.39-0.51 at 2 (3 rounds alternating
// builds); this one at 0.84-1.01 and 0.90-1.05 (5 runs of the same build).
// How far ahead of the pixel it sums the phase walk requests x into L2. The walk goes
// down each row for step > 0, which the hardware prefetchers did not follow: seed 003's
// C = 512 NHWC forward ran at 0.46-0.49 of memcpy (1 thread) with the planes path's
// requests, 0.80-1.01 at 8-32 KiB ahead, 0.70-0.79 at 64 KiB, 0.59-0.61 at 256 KiB.
constexpr int64_t kPhasesAheadBytes = int64_t{16} << 10;

template <class T>
bool CanSumPhases(const ShiftSumProblem<T>& p) {
  return p.channels_last && !p.along_h &&
         (p.mask_kind == ShiftMask::kNone || p.mask_kind == ShiftMask::kHW) && p.step != 0;
}

// Phase rows of a y row: |step| rows of this many values.
template <class T>
int64_t PhaseLen(const ShiftSumProblem<T>& p) {
  const int64_t a = p.step < 0 ? -p.step : p.step;
  return (p.W_out + a - 1) / a;
}

// Calls f(j, i) for each element j of a y row and its index i in the phases
// (ShiftSumPhases' order).
template <class T, class F>
void ForPhasePlaces(const ShiftSumProblem<T>& p, const F& f) {
  const int64_t a = p.step < 0 ? -p.step : p.step;
  const int64_t len = PhaseLen(p);
  for (int64_t r = 0; r < a; ++r) {
    for (int64_t k = 0, j = r; j < p.W_out; ++k, j += a) {
      f(j, r * len + (p.step > 0 ? k : len - 1 - k));
    }
  }
}

// Zeroed phase rows of one y row.
template <class T>
void PhasesScratch(const ShiftSumProblem<T>& p, TaskRows<T>& s) {
  Zeroed(s.phases, (p.step < 0 ? -p.step : p.step) * PhaseLen(p));
}

// The fields a phase kernel's row shares (ShiftSumPhaseRow, ShiftSumPhaseAdjointRow):
// channels-last x row `row` (B * H rows), its [H, W] mask row, and the phase rows.
template <class T, class X, class Row>
void SetPhaseRow(const ShiftSumProblem<T>& p, int64_t row, X* x, std::vector<T>& phases, Row& s) {
  s.phases = phases.data();
  s.len = PhaseLen(p);
  s.x = x + row * p.W * p.C;
  s.m = p.mask_kind == ShiftMask::kHW ? p.mask + (row % p.H) * p.W : nullptr;
  s.W = p.W;
  s.C = p.C;
  s.step = p.step;
}

// y row `row` (B * H rows) from x's by phases; next_x: the x row summed after it, if any.
template <class T, class X>
void SumRowByPhases(const ShiftSumProblem<T>& p, const X* x, int64_t row, const X* next_x,
                    std::vector<T>& phases, T* yrow) {
  std::fill(phases.begin(), phases.end(), T(0));
  kernels::ShiftSumPhaseRow<T, X> s{};
  SetPhaseRow(p, row, x, phases, s);
  s.next_x = next_x;
  s.ahead = std::max<int64_t>(1, kPhasesAheadBytes / (p.C * static_cast<int64_t>(sizeof(X))));
  kernels::ShiftSumPhases(s);
  ForPhasePlaces(p, [&](int64_t j, int64_t i) { yrow[j] = phases[i]; });
  if (p.scale != T(1)) ShiftSumScale(yrow, p.scale, p.W_out);
}

// x row `row` from a y-shaped row `yrow` through its phases (ShiftSumPhasesAdjoint):
// x = (scale * y) * m, or with `update` x += (scale * m) * y.
template <class T, class X>
void SpreadRowByPhases(const ShiftSumProblem<T>& p, const T* yrow, int64_t row, T scale,
                       bool stream, bool update, std::vector<T>& phases, X* x) {
  ForPhasePlaces(p, [&](int64_t j, int64_t i) { phases[i] = yrow[j]; });
  kernels::ShiftSumPhaseAdjointRow<T, X> s{};
  SetPhaseRow(p, row, x, phases, s);
  s.scale = scale;
  s.stream = stream;
  s.update = update;
  kernels::ShiftSumPhasesAdjoint(s);
}

template <class T, class X>
void ForwardChannelsLastPhases(const ShiftSumProblem<T>& p, const X* x, T* y, int64_t begin,
                               int64_t end, TaskRows<T>& s) {
  for (int64_t row = begin; row < end; ++row) {
    const X* next_x = row + 1 < end ? x + (row + 1) * p.W * p.C : nullptr;
    SumRowByPhases(p, x, row, next_x, s.phases, y + (row - begin) * p.W_out);
  }
}

// Channels-last rows past the skewed walk's channels take the adjoint the same way:
// each y row goes to its phases, and every pixel's C values are one run of them.
template <class T>
bool AdjointByPhases(const ShiftSumProblem<T>& p) {
  return CanSumPhases(p) && !CanSkewRows(p);
}

// x rows of (b, h) = A^T of y-shaped rows (row_of as in AdjointRows); s: its phases
// (PhasesScratch where AdjointByPhases(p)) and x_row (FromPlanesRowScratch).
template <class T, class X, class RowOf>
void AdjointRow(const ShiftSumProblem<T>& p, const RowOf& row_of, int64_t b, int64_t h, X* x,
                bool stream, TaskRows<T>& s) {
  if (AdjointByPhases(p)) {
    SpreadRowByPhases(p, row_of(h), b * p.H + h, p.scale, stream, false, s.phases, x);
  } else {
    AdjointRows(p, row_of, b, h, x, stream, s);
  }
}

// The GAP step a row at a time the same way: A x by phases, the residual, and the
// update of the row from the residual's phases (the row is still in L2).
template <class T, class X>
void GapStepChannelsLastPhases(const ShiftSumProblem<T>& p, T step_scale, T gamma,
                               const T* normalizer, const YSource<T>& y, X* x, int64_t begin,
                               int64_t end, TaskRows<T>& s) {
  T* res = s.rows.data();
  for (int64_t row = begin; row < end; ++row) {
    const X* next_x = row + 1 < end ? x + (row + 1) * p.W * p.C : nullptr;
    SumRowByPhases(p, static_cast<const X*>(x), row, next_x, s.phases, res);
    const T* pr = NormalizerRowOrGiven(p, normalizer, row / p.H, row % p.H, s.normalizer.data());
    ShiftSumGapResidual(res, y.Row(p, row, s.y_row.data()), pr, T(1), p.scale * p.scale, gamma,
                        p.W_out);
    SpreadRowByPhases(p, res, row, step_scale, false, true, s.phases, x);
  }
}

// Channels-last forward along W otherwise (C = 512: a 512 KiB row): a tile's x rows are transposed
// to channel planes a slice of channels at a time, and each slice is summed (the
// channels-first tile kernel) before the next, so every y element still sums its
// channels in order 0, 1, ... The slice keeps the planes in L1 whatever C is: seed
// 003's C = 512 forward (a 512 KiB row) went from 0.26-0.27 of memcpy to 0.31-0.44
// (one thread), C = 28 is unchanged within noise (slices of 8 channels, or all 28).
constexpr int64_t kPlanesSliceBytes = int64_t{16} << 10;

// Channels of a slice in ForwardChannelsLastSlices.
template <class T>
int64_t PlanesSlice(const ShiftSumProblem<T>& p) {
  const int64_t per_channel = kTileRows * p.W * static_cast<int64_t>(sizeof(T));
  return std::min(p.C, std::max<int64_t>(4, kPlanesSliceBytes / per_channel));
}

template <class T, class X>
void ForwardChannelsLastSlices(const ShiftSumProblem<T>& p, const X* x, T* y, int64_t begin,
                               int64_t end, TaskRows<T>& s) {
  const int64_t slice = PlanesSlice(p);
  std::vector<T>& planes = s.planes;
  const bool phi = p.PhiMask();
  ForTiles(begin, end, p.H_out, kTileRows, [&](int64_t b, int64_t r0, int64_t r1) {
    T* ytile = y + (b * p.H_out + r0 - begin) * p.W_out;
    std::fill(ytile, ytile + (r1 - r0) * p.W_out, T(0));
    for (int64_t c0 = 0; c0 < p.C; c0 += slice) {
      const int64_t cs = std::min(slice, p.C - c0);
      for (int64_t h = r0; h < r1; ++h) {
        const PlanesPrefetch<X> ahead = PrefetchAhead(p, x, b * p.H + h, c0 == 0 ? 1 : 0);
        ShiftSumToPlanes(x + ChannelsLastRow(p, b, h) + c0, p.W, cs, p.C,
                         &planes[(h - r0) * cs * p.W], p.W, ahead.begin, ahead.count);
      }
      kernels::ShiftSumTile<T> tile{};
      tile.y = ytile + p.Offset(c0);
      tile.y_row_stride = p.W_out;
      tile.y_channel_step = p.step;
      tile.x = planes.data();
      tile.x_row_stride = cs * p.W;
      tile.x_channel_stride = p.W;
      tile.m = AlignedMask(p, b, c0, r0);
      tile.m_row_stride = phi ? p.W_out : p.W;
      tile.m_channel_stride = MaskChannelStride(p);
      tile.channels = cs;
      tile.rows = r1 - r0;
      tile.n = p.W;
      ShiftSumAccumulateTile(tile);
    }
    if (p.scale != T(1)) ShiftSumScale(ytile, p.scale, (r1 - r0) * p.W_out);
  });
}

// How the forward walks x.
enum class ForwardPath {
  kChannelsFirst,      // tiles of channel rows
  kAlongH,             // channels-last along H: a channel's row at a time (XRows)
  kSkewed,             // ForwardChannelsLastSkewed
  kPhases,             // ForwardChannelsLastPhases
  kPlanesInRegisters,  // ForwardChannelsLastInRegisters
  kPlaneSlices,        // ForwardChannelsLastSlices
};

template <class T>
ForwardPath ForwardPathOf(const ShiftSumProblem<T>& p) {
  if (!p.channels_last) return ForwardPath::kChannelsFirst;
  if (p.along_h) return ForwardPath::kAlongH;
  if (CanSkewRows(p)) return ForwardPath::kSkewed;
  if (CanSumPhases(p)) return ForwardPath::kPhases;
  if (SumsPlanesInRegisters(p)) return ForwardPath::kPlanesInRegisters;
  return ForwardPath::kPlaneSlices;
}

template <class T, class X = T>
void ForwardScratch(const ShiftSumProblem<T>& p, TaskRows<T>& s) {
  switch (ForwardPathOf(p)) {
    case ForwardPath::kChannelsFirst: return;
    case ForwardPath::kAlongH: return XRowsScratch(p, s);
    case ForwardPath::kSkewed: return SkewScratch<T, X>(p, s);
    case ForwardPath::kPhases: return PhasesScratch(p, s);
    case ForwardPath::kPlanesInRegisters: return InRegistersScratch(p, s);
    case ForwardPath::kPlaneSlices: return Zeroed(s.planes, kTileRows * PlanesSlice(p) * p.W);
  }
}

// Phi_s once per call, where the caller gave none and each of B samples would compute
// the same rows again (they depend on the sample only through per-sample masks): seed
// 003's 16x28x256x256 GAP step without a normalizer, 1 thread, C driver, alternating
// builds: NCHW 13.3-14.8 ms -> 10.8-12.2 ms (as fast as with Phi_s given), NHWC
// unchanged within noise (20-22 ms; its transpositions dominate). Returns the normalizer
// to use: `given`, the table, or null (rows computed as they go: one sample, per-sample
// masks, or a table above kSharedNormalizerBytes). Same rows, same bits.
constexpr int64_t kSharedNormalizerBytes = int64_t{16} << 20;

template <class T>
const T* SharedNormalizer(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* given,
                          std::vector<T>& table) {
  if (given || p.PerSampleMask() || p.B < 2) return given;
  const int64_t elems = p.H_out * p.W_out;
  if (elems * static_cast<int64_t>(sizeof(T)) > kSharedNormalizerBytes) return nullptr;
  table.resize(static_cast<size_t>(elems));
  ShiftSumNormalizer(ctx, p, table.data());
  return table.data();
}

}  // namespace shift_sum_rows
}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_SHIFT_SUM_ROWS_H_
