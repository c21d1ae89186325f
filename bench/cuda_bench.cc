// SPDX-License-Identifier: Apache-2.0
// GPU benchmark of the CUDA path on the seed shapes: each op is timed with CUDA events,
// interleaved with a device-to-device cudaMemcpy that moves the same bytes (half read,
// half written), medians of several rounds; the table gives GB/s and the ratio
// memcpy time / op time. Every GPU result is first compared with normkit's CPU result
// on the same input (a fast wrong answer is reported as FAIL).
//
//   ./build/bench/normkit_cuda_bench           # every shape
//   ./build/bench/normkit_cuda_bench --quick   # small shapes, a few rounds
//   ./build/bench/normkit_cuda_bench --norms   # the normalizations only
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "normkit/normkit.h"
#include "tensor_desc.h"

namespace {

using normkit_testing::Desc;
using normkit_testing::Numel;

int g_failures = 0;
int g_rounds = 20;

#define CUDA_OK(expr)                                                         \
  do {                                                                        \
    const cudaError_t e_ = (expr);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    CUDA_OK(cudaMalloc(&ptr, bytes ? bytes : 1));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
  size_t bytes;
};

template <class T>
void Upload(const DeviceBuffer& d, const std::vector<T>& h) {
  CUDA_OK(cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <class T>
std::vector<T> Download(const DeviceBuffer& d, size_t n) {
  std::vector<T> h(n);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h.data(), d.ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

std::vector<float> Random(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& e : v) {
    s = s * 1664525u + 1013904223u;
    e = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.0f;
  }
  return v;
}

// Median seconds of `op` and of a D2D copy of bytes / 2, interleaved.
struct Timing {
  double op_s, copy_s;
};

Timing TimeAgainstCopy(const std::function<void()>& op, int64_t bytes) {
  DeviceBuffer src(bytes / 2), dst(bytes / 2);
  CUDA_OK(cudaMemset(src.ptr, 0, src.bytes));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  const auto time = [&](const std::function<void()>& f) {
    CUDA_OK(cudaEventRecord(a));
    for (int i = 0; i < 5; ++i) f();
    CUDA_OK(cudaEventRecord(b));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    return ms * 1e-3 / 5;
  };
  const auto copy = [&] {
    CUDA_OK(cudaMemcpyAsync(dst.ptr, src.ptr, src.bytes, cudaMemcpyDeviceToDevice));
  };
  op();
  copy();  // warm up
  std::vector<double> ops, copies;
  for (int r = 0; r < g_rounds; ++r) {
    ops.push_back(time(op));
    copies.push_back(time(copy));
  }
  std::sort(ops.begin(), ops.end());
  std::sort(copies.begin(), copies.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return {ops[ops.size() / 2], copies[copies.size() / 2]};
}

template <class T>
bool Agree(const std::vector<T>& gpu, const std::vector<T>& cpu, double rel) {
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double c = cpu[i], g = gpu[i];
    if (!(std::fabs(g - c) <= rel * std::max(std::fabs(c), 1.0))) {
      std::printf("  MISMATCH at %zu: gpu %.9g cpu %.9g\n", i, g, c);
      return false;
    }
  }
  return true;
}

std::string ShapeName(const std::vector<int64_t>& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

void Row(const char* op, const std::string& shape, const char* layout, const Timing& t,
         int64_t bytes, bool ok) {
  std::printf("| %-26s | %-18s | %-4s | %8.3f | %7.0f | %7.0f | %5.2f | %-4s |\n", op,
              shape.c_str(), layout, t.op_s * 1e3, bytes / t.op_s / 1e9, bytes / t.copy_s / 1e9,
              t.copy_s / t.op_s, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

normkit_tensor OnDevice(normkit_tensor t, void* p) {
  t.device = NORMKIT_DEVICE_CUDA;
  t.data = p;
  return t;
}

const char* LayoutName(normkit_layout l) {
  return l == NORMKIT_LAYOUT_CHANNELS_LAST ? "NHWC" : "NCHW";
}

int64_t ElemBytes(int32_t dtype) {
  return dtype == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
}

const char* DtypeSuffix(int32_t dtype) {
  return dtype == NORMKIT_DTYPE_FLOAT32 ? "" : dtype == NORMKIT_DTYPE_BFLOAT16 ? " bf16" : " f16";
}

// Bytes of `dtype` holding the floats, or the top 16 bits of each (bfloat16; float16 with
// the top exponent bit cleared, so finite).
std::vector<uint8_t> StoredBytes(const std::vector<float>& values, int32_t dtype) {
  const int64_t elem = ElemBytes(dtype);
  std::vector<uint8_t> x(values.size() * elem);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &values[i], 4);
    if (elem == 2) {
      const auto h =
          static_cast<uint16_t>(dtype == NORMKIT_DTYPE_BFLOAT16 ? u >> 16 : (u >> 16) & 0xbfff);
      std::memcpy(&x[2 * i], &h, 2);
    } else {
      std::memcpy(&x[4 * i], &u, 4);
    }
  }
  return x;
}

// The values of stored bytes (finite half values, as the benchmark makes them).
std::vector<float> WidenedValues(const std::vector<uint8_t>& bytes, int32_t dtype) {
  const int64_t elem = ElemBytes(dtype);
  std::vector<float> v(bytes.size() / elem);
  for (size_t i = 0; i < v.size(); ++i) {
    if (elem == 4) {
      std::memcpy(&v[i], &bytes[4 * i], 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    if (dtype == NORMKIT_DTYPE_BFLOAT16) {
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      std::memcpy(&v[i], &u, 4);
    } else {
      const int e = (h >> 10) & 31, m = h & 1023;
      const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
      v[i] = static_cast<float>((h & 0x8000) ? -mag : mag);
    }
  }
  return v;
}

// Half results agree when within two units of the format's last place at max(|cpu|, 1)
// (the GPU and CPU sum in different orders, so a rounding may fall either way).
bool StoredAgree(const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& cpu, int32_t dtype,
                 double float_rel) {
  const double rel = dtype == NORMKIT_DTYPE_FLOAT32    ? float_rel
                     : dtype == NORMKIT_DTYPE_BFLOAT16 ? 2 * 0x1p-7
                                                       : 2 * 0x1p-10;
  return Agree(WidenedValues(gpu, dtype), WidenedValues(cpu, dtype), rel);
}

// Affine and batch norm with x and y in `dtype` (float32, or bfloat16 / float16: half the
// bytes), checked bitwise against the CPU path and timed against a copy of the op's own
// bytes.
void BenchAffine(const std::vector<int64_t>& shape, normkit_layout layout, int32_t dtype) {
  const int64_t n = Numel(shape), C = shape[1];
  const int64_t elem = ElemBytes(dtype), bytes = 2 * n * elem;
  const std::vector<float> values = Random(n, 1), scale = Random(C, 2), shift = Random(C, 3),
                           var = Random(C, 4, 0.1f, 2.0f);
  const std::vector<uint8_t> x = StoredBytes(values, dtype);
  DeviceBuffer dx(n * elem), dy(n * elem), ds(C * 4), dh(C * 4), dv(C * 4);
  Upload(dx, x), Upload(ds, scale), Upload(dh, shift), Upload(dv, var);
  normkit_tensor xc = Desc(const_cast<uint8_t*>(x.data()), layout, shape);
  xc.dtype = dtype;
  normkit_tensor xt = OnDevice(xc, dx.ptr), yt = OnDevice(xc, dy.ptr);
  std::vector<uint8_t> cpu(n * elem);
  normkit_tensor yc = xc;
  yc.data = cpu.data();
  const std::string suffix = DtypeSuffix(dtype);
  normkit_affine(nullptr, &xc, scale.data(), shift.data(), NORMKIT_PARAMS_PER_CHANNEL, &yc);
  const auto affine = [&] {
    normkit_affine(nullptr, &xt, ds.as<float>(), dh.as<float>(), NORMKIT_PARAMS_PER_CHANNEL, &yt);
  };
  affine();
  bool ok = Download<uint8_t>(dy, n * elem) == cpu;
  Row(("affine" + suffix).c_str(), ShapeName(shape), LayoutName(layout),
      TimeAgainstCopy(affine, bytes), bytes, ok);
  normkit_batch_norm_inference(nullptr, &xc, nullptr, nullptr, shift.data(), var.data(), 1e-5f,
                               &yc);
  const auto bn = [&] {
    normkit_batch_norm_inference(nullptr, &xt, nullptr, nullptr, dh.as<float>(), dv.as<float>(),
                                 1e-5f, &yt);
  };
  bn();
  ok = Download<uint8_t>(dy, n * elem) == cpu;
  Row(("batch_norm_inference" + suffix).c_str(), ShapeName(shape), LayoutName(layout),
      TimeAgainstCopy(bn, bytes), bytes, ok);
}

// Group norm (groups > 0), or layer norm (groups = 0; RMS norm with activation < 0), x
// and y in `dtype`.
void BenchGroupNorm(const char* name, const std::vector<int64_t>& shape, int64_t groups,
                    normkit_layout layout, int32_t activation,
                    int32_t dtype = NORMKIT_DTYPE_FLOAT32) {
  const int64_t n = Numel(shape), C = shape[1], elem = ElemBytes(dtype), bytes = 2 * n * elem;
  const std::vector<uint8_t> x = StoredBytes(Random(n, 5), dtype);
  const std::vector<float> gamma = Random(C, 6), beta = Random(C, 7);
  DeviceBuffer dx(n * elem), dy(n * elem), dg(C * 4), db(C * 4);
  Upload(dx, x), Upload(dg, gamma), Upload(db, beta);
  normkit_tensor xc = Desc(const_cast<uint8_t*>(x.data()), layout, shape);
  xc.dtype = dtype;
  normkit_tensor xt = OnDevice(xc, dx.ptr), yt = OnDevice(xc, dy.ptr);
  std::vector<uint8_t> cpu(n * elem);
  normkit_tensor yc = xc;
  yc.data = cpu.data();
  const bool rows = groups == 0;
  const auto run = [&](const normkit_tensor* in, const normkit_tensor* out, const float* g,
                       const float* b) {
    if (rows) {
      if (activation < 0) return normkit_rms_norm(nullptr, in, g, 1e-5f, out, nullptr);
      return normkit_layer_norm(nullptr, in, g, b, 1e-5f, out, nullptr, nullptr);
    }
    return normkit_group_norm(nullptr, in, groups, g, b, 1e-5f, activation, out, nullptr, nullptr);
  };
  run(&xc, &yc, gamma.data(), beta.data());
  const auto op = [&] { run(&xt, &yt, dg.as<float>(), db.as<float>()); };
  const normkit_status st = run(&xt, &yt, dg.as<float>(), db.as<float>());
  const bool ok =
      st == NORMKIT_SUCCESS && StoredAgree(Download<uint8_t>(dy, n * elem), cpu, dtype, 2e-5);
  if (st != NORMKIT_SUCCESS) std::printf("  %s\n", normkit_last_error());
  Row((name + std::string(DtypeSuffix(dtype))).c_str(), ShapeName(shape), LayoutName(layout),
      TimeAgainstCopy(op, bytes), bytes, ok);
}

// The shift-sum family along W, channels-first, x and y in `dtype` (Phi_s and the mask
// float32).
void BenchShiftSum(int64_t B, int64_t C, int64_t H, int64_t W, int64_t S,
                   int32_t dtype = NORMKIT_DTYPE_FLOAT32) {
  const int64_t Wo = W + (C - 1) * std::abs(S);
  const int64_t nx = B * C * H * W, ny = B * H * Wo, elem = ElemBytes(dtype);
  const std::vector<int64_t> xs = {B, C, H, W}, ys = {B, 1, H, Wo};
  const std::string shape = ShapeName(xs) + " S=" + std::to_string(S);
  const std::string suffix = DtypeSuffix(dtype);
  const std::vector<uint8_t> x = StoredBytes(Random(nx, 8), dtype),
                             y = StoredBytes(Random(ny, 9), dtype);
  const std::vector<float> mask = Random(H * W, 10, 0, 1);
  DeviceBuffer dx(nx * elem), dy(ny * elem), dm(H * W * 4), dout(nx * elem), dphi(H * Wo * 4);
  Upload(dx, x), Upload(dy, y), Upload(dm, mask);
  normkit_shift_sum_params hp, dp;
  normkit_shift_sum_params_init(&hp, S);
  hp.mask_kind = NORMKIT_MASK_HW;
  hp.mask = mask.data();
  dp = hp;
  dp.mask = dm.ptr;
  const auto cf = NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor xc = Desc(const_cast<uint8_t*>(x.data()), cf, xs);
  normkit_tensor yc = Desc(const_cast<uint8_t*>(y.data()), cf, ys);
  xc.dtype = yc.dtype = dtype;
  normkit_tensor xt = OnDevice(xc, dx.ptr), yt = OnDevice(yc, dy.ptr);
  normkit_tensor ot = OnDevice(xc, dout.ptr), oyt = OnDevice(yc, dout.ptr);
  const int64_t bytes = (nx + ny) * elem;
  const auto host_out = [&](std::vector<uint8_t>* buf, const std::vector<int64_t>& s) {
    normkit_tensor t = Desc(buf->data(), cf, s);
    t.dtype = dtype;
    return t;
  };
  {
    std::vector<uint8_t> cpu(ny * elem);
    normkit_tensor oc = host_out(&cpu, ys);
    normkit_shift_sum(nullptr, &xc, &hp, &oc);
    const auto op = [&] { normkit_shift_sum(nullptr, &xt, &dp, &oyt); };
    op();
    Row(("shift_sum (A)" + suffix).c_str(), shape, "NCHW", TimeAgainstCopy(op, bytes), bytes,
        StoredAgree(Download<uint8_t>(dout, ny * elem), cpu, dtype, 2e-5));
  }
  {
    std::vector<uint8_t> cpu(nx * elem);
    normkit_tensor oc = host_out(&cpu, xs);
    normkit_shift_sum_adjoint(nullptr, &yc, &hp, &oc);
    const auto op = [&] { normkit_shift_sum_adjoint(nullptr, &yt, &dp, &ot); };
    op();
    Row(("shift_sum_adjoint (A^T)" + suffix).c_str(), shape, "NCHW", TimeAgainstCopy(op, bytes),
        bytes, StoredAgree(Download<uint8_t>(dout, nx * elem), cpu, dtype, 2e-5));
    normkit_shift_sum_normalizer(nullptr, &xt, &dp, dphi.ptr);
    normkit_shift_sum_pinv(nullptr, &yc, &hp, NORMKIT_PINV_MOORE_PENROSE, nullptr, &oc);
    const auto pinv = [&] {
      normkit_shift_sum_pinv(nullptr, &yt, &dp, NORMKIT_PINV_MOORE_PENROSE, dphi.ptr, &ot);
    };
    pinv();
    Row(("shift_sum_pinv" + suffix).c_str(), shape, "NCHW", TimeAgainstCopy(pinv, bytes), bytes,
        StoredAgree(Download<uint8_t>(dout, nx * elem), cpu, dtype, 2e-5));
  }
  {
    std::vector<uint8_t> cpu = x;
    normkit_tensor cc = host_out(&cpu, xs);
    normkit_shift_sum_gap_step(nullptr, &cc, &yc, &hp, 0.5, 0.1, nullptr);
    CUDA_OK(cudaMemcpy(dout.ptr, dx.ptr, nx * elem, cudaMemcpyDeviceToDevice));
    normkit_shift_sum_gap_step(nullptr, &ot, &yt, &dp, 0.5, 0.1, dphi.ptr);
    const bool ok = StoredAgree(Download<uint8_t>(dout, nx * elem), cpu, dtype, 2e-4);
    const auto op = [&] { normkit_shift_sum_gap_step(nullptr, &ot, &yt, &dp, 0.0, 0.1, dphi.ptr); };
    Row(("shift_sum_gap_step (x r+w)" + suffix).c_str(), shape, "NCHW",
        TimeAgainstCopy(op, 2 * nx * elem), 2 * nx * elem, ok);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, norms_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--norms") == 0) {
      norms_only = true;
    } else {
      std::fprintf(stderr, "usage: normkit_cuda_bench [--quick] [--norms]\n");
      return 2;
    }
  }
  if (normkit_cuda_device_count() == 0) {
    std::printf("normkit_cuda_bench: no usable CUDA device on this machine; nothing to time\n");
    return 0;
  }
  if (quick) g_rounds = 3;
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "normkit %s CUDA path on %s (%d SMs); ratio = same-run cudaMemcpy D2D time / op "
      "time for the same bytes\n\n",
      normkit_version_string(), prop.name, prop.multiProcessorCount);
  std::printf("| %-26s | %-18s | %-4s | %8s | %7s | %7s | %5s | %-4s |\n", "op", "shape", "lay",
              "ms", "GB/s", "copy", "ratio", "ok");
  std::printf(
      "|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(20, '-').c_str(),
      std::string(6, '-').c_str(), std::string(10, '-').c_str(), std::string(9, '-').c_str(),
      std::string(9, '-').c_str(), std::string(7, '-').c_str(), std::string(6, '-').c_str());
  const auto cf = NORMKIT_LAYOUT_CHANNELS_FIRST, cl = NORMKIT_LAYOUT_CHANNELS_LAST;
  const std::vector<std::vector<int64_t>> big =
      quick ? std::vector<std::vector<int64_t>>{{8, 256, 28, 28}}
            : std::vector<std::vector<int64_t>>{{128, 256, 28, 28}, {32, 512, 56, 56}};
  for (const auto& s : big) {
    for (auto l : {cf, cl}) {
      if (!norms_only) {
        for (int32_t dtype :
             {NORMKIT_DTYPE_FLOAT32, NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16}) {
          BenchAffine(s, l, dtype);
        }
      }
      BenchGroupNorm("group_norm G=32", s, 32, l, NORMKIT_ACTIVATION_NONE);
      BenchGroupNorm("group_norm G=32 + SiLU", s, 32, l, NORMKIT_ACTIVATION_SILU);
    }
  }
  for (const auto& s : std::vector<std::vector<int64_t>>{{1, 64, 56, 56}, {1, 256, 14, 14}}) {
    for (auto l : {cf, cl}) BenchGroupNorm("group_norm G=32 (N=1)", s, 32, l, 0);
  }
  for (auto l : {cf, cl}) BenchGroupNorm("group_norm G=8 (N=1)", {1, 32, 112, 112}, 8, l, 0);
  // A VAE decoder's group norms at batch 1 (Stable Diffusion, 512x512 images).
  for (const auto& s : std::vector<std::vector<int64_t>>{{1, 512, 64, 64}, {1, 128, 256, 256}}) {
    for (auto l : {cf, cl}) BenchGroupNorm("group_norm G=32 (N=1)", s, 32, l, 0);
  }
  if (!quick) {
    for (auto l : {cf, cl}) BenchGroupNorm("instance_norm", {8, 64, 128, 128}, 64, l, 0);
  }
  BenchGroupNorm("layer_norm", {4096, 768}, 0, cf, 0);
  BenchGroupNorm("rms_norm", {4096, 768}, 0, cf, -1);
  // bfloat16 / float16 x and y: the ratio is to a copy of the op's own (half) bytes.
  for (int32_t dtype : {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16}) {
    for (const auto& s : big) {
      for (auto l : {cf, cl}) {
        BenchGroupNorm("group_norm G=32", s, 32, l, NORMKIT_ACTIVATION_NONE, dtype);
      }
    }
    BenchGroupNorm("group_norm G=32 + SiLU", big[0], 32, cf, NORMKIT_ACTIVATION_SILU, dtype);
    if (dtype == NORMKIT_DTYPE_BFLOAT16) {  // batch 1: the cluster plan (channels-first)
      for (auto l : {cf, cl}) {
        BenchGroupNorm("group_norm G=8 (N=1)", {1, 32, 112, 112}, 8, l, 0, dtype);
        BenchGroupNorm("group_norm G=32 (N=1)", {1, 512, 64, 64}, 32, l, 0, dtype);
        BenchGroupNorm("group_norm G=32 (N=1)", {1, 128, 256, 256}, 32, l, 0, dtype);
      }
    }
    BenchGroupNorm("layer_norm", {4096, 768}, 0, cf, 0, dtype);
    BenchGroupNorm("rms_norm", {4096, 768}, 0, cf, -1, dtype);
    if (!quick) BenchGroupNorm("layer_norm", {16384, 4096}, 0, cf, 0, dtype);
  }
  if (quick && !norms_only) {
    BenchShiftSum(2, 28, 64, 64, 2);
  } else if (!norms_only) {
    BenchShiftSum(16, 28, 256, 256, 2);
    BenchShiftSum(16, 512, 256, 256, 2);
    BenchShiftSum(1, 28, 660, 660, 2);
    BenchShiftSum(16, 31, 256, 256, 1);
  }
  if (!norms_only) {
    for (int32_t dtype : {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16}) {
      if (quick) {
        BenchShiftSum(2, 28, 64, 64, 2, dtype);
      } else {
        BenchShiftSum(16, 28, 256, 256, 2, dtype);
      }
    }
  }
  std::printf("\n%s\n", g_failures ? "SOME RESULTS DISAGREE WITH THE CPU"
                                   : "all results agree with the CPU path");
  return g_failures ? 1 : 0;
}
