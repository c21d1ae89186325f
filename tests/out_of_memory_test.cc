// SPDX-License-Identifier: Apache-2.0
// Every op with each of its heap allocations failing in turn, on 1 and 2 threads: the
// call must return NORMKIT_ERROR_OUT_OF_MEMORY with every output byte untouched, or
// (past its last allocation) succeed with the bits of an undisturbed call. A binary of
// its own: it replaces the global operator new to make the k-th allocation fail.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "normkit/normkit.h"
#include "shift_sum_reference.h"
#include "test_util.h"

namespace {

// Allocations left before the one that fails; negative: none fails.
std::atomic<int64_t> g_allocations_before_failure{-1};

bool ThisAllocationFails() {
  return g_allocations_before_failure.load(std::memory_order_relaxed) >= 0 &&
         g_allocations_before_failure.fetch_sub(1) == 0;
}

void* Allocate(std::size_t n) {
  if (ThisAllocationFails()) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

void* AllocateAligned(std::size_t n, std::align_val_t align) {
  if (ThisAllocationFails()) throw std::bad_alloc();
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) {
  return Allocate(n);
}
void* operator new[](std::size_t n) {
  return Allocate(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return Allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return Allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) {
  return AllocateAligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return AllocateAligned(n, a);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace normkit_test {
namespace {

using Bytes = std::vector<unsigned char>;

template <class T>
void Append(Bytes& bytes, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
}

// "" when equal, else how many bytes differ and where the first does.
std::string Difference(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size()) return "sizes differ";
  size_t count = 0, first = 0;
  for (size_t i = got.size(); i-- > 0;) {
    if (got[i] != want[i]) ++count, first = i;
  }
  return count == 0
             ? ""
             : std::to_string(count) + " bytes differ, the first at " + std::to_string(first);
}

// reset() puts every buffer the call writes back to its starting bytes, call() makes
// the call, outputs() returns the bytes it may write. Fails the k-th allocation of
// call() for k = 0, 1, ... until a call makes fewer than k + 1 allocations.
void ExpectAllOrNothing(const std::string& what, const std::function<void()>& reset,
                        const std::function<normkit_status()>& call,
                        const std::function<Bytes()>& outputs) {
  SCOPED_TRACE(what);
  reset();
  const Bytes before = outputs();
  ASSERT_EQ(call(), NORMKIT_SUCCESS) << normkit_last_error();
  const Bytes want = outputs();
  ASSERT_NE(want, before) << "the call must write something for this test to mean anything";
  for (int64_t k = 0;; ++k) {
    ASSERT_LT(k, 1000) << "allocations without end";
    reset();
    g_allocations_before_failure.store(k);
    const normkit_status status = call();
    const bool failed = g_allocations_before_failure.exchange(-1) < 0;
    if (status == NORMKIT_ERROR_OUT_OF_MEMORY) {
      ASSERT_TRUE(failed);
      EXPECT_EQ(Difference(outputs(), before), "")
          << "allocation " << k << " failed after outputs were written";
      EXPECT_NE(std::string(normkit_last_error()), "");
    } else {
      ASSERT_EQ(status, NORMKIT_SUCCESS) << normkit_last_error();
      EXPECT_EQ(Difference(outputs(), want), "") << "allocation " << k;
    }
    if (!failed) break;  // the call made k allocations or fewer: all were tried
  }
}

// ExpectAllOrNothing for an op whose only outputs are y, or x in place: x starts as
// x0 and y as -7s, and xt / yt point at them.
void ExpectXyAllOrNothing(const std::string& what, const std::vector<float>& x0, normkit_tensor& xt,
                          normkit_tensor& yt, bool in_place,
                          const std::function<normkit_status()>& call) {
  std::vector<float> x, y;
  ExpectAllOrNothing(
      what + (in_place ? " in place" : ""),
      [&] {
        x = x0;
        y.assign(x0.size(), -7.0f);
        xt.data = x.data();
        yt.data = in_place ? x.data() : y.data();
      },
      call,
      [&] {
        Bytes b;
        Append(b, x);
        Append(b, y);
        return b;
      });
}

// ExpectXyAllOrNothing for a norm that also writes `stats` means and rstds (-7s at the
// start); call(mean, rstd) makes the call.
void ExpectNormAllOrNothing(const std::string& what, const std::vector<float>& x0,
                            normkit_tensor& xt, normkit_tensor& yt, bool in_place, int64_t stats,
                            const std::function<normkit_status(float*, float*)>& call) {
  std::vector<float> x, y, mean, rstd;
  ExpectAllOrNothing(
      what + (in_place ? " in place" : ""),
      [&] {
        x = x0;
        y.assign(x0.size(), -7.0f);
        mean.assign(static_cast<size_t>(stats), -7.0f);
        rstd = mean;
        xt.data = x.data();
        yt.data = in_place ? x.data() : y.data();
      },
      [&] { return call(mean.data(), rstd.data()); },
      [&] {
        Bytes b;
        Append(b, x);
        Append(b, y);
        Append(b, mean);
        Append(b, rstd);
        return b;
      });
}

// Affine over channels-last rows too long for a thread's stack: their parameter rows
// are built once on the heap, before the loop.
TEST(OutOfMemory, AffineWritesAllOrNothing) {
  const std::vector<int64_t> shape = {4, 5000, 2, 2};
  const int64_t C = shape[1], n = Numel(shape);
  const std::vector<float> x0 = RandomVector(n, 11);
  for (int threads : {1, 2}) {
    Context ctx(threads);
    for (const int32_t kind : {NORMKIT_PARAMS_PER_CHANNEL, NORMKIT_PARAMS_PER_SAMPLE_CHANNEL}) {
      const int64_t count = kind == NORMKIT_PARAMS_PER_CHANNEL ? C : shape[0] * C;
      const std::vector<float> scale = RandomVector(count, 12), shift = RandomVector(count, 13);
      normkit_tensor xt = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_LAST, shape), yt = xt;
      for (bool in_place : {false, true}) {
        ExpectXyAllOrNothing(
            "affine kind " + std::to_string(kind) + ", threads " + std::to_string(threads), x0, xt,
            yt, in_place,
            [&] { return normkit_affine(ctx.ctx, &xt, scale.data(), shift.data(), kind, &yt); });
      }
    }
  }
}

// Batch norm over more channels than a loop folds on its stack, and group norm whose
// samples are split over the threads (a loop per sample): the paths that allocated
// between parallel loops or inside them.
TEST(OutOfMemory, NormsWriteAllOrNothing) {
  struct Case {
    std::vector<int64_t> shape;
    bool channels_last;
  };
  const std::vector<Case> bn_cases = {
      {{64, 3000}, false},       // [N, C]: the periodic row, folded per range
      {{2, 5000, 3, 3}, false},  // planes under a vector, folded per range in pieces
      {{8, 2000, 4, 4}, true},   // channels-last rows folded by each thread
      {{4, 5000, 2, 2}, true}};  // long channels-last rows, folded once
  for (int threads : {1, 2}) {
    Context ctx(threads);
    for (const Case& c : bn_cases) {
      const int64_t C = c.shape[1], n = Numel(c.shape);
      const auto layout =
          c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
      const std::vector<float> x0 = RandomVector(n, 1);
      const std::vector<float> gamma = RandomVector(C, 2), beta = RandomVector(C, 3),
                               mean = RandomVector(C, 4), var = RandomVector(C, 5, 0.1f, 2.0f);
      normkit_tensor xt = Desc(nullptr, layout, c.shape), yt = xt;
      for (bool in_place : {false, true}) {
        ExpectXyAllOrNothing(
            "batch norm " + std::to_string(C) + " channels, threads " + std::to_string(threads), x0,
            xt, yt, in_place, [&] {
              return normkit_batch_norm_inference(ctx.ctx, &xt, gamma.data(), beta.data(),
                                                  mean.data(), var.data(), 1e-5f, &yt);
            });
      }
    }
    struct GroupCase {
      std::vector<int64_t> shape;
      bool channels_last;
      int64_t groups;
    };
    const std::vector<GroupCase> gn_cases = {
        {{2, 544, 32, 32}, true, 32},  // samples split over the threads, heap scratch
        {{2, 64, 96, 96}, false, 2},   // groups split over the threads
        {{3, 32, 20, 20}, true, 8}};   // samples fused
    for (const GroupCase& c : gn_cases) {
      const int64_t C = c.shape[1], n = Numel(c.shape);
      const auto layout =
          c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
      const std::vector<float> x0 = RandomVector(n, 6);
      const std::vector<float> gamma = RandomVector(C, 7), beta = RandomVector(C, 8);
      normkit_tensor xt = Desc(nullptr, layout, c.shape), yt = xt;
      for (bool in_place : {false, true}) {
        ExpectNormAllOrNothing(
            "group norm " + std::to_string(C) + " channels, threads " + std::to_string(threads), x0,
            xt, yt, in_place, c.shape[0] * c.groups, [&](float* mean, float* rstd) {
              return normkit_group_norm(ctx.ctx, &xt, c.groups, gamma.data(), beta.data(), 1e-5f,
                                        NORMKIT_ACTIVATION_NONE, &yt, mean, rstd);
            });
      }
    }
    // float16 group norm: each run's float scratch (blocks split over the threads, a
    // fused sample, a batch of small groups), made before any output. The buffers hold n
    // float16 values in n / 2 floats' bytes.
    for (const GroupCase& c :
         {GroupCase{{2, 64, 96, 96}, false, 2}, GroupCase{{3, 32, 20, 20}, true, 8},
          GroupCase{{2, 32, 7, 7}, false, 8}}) {
      const int64_t C = c.shape[1], n = Numel(c.shape);
      const auto layout =
          c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
      const std::vector<float> x0 = RandomVector(n / 2, 11, 0.5f, 2.0f);
      const std::vector<float> gamma = RandomVector(C, 12), beta = RandomVector(C, 13);
      normkit_tensor xt = Desc(nullptr, layout, c.shape), yt = xt;
      xt.dtype = yt.dtype = NORMKIT_DTYPE_FLOAT16;
      for (bool in_place : {false, true}) {
        ExpectNormAllOrNothing(
            "float16 group norm " + std::to_string(C) + " channels, threads " +
                std::to_string(threads),
            x0, xt, yt, in_place, c.shape[0] * c.groups, [&](float* mean, float* rstd) {
              return normkit_group_norm(ctx.ctx, &xt, c.groups, gamma.data(), beta.data(), 1e-5f,
                                        NORMKIT_ACTIVATION_NONE, &yt, mean, rstd);
            });
      }
    }
    // Layer norm with gamma and beta off a cache line: RowNorm allocates aligned copies.
    const int64_t rows = 64, D = 768;
    const std::vector<float> x0 = RandomVector(rows * D, 9), params = RandomVector(2 * D + 2, 10);
    const float* gamma = params.data() + 1;  // 4 bytes past the vector's (16-byte) alignment
    const float* beta = params.data() + D + 2;
    normkit_tensor xt = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), yt = xt;
    ExpectNormAllOrNothing(
        "layer norm, gamma and beta misaligned, threads " + std::to_string(threads), x0, xt, yt,
        false, rows, [&](float* mean, float* rstd) {
          return normkit_layer_norm(ctx.ctx, &xt, gamma, beta, 1e-5f, &yt, mean, rstd);
        });
    // bfloat16 rows: a float scratch per worker, made before the loop. (The buffers hold
    // rows * D bfloat16 values in rows * D / 2 floats' bytes.)
    const std::vector<float> half0 = RandomVector(rows * D / 2, 14, 0.5f, 2.0f);
    normkit_tensor ht = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), hy = ht;
    ht.dtype = hy.dtype = NORMKIT_DTYPE_BFLOAT16;
    for (bool in_place : {false, true}) {
      ExpectNormAllOrNothing("bfloat16 layer norm, threads " + std::to_string(threads), half0, ht,
                             hy, in_place, rows, [&](float* mean, float* rstd) {
                               return normkit_layer_norm(ctx.ctx, &ht, gamma, beta, 1e-5f, &hy,
                                                         mean, rstd);
                             });
    }
    // Residual add + layer norm: without h_out, h goes to a scratch per worker (gamma and
    // beta misaligned: their aligned copies too), made before any output is written.
    {
      const std::vector<float> r0 = RandomVector(rows * D, 17);
      std::vector<float> x, r, y, h, mean, rstd;
      normkit_tensor at = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), rt = at,
                     ayt = at, aht = at;
      for (bool with_h : {false, true}) {
        ExpectAllOrNothing(
            std::string("add_layer_norm, h_out ") + (with_h ? "given" : "NULL") + ", threads " +
                std::to_string(threads),
            [&] {
              x = x0, r = r0;
              y.assign(x0.size(), -7.0f), h = y;
              mean.assign(rows, -7.0f), rstd = mean;
              at.data = x.data(), rt.data = r.data(), ayt.data = y.data(), aht.data = h.data();
            },
            [&] {
              return normkit_add_layer_norm(ctx.ctx, &at, &rt, beta, gamma, beta, 1e-5f, &ayt,
                                            with_h ? &aht : nullptr, mean.data(), rstd.data());
            },
            [&] {
              Bytes b;
              for (const auto* v : {&x, &r, &y, &h, &mean, &rstd}) Append(b, *v);
              return b;
            });
      }
    }
    // A float16 affine without scale: its ones are made before the call writes anything.
    normkit_tensor at = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3 * D, 16}), ay = at;
    at.dtype = ay.dtype = NORMKIT_DTYPE_FLOAT16;
    const std::vector<float> affine0 = RandomVector(3 * D * 16, 15, 0.5f, 2.0f);
    const std::vector<float> shift = RandomVector(3 * D, 16);
    ExpectXyAllOrNothing("float16 shift-only affine, threads " + std::to_string(threads), affine0,
                         at, ay, false, [&] {
                           return normkit_affine(ctx.ctx, &at, nullptr, shift.data(),
                                                 NORMKIT_PARAMS_PER_CHANNEL, &ay);
                         });
  }
}

// Batch norm in training mode: its moments, parameters and (channels-last) column scratch
// are allocated before the running averages, the saved statistics or y are written.
TEST(OutOfMemory, BatchNormTrainingWritesAllOrNothing) {
  struct Case {
    std::vector<int64_t> shape;
    bool channels_last;
  };
  for (const Case& c :
       {Case{{8, 16, 40, 40}, false}, Case{{16, 600, 8}, false}, Case{{8, 700, 6, 6}, true}}) {
    for (int threads : {1, 2}) {
      Context ctx(threads);
      const int64_t C = c.shape[1], n = Numel(c.shape);
      const auto layout =
          c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
      const std::vector<float> x0 = RandomVector(n, 1), gamma = RandomVector(C, 2);
      std::vector<float> x, y, stats;
      normkit_tensor xt = Desc(nullptr, layout, c.shape), yt = xt;
      ExpectAllOrNothing(
          "batch norm training " + std::to_string(C) + " channels, threads " +
              std::to_string(threads),
          [&] {
            x = x0;
            y.assign(x0.size(), -7.0f);
            stats.assign(static_cast<size_t>(4 * C), 0.5f);
            xt.data = x.data();
            yt.data = y.data();
          },
          [&] {
            float* s = stats.data();
            return normkit_batch_norm_training(ctx.ctx, &xt, gamma.data(), nullptr, 1e-5f, 0.1f, s,
                                               s + C, &yt, s + 2 * C, s + 3 * C);
          },
          [&] {
            Bytes b;
            Append(b, y);
            Append(b, stats);
            return b;
          });
    }
  }
}

// The backward: every allocation (partials, per-worker column sums, coefficients) fails
// in turn, dx in place on dy and apart, and a channel through the double path (|dy| near
// FLT_MAX) so its flags are allocated too.
TEST(OutOfMemory, BatchNormBackwardWritesAllOrNothing) {
  struct Case {
    std::vector<int64_t> shape;
    bool channels_last, in_place;
  };
  for (const Case& c : {Case{{8, 16, 40, 40}, false, false}, Case{{16, 600, 8}, false, true},
                        Case{{8, 700, 6, 6}, true, false}, Case{{4, 2, 30, 30}, true, true}}) {
    for (int threads : {1, 2}) {
      Context ctx(threads);
      const int64_t C = c.shape[1], n = Numel(c.shape);
      const auto layout =
          c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
      std::vector<float> x0 = RandomVector(n, 1), dy0 = RandomVector(n, 2);
      dy0[0] = 3e38f;
      const std::vector<float> gamma = RandomVector(C, 3), mean = RandomVector(C, 4),
                               rstd = RandomVector(C, 5, 0.5f, 1.5f);
      std::vector<float> dy, dx, grads;
      normkit_tensor xt = Desc(x0.data(), layout, c.shape), dyt = xt, dxt = xt;
      ExpectAllOrNothing(
          "batch norm backward " + std::to_string(C) + " channels, threads " +
              std::to_string(threads),
          [&] {
            dy = dy0;
            dx.assign(x0.size(), -7.0f);
            grads.assign(static_cast<size_t>(2 * C), 0.5f);
            dyt.data = dy.data();
            dxt.data = c.in_place ? dy.data() : dx.data();
          },
          [&] {
            return normkit_batch_norm_training_backward(ctx.ctx, &xt, &dyt, mean.data(),
                                                        rstd.data(), gamma.data(), &dxt,
                                                        grads.data(), grads.data() + C);
          },
          [&] {
            Bytes b;
            Append(b, dy);
            Append(b, dx);
            Append(b, grads);
            return b;
          });
    }
  }
}

// Every op of the shift-sum family on each geometry, both layouts, with x, y and xs
// stored as `dtype` (the float vectors hold them; a half tensor uses the first half of
// their bytes) and the mask float32.
void ExpectShiftSumFamilyAllOrNothing(const std::vector<Geometry>& shapes,
                                      std::initializer_list<int> thread_counts, int32_t dtype) {
  for (int threads : thread_counts) {
    Context ctx(threads);
    for (const Geometry& g : shapes) {
      for (bool cl : {false, true}) {
        const std::string name = std::string(dtype == NORMKIT_DTYPE_FLOAT32 ? "" : "bfloat16 ") +
                                 "B=" + std::to_string(g.B) + " C=" + std::to_string(g.C) +
                                 " W=" + std::to_string(g.W) + " S=" + std::to_string(g.S) +
                                 (g.along_h ? " along H" : "") + " mask " +
                                 std::to_string(g.mask_kind) + (cl ? " NHWC" : " NCHW") +
                                 " threads " + std::to_string(threads);
        const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
        const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
        const int64_t ns = g.B * g.C * g.Hout() * g.Wout();
        const std::vector<float> x0 = RandomVector(nx, 11), y0 = RandomVector(ny, 12);
        const std::vector<float> xs0 = RandomVector(ns, 13);
        std::vector<float> mask = RandomVector(std::max<int64_t>(g.MaskElems(), 1), 14, 0.0f, 1.0f);
        for (size_t i = 0; i < mask.size(); i += 7) mask[i] = 0.0f;
        const normkit_shift_sum_params params = ParamsFor(g, mask.data());
        const std::vector<int64_t> xshape = {g.B, g.C, g.H, g.W};
        const std::vector<int64_t> yshape = {g.B, 1, g.Hout(), g.Wout()};
        const std::vector<int64_t> sshape = {g.B, g.C, g.Hout(), g.Wout()};
        std::vector<float> x, y, xs, phi;
        normkit_tensor yin =
            Desc(const_cast<float*>(y0.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
        normkit_tensor xin = Desc(const_cast<float*>(x0.data()), layout, xshape);
        normkit_tensor xsin = Desc(const_cast<float*>(xs0.data()), layout, sshape);
        normkit_tensor xt = Desc(nullptr, layout, xshape);
        normkit_tensor yt = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
        normkit_tensor xst = Desc(nullptr, layout, sshape);
        for (normkit_tensor* t : {&yin, &xin, &xsin, &xt, &yt, &xst}) t->dtype = dtype;
        const auto reset = [&] {
          x = x0;
          y.assign(y0.size(), -7.0f);
          xs.assign(xs0.size(), -7.0f);
          phi.assign(static_cast<size_t>((g.PerSample() ? g.B : 1) * g.Hout() * g.Wout()), -7.0f);
          xt.data = x.data();
          yt.data = y.data();
          xst.data = xs.data();
        };
        const auto outputs = [&] {
          Bytes b;
          Append(b, x);
          Append(b, y);
          Append(b, xs);
          Append(b, phi);
          return b;
        };
        const auto out_x = [&] {  // x-shaped outputs start from -7, not from x0
          std::fill(x.begin(), x.end(), -7.0f);
        };
        ExpectAllOrNothing(
            name + " forward", reset,
            [&] { return normkit_shift_sum(ctx.ctx, &xin, &params, &yt); }, outputs);
        ExpectAllOrNothing(
            name + " adjoint", [&] { reset(), out_x(); },
            [&] { return normkit_shift_sum_adjoint(ctx.ctx, &yin, &params, &xt); }, outputs);
        ExpectAllOrNothing(
            name + " normalizer", reset,
            [&] { return normkit_shift_sum_normalizer(ctx.ctx, &xin, &params, phi.data()); },
            outputs);
        for (int32_t mode : {NORMKIT_PINV_MOORE_PENROSE, NORMKIT_PINV_DIVIDE_BY_MASK}) {
          ExpectAllOrNothing(
              name + " pinv " + std::to_string(mode), [&] { reset(), out_x(); },
              [&] { return normkit_shift_sum_pinv(ctx.ctx, &yin, &params, mode, nullptr, &xt); },
              outputs);
        }
        ExpectAllOrNothing(
            name + " GAP step", reset,
            [&] {
              return normkit_shift_sum_gap_step(ctx.ctx, &xt, &yin, &params, 0.7, 0.25, nullptr);
            },
            outputs);
        ExpectAllOrNothing(
            name + " shift", reset, [&] { return normkit_shift(ctx.ctx, &xin, &params, &xst); },
            outputs);
        ExpectAllOrNothing(
            name + " unshift", [&] { reset(), out_x(); },
            [&] { return normkit_unshift(ctx.ctx, &xsin, &params, &xt); }, outputs);
      }
    }
  }
}

// The shift-sum family on shapes that take each of its paths (channels-first tiles,
// channels-last skewed rows, phases, planes in registers, plane slices, along H), on
// tensors large enough to split over two threads.
TEST(OutOfMemory, ShiftSumFamilyWritesAllOrNothing) {
  ExpectShiftSumFamilyAllOrNothing(
      {{2, 28, 64, 256, 2, false, NORMKIT_MASK_HW, 0.5},       // skewed rows / planes in registers
       {2, 80, 16, 256, -2, false, NORMKIT_MASK_NONE, 1.0},    // phases
       {2, 80, 16, 256, 3, false, NORMKIT_MASK_CHW, 1.0},      // plane slices
       {2, 28, 160, 64, 1, false, NORMKIT_MASK_PHI_CHW, 1.0},  // Phi mask
       {2, 12, 128, 96, 2, true, NORMKIT_MASK_HW, 1.0}},       // along H
      {1, 2}, NORMKIT_DTYPE_FLOAT32);
}

// bfloat16 tensors: chunks of samples widened into a float scratch. Three samples of
// 2.8 MB of float run as two chunks, the second allocating nothing (a failure there
// would come after the first chunk's outputs were written).
TEST(OutOfMemory, HalfShiftSumFamilyWritesAllOrNothing) {
  ExpectShiftSumFamilyAllOrNothing({{3, 28, 96, 256, 2, false, NORMKIT_MASK_HW, 1.0},
                                    {2, 12, 64, 96, 2, true, NORMKIT_MASK_BCHW, 1.0}},
                                   {2}, NORMKIT_DTYPE_BFLOAT16);
}

}  // namespace
}  // namespace normkit_test
