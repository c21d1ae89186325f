// SPDX-License-Identifier: Apache-2.0
// The CUDA path through the C API: the golden vectors of tests/vectors/ (the files the
// CPU tests read), GPU against CPU on random shapes for every op, device-pointer checks,
// streams and run-to-run determinism. Built with the CUDA module; every test skips,
// naming why, when this machine has no usable GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda/norm_cluster_math.h"
#include "cuda/norm_math.h"
#include "half_reference.h"
#include "norm_reference.h"
#include "test_util.h"
#include "vectors.h"

namespace normkit_test {
namespace {

#define SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                      \
    if (normkit_cuda_device_count() == 0)                                                   \
      GTEST_SKIP() << "no usable CUDA device on this machine (normkit_cuda_device_count() " \
                      "== 0): the GPU tests need an NVIDIA GPU and driver";                 \
  } while (0)

// Device copy of a host vector; Download() brings it back.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

template <class T>
const T* GetOrNull(const std::unique_ptr<DeviceArray<T>>& a) {
  return a ? a->get() : nullptr;
}

template <class T>
std::unique_ptr<DeviceArray<T>> UploadOrNull(const std::vector<T>& v) {
  return v.empty() ? nullptr : std::make_unique<DeviceArray<T>>(v);
}

normkit_tensor OnDevice(normkit_tensor t, void* data) {
  t.device = NORMKIT_DEVICE_CUDA;
  t.device_index = 0;
  t.data = data;
  return t;
}

// GPU and CPU agree within `rel` of max(|cpu|, 1).
template <class T>
void ExpectAgree(const std::vector<T>& gpu, const std::vector<T>& cpu, double rel,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double c = static_cast<double>(cpu[i]), g = static_cast<double>(gpu[i]);
    const bool ok =
        std::isnan(c) ? std::isnan(g) : std::fabs(g - c) <= rel * std::max(std::fabs(c), 1.0);
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " gpu " << g << " cpu " << c;
  }
  EXPECT_EQ(bad, 0) << what;
}

// tests/vectors/ of the source tree this was built from, or $NORMKIT_VECTORS_DIR (a build
// run on another machine, as scripts/run_cuda.sh --prebuilt does).
std::string VectorPath(const char* file) {
  const char* dir = std::getenv("NORMKIT_VECTORS_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : NORMKIT_VECTORS_DIR) + "/" + file;
}

void ExpectVectorClose(const std::vector<float>& got, const std::vector<double>& want,
                       const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::fabs(want[i]))) && ++bad <= 5)
      ADD_FAILURE() << name << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

// Runs everywhere: without a GPU a CUDA call is a clear DEVICE_UNAVAILABLE, no crash.
TEST(CudaWithoutGpu, CallsReportTheReason) {
  if (normkit_cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  std::vector<float> x(24, 1.0f), y(24, -7.0f);
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3, 4});
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3, 4});
  xt.device = yt.device = NORMKIT_DEVICE_CUDA;
  EXPECT_EQ(normkit_group_norm(nullptr, &xt, 3, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_NONE,
                               &yt, nullptr, nullptr),
            NORMKIT_ERROR_DEVICE_UNAVAILABLE);
  EXPECT_NE(std::string(normkit_last_error()).find("no usable CUDA device"), std::string::npos)
      << normkit_last_error();
  EXPECT_EQ(y, std::vector<float>(24, -7.0f));
}

TEST(Cuda, GoldenVectorsGroupNorm) {
  SKIP_WITHOUT_GPU();
  for (const auto& k : ReadVectorFile(VectorPath("group_norm.txt"))) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const auto layout = static_cast<normkit_layout>(static_cast<int>(k.Scalar("layout")));
    const std::vector<float> x = k.Floats("x");
    DeviceArray<float> dx(x), dy{std::vector<float>(x.size())};
    const auto dgamma = UploadOrNull(k.FloatsOrEmpty("gamma"));
    const auto dbeta = UploadOrNull(k.FloatsOrEmpty("beta"));
    normkit_tensor xt = OnDevice(Desc(nullptr, layout, shape), dx.get());
    normkit_tensor yt = OnDevice(Desc(nullptr, layout, shape), dy.get());
    ASSERT_EQ(
        normkit_group_norm(nullptr, &xt, static_cast<int64_t>(k.Scalar("groups")),
                           GetOrNull(dgamma), GetOrNull(dbeta), static_cast<float>(k.Scalar("eps")),
                           static_cast<int32_t>(k.Scalar("activation")), &yt, nullptr, nullptr),
        NORMKIT_SUCCESS)
        << normkit_last_error();
    ExpectVectorClose(dy.Download(), k.arrays.at("y"), k.name);
  }
}

TEST(Cuda, GoldenVectorsLayerAndRmsNorm) {
  SKIP_WITHOUT_GPU();
  for (const auto& k : ReadVectorFile(VectorPath("row_norm.txt"))) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const std::vector<float> x = k.Floats("x");
    DeviceArray<float> dx(x), dy{std::vector<float>(x.size())};
    const auto dgamma = UploadOrNull(k.FloatsOrEmpty("gamma"));
    const auto dbeta = UploadOrNull(k.FloatsOrEmpty("beta"));
    normkit_tensor xt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, shape), dx.get());
    normkit_tensor yt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, shape), dy.get());
    const float eps = static_cast<float>(k.Scalar("eps"));
    const normkit_status st =
        k.op == "rms_norm" ? normkit_rms_norm(nullptr, &xt, GetOrNull(dgamma), eps, &yt, nullptr)
                           : normkit_layer_norm(nullptr, &xt, GetOrNull(dgamma), GetOrNull(dbeta),
                                                eps, &yt, nullptr, nullptr);
    ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
    ExpectVectorClose(dy.Download(), k.arrays.at("y"), k.name);
  }
}

TEST(Cuda, GoldenVectorsShiftSum) {
  SKIP_WITHOUT_GPU();
  for (const auto& k : ReadVectorFile(VectorPath("shift_sum.txt"))) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const std::vector<float> x = k.Floats("x");
    const auto dmask = UploadOrNull(k.FloatsOrEmpty("mask"));
    normkit_shift_sum_params params;
    normkit_shift_sum_params_init(&params, static_cast<int64_t>(k.Scalar("step")));
    params.axis = static_cast<int32_t>(k.Scalar("axis"));
    params.scale = k.Scalar("scale");
    params.mask_kind = static_cast<int32_t>(k.Scalar("mask_kind"));
    params.mask = GetOrNull(dmask);
    const int64_t spread = (shape[1] - 1) * std::abs(static_cast<int64_t>(k.Scalar("step")));
    const bool along_h = params.axis == NORMKIT_SHIFT_ALONG_H;
    const std::vector<int64_t> yshape = {shape[0], 1, shape[2] + (along_h ? spread : 0),
                                         shape[3] + (along_h ? 0 : spread)};
    DeviceArray<float> dx(x), dy(std::vector<float>(static_cast<size_t>(Numel(yshape))));
    normkit_tensor xt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, shape), dx.get());
    normkit_tensor yt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, yshape), dy.get());
    ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &params, &yt), NORMKIT_SUCCESS)
        << normkit_last_error();
    ExpectVectorClose(dy.Download(), k.arrays.at("y"), k.name);
  }
}

TEST(Cuda, AffineAndBatchNormMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {2, 3}, {5, 17, 13}, {2, 3, 7, 9}, {1, 1024, 7, 7}, {2, 4, 3, 5, 6}, {3, 64, 100, 30}}) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      SCOPED_TRACE("rank " + std::to_string(shape.size()) + " C=" + std::to_string(shape[1]) +
                   " layout " + std::to_string(layout));
      const int64_t n = Numel(shape), N = shape[0], C = shape[1];
      const std::vector<float> x = RandomVector(n, 1);
      const std::vector<float> scale = RandomVector(N * C, 2), shift = RandomVector(N * C, 3);
      std::vector<float> var = RandomVector(C, 4, 0.0f, 3.0f), mean = RandomVector(C, 5);
      DeviceArray<float> dx(x), dy{std::vector<float>(n)}, dscale(scale), dshift(shift),
          dmean(mean), dvar(var);
      normkit_tensor xc = Desc(const_cast<float*>(x.data()), layout, shape);
      for (int32_t kind : {NORMKIT_PARAMS_PER_CHANNEL, NORMKIT_PARAMS_PER_SAMPLE_CHANNEL}) {
        std::vector<float> cpu(n);
        normkit_tensor yc = Desc(cpu.data(), layout, shape);
        ASSERT_EQ(normkit_affine(nullptr, &xc, scale.data(), shift.data(), kind, &yc),
                  NORMKIT_SUCCESS);
        normkit_tensor xt = OnDevice(xc, dx.get()), yt = OnDevice(xc, dy.get());
        ASSERT_EQ(normkit_affine(nullptr, &xt, dscale.get(), dshift.get(), kind, &yt),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        // One fused multiply-add per element on both: identical bits.
        EXPECT_EQ(dy.Download(), cpu) << "affine kind " << kind;
      }
      std::vector<float> cpu(n);
      normkit_tensor yc = Desc(cpu.data(), layout, shape);
      ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xc, scale.data(), shift.data(), mean.data(),
                                             var.data(), 1e-5f, &yc),
                NORMKIT_SUCCESS);
      normkit_tensor xt = OnDevice(xc, dx.get()), yt = OnDevice(xc, dy.get());
      ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xt, dscale.get(), dshift.get(), dmean.get(),
                                             dvar.get(), 1e-5f, &yt),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      EXPECT_EQ(dy.Download(), cpu) << "batch norm (same fold, same fma)";
      // In place.
      DeviceArray<float> dz(x);
      normkit_tensor zt = OnDevice(xc, dz.get());
      ASSERT_EQ(
          normkit_affine(nullptr, &zt, dscale.get(), nullptr, NORMKIT_PARAMS_PER_CHANNEL, &zt),
          NORMKIT_SUCCESS);
      std::vector<float> cpu_inplace = x;
      normkit_tensor ct = Desc(cpu_inplace.data(), layout, shape);
      ASSERT_EQ(
          normkit_affine(nullptr, &ct, scale.data(), nullptr, NORMKIT_PARAMS_PER_CHANNEL, &ct),
          NORMKIT_SUCCESS);
      EXPECT_EQ(dz.Download(), cpu_inplace) << "in place";
    }
  }
}

// The storage pairs of x and y (or of x and its partner) with a half side.
const std::vector<std::pair<int32_t, int32_t>> kHalfPairs = {
    {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_BFLOAT16},
    {NORMKIT_DTYPE_FLOAT16, NORMKIT_DTYPE_FLOAT16},
    {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT32},
    {NORMKIT_DTYPE_FLOAT16, NORMKIT_DTYPE_FLOAT32},
    {NORMKIT_DTYPE_FLOAT32, NORMKIT_DTYPE_BFLOAT16},
    {NORMKIT_DTYPE_FLOAT32, NORMKIT_DTYPE_FLOAT16}};

// x's values stored as `dtype` (raw bytes), rounded to nearest even for the half formats.
std::vector<uint8_t> StoredAs(const std::vector<float>& values, int32_t dtype) {
  if (dtype == NORMKIT_DTYPE_FLOAT32) {
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  std::vector<uint8_t> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t quiet_nan = dtype == NORMKIT_DTYPE_BFLOAT16 ? 0x7fc0 : 0x7e00;
    const uint16_t h = std::isnan(values[i]) ? quiet_nan : Encode(values[i], FormatOf(dtype));
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  return bytes;
}

// The CPU's half storage is tested against float64 (half_storage_test.cc); the GPU widens,
// computes the same fused multiply-add and rounds to nearest even: the same bits in every
// pair (NaNs compared as NaN: the formats' NaN payloads may differ).
void ExpectSameStored(const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& cpu,
                      int32_t dtype, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  const size_t width = dtype == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  int bad = 0;
  for (size_t i = 0; i < gpu.size() / width; ++i) {
    uint32_t g = 0, c = 0;
    std::memcpy(&g, &gpu[i * width], width);
    std::memcpy(&c, &cpu[i * width], width);
    const bool nan = width == 4 ? std::isnan(FloatOfBits(g)) && std::isnan(FloatOfBits(c))
                                : IsNaNBits(static_cast<uint16_t>(g), FormatOf(dtype)) &&
                                      IsNaNBits(static_cast<uint16_t>(c), FormatOf(dtype));
    if (g != c && !nan && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " gpu bits 0x" << std::hex << g << " cpu 0x"
                    << c << std::dec;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// bfloat16 / float16 on either side of affine and batch norm: GPU bits == CPU bits, both
// layouts, the vector and the element paths (an odd element offset), in place, and values
// past float16's range (Inf after rounding) and NaN.
TEST(Cuda, HalfStorageAffineAndBatchNormMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {2, 3}, {5, 16, 13}, {2, 8, 7, 8}, {3, 64, 40, 30}, {2, 4, 3, 5, 6}}) {
    const int64_t n = Numel(shape), N = shape[0], C = shape[1];
    std::vector<float> values = RandomVector(n, 11, -3.0f, 3.0f);
    values[0] = 70000.0f;  // float16: Inf, stored or computed
    values[n / 2] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> scale = RandomVector(N * C, 12), shift = RandomVector(N * C, 13);
    const std::vector<float> var = RandomVector(C, 14, 0.0f, 3.0f), mean = RandomVector(C, 15);
    DeviceArray<float> dscale(scale), dshift(shift), dmean(mean), dvar(var);
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (const auto& [xd, yd] : kHalfPairs) {
        for (int offset : {0, 1}) {
          SCOPED_TRACE("rank " + std::to_string(shape.size()) + " C=" + std::to_string(C) +
                       " layout " + std::to_string(layout) + " x dtype " + std::to_string(xd) +
                       " y dtype " + std::to_string(yd) + " offset " + std::to_string(offset));
          const size_t xw = xd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2,
                       yw = yd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
          std::vector<uint8_t> x = StoredAs(values, xd);
          x.insert(x.begin(), offset * xw, 0);  // an odd element offset: the element path
          DeviceArray<uint8_t> dx(x), dy{std::vector<uint8_t>((n + offset) * yw)};
          normkit_tensor xc = Desc(x.data() + offset * xw, layout, shape);
          xc.dtype = xd;
          std::vector<uint8_t> cpu(n * yw);
          normkit_tensor yc = Desc(cpu.data(), layout, shape);
          yc.dtype = yd;
          normkit_tensor xt = OnDevice(xc, dx.get() + offset * xw);
          normkit_tensor yt = OnDevice(yc, dy.get() + offset * yw);
          for (int32_t kind : {NORMKIT_PARAMS_PER_CHANNEL, NORMKIT_PARAMS_PER_SAMPLE_CHANNEL}) {
            ASSERT_EQ(normkit_affine(nullptr, &xc, scale.data(), shift.data(), kind, &yc),
                      NORMKIT_SUCCESS)
                << normkit_last_error();
            ASSERT_EQ(normkit_affine(nullptr, &xt, dscale.get(), dshift.get(), kind, &yt),
                      NORMKIT_SUCCESS)
                << normkit_last_error();
            std::vector<uint8_t> gpu = dy.Download();
            gpu.erase(gpu.begin(), gpu.begin() + offset * yw);
            ExpectSameStored(gpu, cpu, yd, "affine kind " + std::to_string(kind));
          }
          // Parameters off 16-byte alignment: channels-last vectors load them one by one.
          ASSERT_EQ(normkit_affine(nullptr, &xc, scale.data() + 1, shift.data() + 1,
                                   NORMKIT_PARAMS_PER_CHANNEL, &yc),
                    NORMKIT_SUCCESS);
          ASSERT_EQ(normkit_affine(nullptr, &xt, dscale.get() + 1, dshift.get() + 1,
                                   NORMKIT_PARAMS_PER_CHANNEL, &yt),
                    NORMKIT_SUCCESS)
              << normkit_last_error();
          {
            std::vector<uint8_t> gpu = dy.Download();
            gpu.erase(gpu.begin(), gpu.begin() + offset * yw);
            ExpectSameStored(gpu, cpu, yd, "affine, parameters at an odd float");
          }
          ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xc, scale.data(), shift.data(),
                                                 mean.data(), var.data(), 1e-5f, &yc),
                    NORMKIT_SUCCESS);
          ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xt, dscale.get(), dshift.get(),
                                                 dmean.get(), dvar.get(), 1e-5f, &yt),
                    NORMKIT_SUCCESS)
              << normkit_last_error();
          std::vector<uint8_t> gpu = dy.Download();
          gpu.erase(gpu.begin(), gpu.begin() + offset * yw);
          ExpectSameStored(gpu, cpu, yd, "batch norm");
          if (xd != yd) continue;
          // In place: x is y.
          std::vector<uint8_t> cpu_inplace(x.begin() + offset * xw, x.end());
          normkit_tensor ct = Desc(cpu_inplace.data(), layout, shape);
          ct.dtype = xd;
          ASSERT_EQ(
              normkit_affine(nullptr, &ct, scale.data(), nullptr, NORMKIT_PARAMS_PER_CHANNEL, &ct),
              NORMKIT_SUCCESS);
          DeviceArray<uint8_t> dz(x);
          normkit_tensor zt = OnDevice(xc, dz.get() + offset * xw);
          ASSERT_EQ(
              normkit_affine(nullptr, &zt, dscale.get(), nullptr, NORMKIT_PARAMS_PER_CHANNEL, &zt),
              NORMKIT_SUCCESS)
              << normkit_last_error();
          gpu = dz.Download();
          gpu.erase(gpu.begin(), gpu.begin() + offset * xw);
          ExpectSameStored(gpu, cpu_inplace, xd, "affine in place");
        }
      }
    }
  }
}

// The values of stored bytes (dtype) as floats: exact, NaN patterns as NaN.
std::vector<float> Widened(const std::vector<uint8_t>& bytes, int32_t dtype) {
  if (dtype == NORMKIT_DTYPE_FLOAT32) {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
  std::vector<float> v(bytes.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    v[i] = static_cast<float>(Decode(h, FormatOf(dtype)));
  }
  return v;
}

// A norm's stored output against the double reference: float32 within rel of the
// element's magnitude; a half format within one unit in its last place of the reference
// rounded to it, or (where the float32 result itself may be off by float's error at the
// magnitude, a beta that cancels the normalized value) within a unit plus that error.
void ExpectStoredNear(const std::vector<uint8_t>& got, int32_t dtype, const NormReference& want,
                      double rel, const std::string& what) {
  if (dtype == NORMKIT_DTYPE_FLOAT32) {
    ExpectNormNear(Widened(got, dtype), want, what.c_str(), rel);
    return;
  }
  const HalfFormat f = FormatOf(dtype);
  ASSERT_EQ(got.size(), 2 * want.y.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.y.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, &got[2 * i], 2);
    const double w = want.y[i];
    bool ok;
    if (std::isnan(w)) {
      ok = IsNaNBits(bits, f);
    } else {
      const uint16_t ref = Encode(w, f);
      const int d = static_cast<int>(bits & 0x7FFF) - static_cast<int>(ref & 0x7FFF);
      ok = bits == ref || ((bits & 0x8000) == (ref & 0x8000) && (d == 1 || d == -1)) ||
           ((bits & 0x7FFF) <= 1 && (ref & 0x7FFF) <= 1);  // +-0, the smallest subnormal
      if (!ok && !IsNaNBits(bits, f)) {
        const double unit = std::fabs(Decode(static_cast<uint16_t>((bits & 0x7FFF) + 1), f) -
                                      Decode(bits & 0x7FFF, f));
        ok = std::fabs(Decode(bits, f) - w) <= unit + rel * want.magnitude[i];
      }
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << Decode(bits, f) << " (0x" << std::hex
                    << bits << std::dec << ") want " << w << " (magnitude " << want.magnitude[i]
                    << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

size_t WidthOf(int32_t dtype) {
  return dtype == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
}

// Group norm with bfloat16 / float16 on either side, against the double reference of x's
// stored values: every plan the half types take (flat, its unit arriving through registers
// in 4-element items or one by one, asynchronous copies or the bulk copy; fused; split),
// both layouts, x and y one element off their alignment, in place,
// SiLU, the statistics outputs, and the same bits from run to run.
// A group norm case: x's shape and the groups.
struct GroupCase {
  std::vector<int64_t> shape;
  int64_t groups;
};

TEST(Cuda, HalfStorageGroupNormMatchesReference) {
  SKIP_WITHOUT_GPU();
  // Units of 12 elements (4-element items, not whole 16-byte pieces: no bulk copy), of
  // 1568 (bulk-copied channels-first), 36864 (channels-last: asynchronous copies); few
  // large units (channels-first: the cluster plan, channels-last: the split plan).
  for (const GroupCase& k : std::vector<GroupCase>{{{2, 6, 7}, 3},
                                                   {{2, 6, 2, 3}, 3},
                                                   {{2, 64, 28, 28}, 32},
                                                   {{2, 64, 48, 48}, 4},
                                                   {{1, 32, 112, 112}, 8},
                                                   {{3, 5, 4, 3, 2}, 5},
                                                   {{1, 4, 300000}, 2}}) {
    const int64_t n = Numel(k.shape), N = k.shape[0], C = k.shape[1], S = n / (N * C);
    std::vector<float> values = RandomVector(n, 21, -2.0f, 2.0f);
    for (auto& v : values) v += 5.0f;  // a mean away from 0
    const std::vector<float> gamma = RandomVector(C, 22), beta = RandomVector(C, 23);
    DeviceArray<float> dgamma(gamma), dbeta(beta), dmean{std::vector<float>(N * k.groups)},
        drstd{std::vector<float>(N * k.groups)};
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (const auto& [xd, yd] : kHalfPairs) {
        const std::vector<uint8_t> x = StoredAs(values, xd);
        const std::vector<float> xs = Widened(x, xd);
        for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU}) {
          const NormReference want =
              ReferenceGroupNorm(xs, N, C, S, k.groups, layout == NORMKIT_LAYOUT_CHANNELS_LAST,
                                 gamma.data(), beta.data(), 1e-5, act);
          for (int offset : {0, 1}) {
            SCOPED_TRACE("C=" + std::to_string(C) + " G=" + std::to_string(k.groups) + " layout " +
                         std::to_string(layout) + " " + DtypeLabel(xd) + " -> " + DtypeLabel(yd) +
                         " act " + std::to_string(act) + " offset " + std::to_string(offset));
            const size_t xw = WidthOf(xd), yw = WidthOf(yd);
            std::vector<uint8_t> xo = x;
            xo.insert(xo.begin(), offset * xw, 0);
            DeviceArray<uint8_t> dx(xo), dy{std::vector<uint8_t>((n + offset) * yw)};
            normkit_tensor xt = OnDevice(Desc(nullptr, layout, k.shape), dx.get() + offset * xw);
            normkit_tensor yt = OnDevice(Desc(nullptr, layout, k.shape), dy.get() + offset * yw);
            xt.dtype = xd;
            yt.dtype = yd;
            ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f,
                                         act, &yt, dmean.get(), drstd.get()),
                      NORMKIT_SUCCESS)
                << normkit_last_error();
            std::vector<uint8_t> y = dy.Download();
            y.erase(y.begin(), y.begin() + offset * yw);
            ExpectStoredNear(y, yd, want, act == NORMKIT_ACTIVATION_SILU ? 2e-5 : 1e-5,
                             "group norm");
            const std::vector<float> mean = dmean.Download(), rstd = drstd.Download();
            for (int64_t u = 0; u < N * k.groups; ++u) {
              EXPECT_NEAR(mean[u], want.mean[u], 1e-6 * std::fabs(want.mean[u]));
              EXPECT_NEAR(rstd[u], want.rstd[u], 1e-5 * want.rstd[u]);
            }
            ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f,
                                         act, &yt, nullptr, nullptr),
                      NORMKIT_SUCCESS);
            std::vector<uint8_t> again = dy.Download();
            again.erase(again.begin(), again.begin() + offset * yw);
            EXPECT_EQ(again, y) << "second run differs";
            if (xd != yd || act != NORMKIT_ACTIVATION_NONE) continue;
            // In place: y is x.
            ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f,
                                         act, &xt, nullptr, nullptr),
                      NORMKIT_SUCCESS)
                << normkit_last_error();
            std::vector<uint8_t> in_place = dx.Download();
            in_place.erase(in_place.begin(), in_place.begin() + offset * xw);
            EXPECT_EQ(in_place, y) << "in place differs from out of place";
          }
        }
      }
    }
  }
}

// Layer and RMS norm rows in the half pairs: the warp-per-row plan (D = 12, 768, 2048,
// aligned), the block-per-row plans (D = 7, 4100, 50000, and 768 one element off).
TEST(Cuda, HalfStorageRowNormsMatchReference) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 37;
  for (int64_t D : {7, 12, 768, 2048, 4100, 50000}) {
    std::vector<float> values = RandomVector(rows * D, 31, -3.0f, 3.0f);
    for (auto& v : values) v += 2.0f;
    const std::vector<float> gamma = RandomVector(D, 32), beta = RandomVector(D, 33);
    DeviceArray<float> dgamma(gamma), dbeta(beta);
    for (const auto& [xd, yd] : kHalfPairs) {
      const std::vector<uint8_t> x = StoredAs(values, xd);
      const std::vector<float> xs = Widened(x, xd);
      for (bool rms : {false, true}) {
        const NormReference want =
            ReferenceRowNorm(xs, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms);
        for (int offset : {0, 1}) {
          if (offset == 1 && D != 768) continue;
          SCOPED_TRACE("D=" + std::to_string(D) + (rms ? " rms " : " layer ") + DtypeLabel(xd) +
                       " -> " + DtypeLabel(yd) + " offset " + std::to_string(offset));
          const size_t xw = WidthOf(xd), yw = WidthOf(yd);
          std::vector<uint8_t> xo = x;
          xo.insert(xo.begin(), offset * xw, 0);
          DeviceArray<uint8_t> dx(xo), dy{std::vector<uint8_t>((rows * D + offset) * yw)};
          normkit_tensor xt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}),
                                       dx.get() + offset * xw);
          normkit_tensor yt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}),
                                       dy.get() + offset * yw);
          xt.dtype = xd;
          yt.dtype = yd;
          const normkit_status st =
              rms ? normkit_rms_norm(nullptr, &xt, dgamma.get(), 1e-5f, &yt, nullptr)
                  : normkit_layer_norm(nullptr, &xt, dgamma.get(), dbeta.get(), 1e-5f, &yt, nullptr,
                                       nullptr);
          ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
          std::vector<uint8_t> y = dy.Download();
          y.erase(y.begin(), y.begin() + offset * yw);
          ExpectStoredNear(y, yd, want, 1e-5, rms ? "rms norm" : "layer norm");
        }
      }
    }
  }
}

// tests/vectors/half.txt on the GPU: every output within one unit of its format of the
// float64 result rounded to it (float32 outputs within 1e-5 of the case's largest output).
TEST(Cuda, GoldenVectorsHalf) {
  SKIP_WITHOUT_GPU();
  const auto cases = ReadVectorFile(VectorPath("half.txt"));
  ASSERT_GE(cases.size(), 15u) << "cannot read " << VectorPath("half.txt");
  const auto dtype_named = [](const std::string& field) {
    const std::string name = field.substr(field.find_first_not_of(' '));
    return name == "bfloat16"  ? NORMKIT_DTYPE_BFLOAT16
           : name == "float16" ? NORMKIT_DTYPE_FLOAT16
                               : NORMKIT_DTYPE_FLOAT32;
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const int32_t xd = dtype_named(k.scalars.at("x_dtype")),
                  yd = dtype_named(k.scalars.at("y_dtype"));
    const auto layout = static_cast<normkit_layout>(static_cast<int>(k.Scalar("layout")));
    const std::vector<float> xs = k.Floats("x");
    const std::vector<uint8_t> x = StoredAs(xs, xd);
    ASSERT_EQ(Widened(x, xd), xs) << "input not representable";
    DeviceArray<uint8_t> dx(x), dy{std::vector<uint8_t>(xs.size() * WidthOf(yd))};
    normkit_tensor xt = OnDevice(Desc(nullptr, layout, shape), dx.get());
    normkit_tensor yt = OnDevice(Desc(nullptr, layout, shape), dy.get());
    xt.dtype = xd;
    yt.dtype = yd;
    const auto param = [&](const char* name) { return UploadOrNull(k.FloatsOrEmpty(name)); };
    const auto gamma = param("gamma"), beta = param("beta"), scale = param("scale"),
               shift = param("shift"), mean = param("mean"), var = param("var");
    const float eps = k.scalars.count("eps") ? static_cast<float>(k.Scalar("eps")) : 0.0f;
    normkit_status st;
    if (k.op == "affine") {
      st = normkit_affine(nullptr, &xt, GetOrNull(scale), GetOrNull(shift),
                          NORMKIT_PARAMS_PER_CHANNEL, &yt);
    } else if (k.op == "batch_norm") {
      st = normkit_batch_norm_inference(nullptr, &xt, GetOrNull(gamma), GetOrNull(beta),
                                        GetOrNull(mean), GetOrNull(var), eps, &yt);
    } else if (k.op == "group_norm") {
      st = normkit_group_norm(nullptr, &xt, static_cast<int64_t>(k.Scalar("groups")),
                              GetOrNull(gamma), GetOrNull(beta), eps,
                              static_cast<int32_t>(k.Scalar("activation")), &yt, nullptr, nullptr);
    } else if (k.op == "layer_norm") {
      st = normkit_layer_norm(nullptr, &xt, GetOrNull(gamma), GetOrNull(beta), eps, &yt, nullptr,
                              nullptr);
    } else {
      ASSERT_EQ(k.op, "rms_norm");
      st = normkit_rms_norm(nullptr, &xt, GetOrNull(gamma), eps, &yt, nullptr);
    }
    ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
    NormReference want;
    want.y = k.arrays.at("y");
    double largest = 0;
    for (double w : want.y) largest = std::max(largest, std::fabs(w));
    want.magnitude.assign(want.y.size(), largest);
    ExpectStoredNear(dy.Download(), yd, want, 1e-5, k.name);
  }
}

TEST(Cuda, NormsMatchReference) {
  SKIP_WITHOUT_GPU();
  // The last cases have few, large groups: the split plan.
  for (const GroupCase& k :
       std::vector<GroupCase>{{{2, 6, 7}, 3},
                              {{2, 64, 28, 28}, 32},
                              {{1, 32, 112, 112}, 8},
                              {{1, 16, 64, 64}, 1},
                              // 144 KiB units: flat plan, async / bulk loads
                              {{2, 64, 48, 48}, 4},
                              // 100 KiB units of single channels (NHWC: 4-byte items)
                              {{2, 3, 160, 160}, 3},
                              {{3, 5, 4, 3, 2}, 5},
                              {{1, 4, 300000}, 2}}) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (int32_t act :
           {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_RELU, NORMKIT_ACTIVATION_SILU}) {
        SCOPED_TRACE("C=" + std::to_string(k.shape[1]) + " G=" + std::to_string(k.groups) +
                     " layout " + std::to_string(layout) + " act " + std::to_string(act));
        const int64_t n = Numel(k.shape), N = k.shape[0], C = k.shape[1], S = n / (N * C);
        std::vector<float> x = RandomVector(n, 7);
        for (auto& v : x) v = 1000.0f + 0.1f * v;  // mean 1e4 x std
        const std::vector<float> gamma = RandomVector(C, 8), beta = RandomVector(C, 9);
        DeviceArray<float> dx(x), dy{std::vector<float>(n)}, dgamma(gamma), dbeta(beta),
            dmean{std::vector<float>(N * k.groups)}, drstd{std::vector<float>(N * k.groups)};
        normkit_tensor xt = OnDevice(Desc(nullptr, layout, k.shape), dx.get());
        normkit_tensor yt = OnDevice(Desc(nullptr, layout, k.shape), dy.get());
        ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f, act,
                                     &yt, dmean.get(), drstd.get()),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        const NormReference want =
            ReferenceGroupNorm(x, N, C, S, k.groups, layout == NORMKIT_LAYOUT_CHANNELS_LAST,
                               gamma.data(), beta.data(), 1e-5, act);
        const std::vector<float> y = dy.Download();
        ExpectNormNear(y, want, "group norm", act == NORMKIT_ACTIVATION_SILU ? 2e-5 : 1e-5);
        const std::vector<float> mean = dmean.Download(), rstd = drstd.Download();
        for (int64_t u = 0; u < N * k.groups; ++u) {
          EXPECT_NEAR(mean[u], want.mean[u], 1e-6 * std::fabs(want.mean[u]));
          EXPECT_NEAR(rstd[u], want.rstd[u], 1e-5 * want.rstd[u]);
        }
        // Deterministic from run to run.
        ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f, act,
                                     &yt, nullptr, nullptr),
                  NORMKIT_SUCCESS);
        EXPECT_EQ(dy.Download(), y) << "second run differs";
      }
    }
  }
  for (int64_t D : {1, 7, 768, 50000}) {
    for (bool rms : {false, true}) {
      SCOPED_TRACE("D=" + std::to_string(D) + (rms ? " rms" : " layer"));
      const int64_t rows = 5;
      const std::vector<float> x = RandomVector(rows * D, 11);
      const std::vector<float> gamma = RandomVector(D, 12), beta = RandomVector(D, 13);
      DeviceArray<float> dx(x), dy{std::vector<float>(x.size())}, dgamma(gamma), dbeta(beta);
      normkit_tensor xt =
          OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), dx.get());
      normkit_tensor yt =
          OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), dy.get());
      const normkit_status st =
          rms ? normkit_rms_norm(nullptr, &xt, dgamma.get(), 1e-5f, &yt, nullptr)
              : normkit_layer_norm(nullptr, &xt, dgamma.get(), dbeta.get(), 1e-5f, &yt, nullptr,
                                   nullptr);
      ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
      ExpectNormNear(
          dy.Download(),
          ReferenceRowNorm(x, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms),
          "row norm");
    }
  }
}

// Layer / RMS norm rows of whole float4 items up to 2048 floats go a warp a row
// (cuda/norm_math.h): 37 rows (blocks of 8 warps, the last one partly idle), lanes with
// one item fewer (D = 132) or none (D = 12), the mean 1e4 standard deviations, some rows'
// first elements (the pivots) 500 standard deviations off, every activation the API has
// for rows (none), mean / rstd outputs, the same bits from run to run, and a gamma
// off a 16-byte boundary (another plan).
TEST(Cuda, WarpRowPlan) {
  SKIP_WITHOUT_GPU();
  for (int64_t D : {12, 132, 768, 1028, 2048}) {
    for (bool rms : {false, true}) {
      SCOPED_TRACE("D=" + std::to_string(D) + (rms ? " rms" : " layer"));
      const int64_t rows = 37;
      std::vector<float> x = RandomVector(rows * D, 21);
      if (!rms) {
        for (auto& v : x) v = 1000.0f + 0.1f * v;
      }
      for (int64_t r = 0; r < rows; r += 3) x[r * D] += 50.0f;
      const std::vector<float> gamma = RandomVector(D, 22), beta = RandomVector(D, 23);
      DeviceArray<float> dx(x), dy{std::vector<float>(x.size())}, dgamma(gamma), dbeta(beta),
          dmean{std::vector<float>(rows)}, drstd{std::vector<float>(rows)};
      normkit_tensor xt =
          OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), dx.get());
      normkit_tensor yt =
          OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), dy.get());
      const auto run = [&] {
        return rms ? normkit_rms_norm(nullptr, &xt, dgamma.get(), 1e-5f, &yt, drstd.get())
                   : normkit_layer_norm(nullptr, &xt, dgamma.get(), dbeta.get(), 1e-5f, &yt,
                                        dmean.get(), drstd.get());
      };
      ASSERT_EQ(run(), NORMKIT_SUCCESS) << normkit_last_error();
      const NormReference want =
          ReferenceRowNorm(x, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms);
      const std::vector<float> y = dy.Download();
      ExpectNormNear(y, want, "row norm", 2e-5);
      const std::vector<float> mean = dmean.Download(), rstd = drstd.Download();
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_NEAR(rstd[r], want.rstd[r], 1e-5 * want.rstd[r]);
        if (!rms) EXPECT_NEAR(mean[r], want.mean[r], 1e-6 * std::fabs(want.mean[r]));
      }
      ASSERT_EQ(run(), NORMKIT_SUCCESS);
      EXPECT_EQ(dy.Download(), y) << "second run differs";
    }
  }
  // gamma 4 bytes off 16: the other plans (the warp plan loads gamma as float4 items).
  const int64_t rows = 9, D = 768;
  const std::vector<float> x = RandomVector(rows * D, 24), gamma = RandomVector(D + 1, 25);
  DeviceArray<float> dx(x), dy{std::vector<float>(x.size())}, dgamma(gamma);
  normkit_tensor xt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), dx.get());
  normkit_tensor yt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}), dy.get());
  ASSERT_EQ(normkit_rms_norm(nullptr, &xt, dgamma.get() + 1, 1e-5f, &yt, nullptr), NORMKIT_SUCCESS);
  ExpectNormNear(dy.Download(), ReferenceRowNorm(x, rows, D, gamma.data() + 1, nullptr, 1e-5, true),
                 "rms norm, gamma misaligned");
}

template <class T>
void CheckShiftSumAgainstCpu(int64_t B, int64_t C, int64_t H, int64_t W, int64_t S, bool along_h,
                             int32_t mask_kind, normkit_layout layout) {
  SCOPED_TRACE("B=" + std::to_string(B) + " C=" + std::to_string(C) + " H=" + std::to_string(H) +
               " W=" + std::to_string(W) + " S=" + std::to_string(S) + " mask " +
               std::to_string(mask_kind) + " layout " + std::to_string(layout) +
               (sizeof(T) == 8 ? " double" : " float"));
  const double rel = sizeof(T) == 8 ? 1e-12 : 2e-5;
  const normkit_dtype dtype = sizeof(T) == 8 ? NORMKIT_DTYPE_FLOAT64 : NORMKIT_DTYPE_FLOAT32;
  const int64_t spread = (C - 1) * std::abs(S);
  const int64_t Ho = along_h ? H + spread : H, Wo = along_h ? W : W + spread;
  const bool per_sample = mask_kind == NORMKIT_MASK_BCHW || mask_kind == NORMKIT_MASK_PHI_BCHW;
  int64_t mask_elems = 0;
  switch (mask_kind) {
    case NORMKIT_MASK_HW: mask_elems = H * W; break;
    case NORMKIT_MASK_CHW: mask_elems = C * H * W; break;
    case NORMKIT_MASK_BCHW: mask_elems = B * C * H * W; break;
    case NORMKIT_MASK_PHI_CHW: mask_elems = C * Ho * Wo; break;
    case NORMKIT_MASK_PHI_BCHW: mask_elems = B * C * Ho * Wo; break;
  }
  const auto cast = [](const std::vector<float>& f) { return std::vector<T>(f.begin(), f.end()); };
  const std::vector<T> x = cast(RandomVector(B * C * H * W, 1, -1, 1));
  const std::vector<T> y = cast(RandomVector(B * Ho * Wo, 2, -1, 1));
  std::vector<T> mask = cast(RandomVector(std::max<int64_t>(mask_elems, 1), 3, 0, 1));
  for (size_t i = 0; i < mask.size(); i += 7) mask[i] = T(0);
  DeviceArray<T> dx(x), dy(y), dmask(mask);
  normkit_shift_sum_params hp, dp;
  normkit_shift_sum_params_init(&hp, S);
  hp.axis = along_h ? NORMKIT_SHIFT_ALONG_H : NORMKIT_SHIFT_ALONG_W;
  hp.scale = 0.75;
  hp.mask_kind = mask_kind;
  hp.mask = mask_kind == NORMKIT_MASK_NONE ? nullptr : mask.data();
  dp = hp;
  dp.mask = mask_kind == NORMKIT_MASK_NONE ? nullptr : dmask.get();
  const std::vector<int64_t> xs = {B, C, H, W}, ys = {B, 1, Ho, Wo}, ss = {B, C, Ho, Wo};
  const auto host = [&](const void* p, normkit_layout l, const std::vector<int64_t>& s) {
    normkit_tensor t;
    normkit_tensor_init(&t, const_cast<void*>(p), dtype, l, 4, s.data());
    return t;
  };
  const auto dev = [&](void* p, normkit_layout l, const std::vector<int64_t>& s) {
    return OnDevice(host(p, l, s), p);
  };
  const auto cf = NORMKIT_LAYOUT_CHANNELS_FIRST;

  {  // forward
    std::vector<T> cpu(y.size());
    normkit_tensor a = host(x.data(), layout, xs), b = host(cpu.data(), cf, ys);
    ASSERT_EQ(normkit_shift_sum(nullptr, &a, &hp, &b), NORMKIT_SUCCESS);
    DeviceArray<T> out{std::vector<T>(y.size())};
    normkit_tensor da = dev(dx.get(), layout, xs), db = dev(out.get(), cf, ys);
    ASSERT_EQ(normkit_shift_sum(nullptr, &da, &dp, &db), NORMKIT_SUCCESS) << normkit_last_error();
    ExpectAgree(out.Download(), cpu, rel, "forward");
  }
  {  // adjoint, both pinv modes
    for (int mode = -1; mode <= 1; ++mode) {
      std::vector<T> cpu(x.size());
      normkit_tensor a = host(y.data(), cf, ys), b = host(cpu.data(), layout, xs);
      DeviceArray<T> out{std::vector<T>(x.size())};
      normkit_tensor da = dev(dy.get(), cf, ys), db = dev(out.get(), layout, xs);
      if (mode < 0) {
        ASSERT_EQ(normkit_shift_sum_adjoint(nullptr, &a, &hp, &b), NORMKIT_SUCCESS);
        ASSERT_EQ(normkit_shift_sum_adjoint(nullptr, &da, &dp, &db), NORMKIT_SUCCESS)
            << normkit_last_error();
      } else {
        ASSERT_EQ(normkit_shift_sum_pinv(nullptr, &a, &hp, mode, nullptr, &b), NORMKIT_SUCCESS);
        ASSERT_EQ(normkit_shift_sum_pinv(nullptr, &da, &dp, mode, nullptr, &db), NORMKIT_SUCCESS)
            << normkit_last_error();
      }
      ExpectAgree(out.Download(), cpu, rel, mode < 0 ? "adjoint" : "pinv");
    }
  }
  {  // normalizer, then GAP with it
    const size_t np = static_cast<size_t>((per_sample ? B : 1) * Ho * Wo);
    std::vector<T> cpu(np);
    DeviceArray<T> out{std::vector<T>(np)};
    normkit_tensor a = host(x.data(), layout, xs);
    normkit_tensor da = dev(dx.get(), layout, xs);
    ASSERT_EQ(normkit_shift_sum_normalizer(nullptr, &a, &hp, cpu.data()), NORMKIT_SUCCESS);
    ASSERT_EQ(normkit_shift_sum_normalizer(nullptr, &da, &dp, out.get()), NORMKIT_SUCCESS)
        << normkit_last_error();
    ExpectAgree(out.Download(), cpu, rel, "normalizer");
    {  // the Moore-Penrose pseudo-inverse with that normalizer given
      std::vector<T> xc(x.size());
      DeviceArray<T> xg{std::vector<T>(x.size())};
      normkit_tensor a2 = host(y.data(), cf, ys), b2 = host(xc.data(), layout, xs);
      normkit_tensor da2 = dev(dy.get(), cf, ys), db2 = dev(xg.get(), layout, xs);
      ASSERT_EQ(
          normkit_shift_sum_pinv(nullptr, &a2, &hp, NORMKIT_PINV_MOORE_PENROSE, cpu.data(), &b2),
          NORMKIT_SUCCESS);
      ASSERT_EQ(
          normkit_shift_sum_pinv(nullptr, &da2, &dp, NORMKIT_PINV_MOORE_PENROSE, out.get(), &db2),
          NORMKIT_SUCCESS)
          << normkit_last_error();
      ExpectAgree(xg.Download(), xc, rel, "pinv with a normalizer");
    }
    for (bool given : {false, true}) {
      std::vector<T> xc = x;
      DeviceArray<T> xg(x);
      normkit_tensor c = host(xc.data(), layout, xs), dc = dev(xg.get(), layout, xs);
      normkit_tensor b = host(y.data(), cf, ys), db = dev(dy.get(), cf, ys);
      ASSERT_EQ(
          normkit_shift_sum_gap_step(nullptr, &c, &b, &hp, 0.7, 0.25, given ? cpu.data() : nullptr),
          NORMKIT_SUCCESS);
      ASSERT_EQ(normkit_shift_sum_gap_step(nullptr, &dc, &db, &dp, 0.7, 0.25,
                                           given ? out.get() : nullptr),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      ExpectAgree(xg.Download(), xc, rel * C, "gap step");
    }
  }
  {  // shift / unshift: exact
    std::vector<T> cpu(static_cast<size_t>(B * C * Ho * Wo));
    normkit_tensor a = host(x.data(), layout, xs), b = host(cpu.data(), layout, ss);
    ASSERT_EQ(normkit_shift(nullptr, &a, &hp, &b), NORMKIT_SUCCESS);
    DeviceArray<T> stack(std::vector<T>(cpu.size(), T(-9))), back{std::vector<T>(x.size())};
    normkit_tensor da = dev(dx.get(), layout, xs), db = dev(stack.get(), layout, ss),
                   dc = dev(back.get(), layout, xs);
    ASSERT_EQ(normkit_shift(nullptr, &da, &dp, &db), NORMKIT_SUCCESS) << normkit_last_error();
    EXPECT_EQ(stack.Download(), cpu) << "shift";
    ASSERT_EQ(normkit_unshift(nullptr, &db, &dp, &dc), NORMKIT_SUCCESS) << normkit_last_error();
    EXPECT_EQ(back.Download(), x) << "unshift";
  }
}

TEST(Cuda, ShiftSumFamilyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (int32_t kind = NORMKIT_MASK_NONE; kind <= NORMKIT_MASK_PHI_BCHW; ++kind) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      CheckShiftSumAgainstCpu<float>(2, 3, 5, 19, 2, false, kind, layout);
      CheckShiftSumAgainstCpu<double>(2, 4, 1, 33, -3, false, kind, layout);
      CheckShiftSumAgainstCpu<float>(1, 5, 6, 17, -1, true, kind, layout);
      CheckShiftSumAgainstCpu<float>(2, 28, 64, 64, 2, false, kind, layout);
      // A spread wider than W; double runs of 4.
      CheckShiftSumAgainstCpu<float>(2, 12, 3, 8, 3, false, kind, layout);
      CheckShiftSumAgainstCpu<double>(1, 6, 9, 16, 1, false, kind, layout);
    }
  }
}

// The shift-sum family with a bfloat16 / float16 side on the GPU: bitwise the float32 GPU
// call on the widened values, rounded to nearest even (NaN as NaN), for every operator
// and storage pair, the row walks that read and write half as stored (channels-first
// along W) and the widened chunks (the other layouts and axes); a batch the chunked path
// takes in several chunks of samples (per-sample masks offset per chunk, a shorter last
// chunk); Phi_s given and computed.
struct ShiftHalfCase {
  int64_t B, C, H, W, S;
  bool along_h;
  int32_t mask_kind;
  normkit_layout layout;
};

void CheckHalfShiftSum(const ShiftHalfCase& k, int32_t xd, int32_t pd) {
  SCOPED_TRACE("B=" + std::to_string(k.B) + " C=" + std::to_string(k.C) +
               " H=" + std::to_string(k.H) + " W=" + std::to_string(k.W) +
               " S=" + std::to_string(k.S) + " mask " + std::to_string(k.mask_kind) + " layout " +
               std::to_string(k.layout) + " x " + DtypeLabel(xd) + " y/xs " + DtypeLabel(pd));
  const int64_t spread = (k.C - 1) * std::abs(k.S);
  const int64_t Ho = k.along_h ? k.H + spread : k.H, Wo = k.along_h ? k.W : k.W + spread;
  const int64_t nx = k.B * k.C * k.H * k.W, ny = k.B * Ho * Wo, ns = k.B * k.C * Ho * Wo;
  int64_t mask_elems = 1;
  switch (k.mask_kind) {
    case NORMKIT_MASK_HW: mask_elems = k.H * k.W; break;
    case NORMKIT_MASK_CHW: mask_elems = k.C * k.H * k.W; break;
    case NORMKIT_MASK_BCHW: mask_elems = nx; break;
    case NORMKIT_MASK_PHI_BCHW: mask_elems = ns; break;
  }
  std::vector<float> mask = RandomVector(mask_elems, 43, 0, 1);
  for (size_t i = 0; i < mask.size(); i += 7) mask[i] = 0.0f;
  DeviceArray<float> dmask(mask);
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, k.S);
  params.axis = k.along_h ? NORMKIT_SHIFT_ALONG_H : NORMKIT_SHIFT_ALONG_W;
  params.scale = 0.75;
  params.mask_kind = k.mask_kind;
  params.mask = k.mask_kind == NORMKIT_MASK_NONE ? nullptr : dmask.get();
  const std::vector<int64_t> xs = {k.B, k.C, k.H, k.W}, ys = {k.B, 1, Ho, Wo},
                             ss = {k.B, k.C, Ho, Wo};
  const auto cf = NORMKIT_LAYOUT_CHANNELS_FIRST;
  const auto dev = [&](void* p, int32_t dtype, normkit_layout l, const std::vector<int64_t>& s) {
    normkit_tensor t;
    normkit_tensor_init(&t, p, static_cast<normkit_dtype>(dtype), l, 4, s.data());
    return OnDevice(t, p);
  };
  // Phi_s for the calls that are given one (float32 whatever x's dtype).
  const bool per_sample = k.mask_kind == NORMKIT_MASK_BCHW || k.mask_kind == NORMKIT_MASK_PHI_BCHW;
  DeviceArray<float> phi{std::vector<float>((per_sample ? k.B : 1) * Ho * Wo)};
  {
    DeviceArray<float> any_x{std::vector<float>(1)};
    normkit_tensor t = dev(any_x.get(), NORMKIT_DTYPE_FLOAT32, k.layout, xs);
    ASSERT_EQ(normkit_shift_sum_normalizer(nullptr, &t, &params, phi.get()), NORMKIT_SUCCESS)
        << normkit_last_error();
  }
  const std::vector<float> x_values = RandomVector(nx, 41, -1, 1);
  const std::vector<float> y_values = RandomVector(ny, 42, -1, 1);
  const std::vector<float> s_values = RandomVector(ns, 44, -1, 1);
  enum Op { kForward, kAdjoint, kPinv, kPinvGiven, kDivide, kGap, kGapGiven, kShift, kUnshift };
  for (int op = kForward; op <= kUnshift; ++op) {
    SCOPED_TRACE("operator " + std::to_string(op));
    // What the operator reads (`in`, of dtype in_d) and writes (`out`, out_d; the GAP step
    // also reads x).
    const bool reads_x = op == kForward || op == kShift;
    const int32_t in_d = reads_x ? xd : pd;
    const int32_t out_d = op == kForward || op == kShift ? pd : xd;
    const std::vector<float>& in_values = reads_x ? x_values : op == kUnshift ? s_values : y_values;
    const std::vector<int64_t>& in_shape = reads_x ? xs : op == kUnshift ? ss : ys;
    const std::vector<int64_t>& out_shape = op == kForward ? ys : op == kShift ? ss : xs;
    const normkit_layout in_layout = in_shape == ys ? cf : k.layout;
    const normkit_layout out_layout = out_shape == ys ? cf : k.layout;
    const int64_t n_out = Numel(out_shape);
    const std::vector<uint8_t> in_bytes = StoredAs(in_values, in_d);
    const std::vector<uint8_t> out_start =
        StoredAs(op == kGap || op == kGapGiven ? x_values : std::vector<float>(n_out), out_d);
    const auto run = [&](const std::vector<uint8_t>& in, int32_t in_dtype,
                         const std::vector<uint8_t>& out, int32_t out_dtype) {
      DeviceArray<uint8_t> din(in), dout(out);
      normkit_tensor a = dev(din.get(), in_dtype, in_layout, in_shape);
      normkit_tensor b = dev(dout.get(), out_dtype, out_layout, out_shape);
      normkit_status st = NORMKIT_SUCCESS;
      switch (op) {
        case kForward: st = normkit_shift_sum(nullptr, &a, &params, &b); break;
        case kAdjoint: st = normkit_shift_sum_adjoint(nullptr, &a, &params, &b); break;
        case kPinv:
        case kPinvGiven:
          st = normkit_shift_sum_pinv(nullptr, &a, &params, NORMKIT_PINV_MOORE_PENROSE,
                                      op == kPinvGiven ? phi.get() : nullptr, &b);
          break;
        case kDivide:
          st = normkit_shift_sum_pinv(nullptr, &a, &params, NORMKIT_PINV_DIVIDE_BY_MASK, nullptr,
                                      &b);
          break;
        case kGap:
        case kGapGiven:
          st = normkit_shift_sum_gap_step(nullptr, &b, &a, &params, 0.7, 0.25,
                                          op == kGapGiven ? phi.get() : nullptr);
          break;
        case kShift: st = normkit_shift(nullptr, &a, &params, &b); break;
        case kUnshift: st = normkit_unshift(nullptr, &a, &params, &b); break;
      }
      EXPECT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
      return dout.Download();
    };
    const std::vector<uint8_t> half = run(in_bytes, in_d, out_start, out_d);
    const std::vector<uint8_t> wide =
        run(StoredAs(Widened(in_bytes, in_d), NORMKIT_DTYPE_FLOAT32), NORMKIT_DTYPE_FLOAT32,
            StoredAs(Widened(out_start, out_d), NORMKIT_DTYPE_FLOAT32), NORMKIT_DTYPE_FLOAT32);
    ExpectSameStored(half, StoredAs(Widened(wide, NORMKIT_DTYPE_FLOAT32), out_d), out_d,
                     "the float32 call rounded");
  }
}

TEST(Cuda, HalfStorageShiftSumIsTheFloatCallRounded) {
  SKIP_WITHOUT_GPU();
  for (const auto& [xd, pd] : kHalfPairs) {
    CheckHalfShiftSum({2, 5, 6, 17, 2, false, NORMKIT_MASK_CHW, NORMKIT_LAYOUT_CHANNELS_FIRST}, xd,
                      pd);
    CheckHalfShiftSum({3, 4, 9, 8, -1, true, NORMKIT_MASK_BCHW, NORMKIT_LAYOUT_CHANNELS_LAST}, xd,
                      pd);
    CheckHalfShiftSum({2, 3, 7, 5, 1, false, NORMKIT_MASK_NONE, NORMKIT_LAYOUT_CHANNELS_LAST}, xd,
                      pd);
    // Rows of whole 16-byte pieces: the forward and the GAP residual from x rows copied
    // into shared memory (Hopper), with an HW mask and without.
    CheckHalfShiftSum({2, 4, 5, 16, 1, false, NORMKIT_MASK_HW, NORMKIT_LAYOUT_CHANNELS_FIRST}, xd,
                      pd);
    CheckHalfShiftSum({2, 3, 4, 24, -2, false, NORMKIT_MASK_NONE, NORMKIT_LAYOUT_CHANNELS_FIRST},
                      xd, pd);
  }
  // 8 MB float samples: chunks of 2, 2 and 1 of the 5 samples; a Phi_s the chunks share
  // (computed once), then per-sample masks offset per chunk.
  CheckHalfShiftSum({5, 32, 256, 256, 2, false, NORMKIT_MASK_CHW, NORMKIT_LAYOUT_CHANNELS_FIRST},
                    NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_BFLOAT16);
  CheckHalfShiftSum(
      {5, 32, 256, 256, 2, false, NORMKIT_MASK_PHI_BCHW, NORMKIT_LAYOUT_CHANNELS_LAST},
      NORMKIT_DTYPE_FLOAT16, NORMKIT_DTYPE_FLOAT32);
}

// Adds `offset` to every element the cluster plans' pivots read, for the plans the
// library makes on an H100 (227 KiB of shared memory a block, 132 multiprocessors); on
// another GPU the outliers land elsewhere and the test still checks the results.
void OffsetClusterPivots(const std::vector<int64_t>& shape, int64_t groups, bool channels_last,
                         float offset, std::vector<float>* x) {
  namespace nc = normkit::cuda;
  const int64_t N = shape[0], C = shape[1], S = Numel(shape) / (N * C);
  const nc::NormShape s = nc::NormShape::ForGroups(N, C, S, groups, channels_last);
  const int64_t shared = 227 * 1024 - 1024;
  if (channels_last) {
    nc::ClusterUnits p;
    ASSERT_TRUE(nc::ClusterUnits::Of(s, true, shared, 132, 16, &p));
    for (uint32_t n = 0; n < p.samples; ++n)
      for (uint32_t r = 0; r < p.blocks; ++r)
        for (uint32_t i = 0; i < nc::ClusterPivotRows(p, p.RowsOf(r)); ++i)
          for (uint32_t g = 0; g < p.groups * p.slices; ++g)
            for (uint32_t c = 0; c < nc::ClusterPivotChannels(p); ++c)
              (*x)[(static_cast<size_t>(n) * p.positions + r * p.rows + i) * p.stride + g * p.Cg +
                   c] += offset;
  } else {
    const nc::FlatUnits f = nc::FlatUnits::Of(s, true);
    nc::ClusterRuns c;
    ASSERT_TRUE(nc::ClusterRuns::Of(s, f, shared, 132, 16, &c));
    for (uint32_t unit = 0; unit < c.units; ++unit)
      for (uint32_t r = 0; r < c.blocks; ++r)
        for (uint32_t e = 0; e < std::min(32u, 4 * c.ItemsOf(r)); ++e)
          (*x)[f.Offset(unit, 4 * r * c.run_items + e)] += offset;
  }
}

// Group norm with few large groups, and channels-last instance norm, run on Hopper as a
// cluster of blocks per sample or slice of a sample's channels (channels-last) or per
// group (channels-first): the cluster plans of cuda/norm_math.h. Rows cached in shared
// memory or not (1x128x96x96 NHWC caches part of each block's rows), 3 float4 columns
// (C = 12), batch-1 samples in 2 to 8 slices (of 6 float4 columns at 1x48x100x100),
// channel boundaries inside items (HW = 9999), pivots far from the mean (outliers on
// every element the pivots read, so the blocks sum again), in place, and x 4 bytes off
// 16 (other plans).
TEST(Cuda, ClusterPlans) {
  SKIP_WITHOUT_GPU();
  struct Case {
    std::vector<int64_t> shape;
    int64_t groups;
    bool channels_last;
  };
  for (const Case& k : std::vector<Case>{{{2, 64, 64, 64}, 64, true},
                                         {{1, 32, 112, 112}, 8, true},
                                         {{1, 128, 96, 96}, 8, true},
                                         {{3, 12, 17, 5}, 12, true},
                                         {{1, 256, 72, 72}, 32, true},
                                         {{1, 48, 100, 100}, 12, true},
                                         {{2, 64, 160, 160}, 32, true},
                                         {{1, 32, 112, 112}, 8, false},
                                         {{1, 128, 96, 96}, 8, false},
                                         {{1, 8, 99, 101}, 2, false}}) {
    const int64_t n = Numel(k.shape), N = k.shape[0], C = k.shape[1], S = n / (N * C);
    const auto layout =
        k.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
    for (int variant = 0; variant < 4; ++variant) {
      const bool outliers = variant == 1, in_place = variant == 2, misaligned = variant == 3;
      SCOPED_TRACE("C=" + std::to_string(C) + " G=" + std::to_string(k.groups) +
                   (k.channels_last ? " NHWC" : " NCHW") + " variant " + std::to_string(variant));
      std::vector<float> x = RandomVector(n, 17);
      for (auto& v : x) v = 1000.0f + 0.1f * v;  // mean 1e4 x std
      if (outliers) OffsetClusterPivots(k.shape, k.groups, k.channels_last, 50.0f, &x);
      const std::vector<float> gamma = RandomVector(C, 18), beta = RandomVector(C, 19);
      const size_t off = misaligned ? 1 : 0;
      std::vector<float> padded(n + 1, 0.0f);
      std::copy(x.begin(), x.end(), padded.begin() + off);
      DeviceArray<float> dx(padded), dy{std::vector<float>(n + 1)}, dgamma(gamma), dbeta(beta),
          dmean{std::vector<float>(N * k.groups)}, drstd{std::vector<float>(N * k.groups)};
      normkit_tensor xt = OnDevice(Desc(nullptr, layout, k.shape), dx.get() + off);
      normkit_tensor yt =
          OnDevice(Desc(nullptr, layout, k.shape), (in_place ? dx.get() : dy.get()) + off);
      ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f,
                                   NORMKIT_ACTIVATION_SILU, &yt, dmean.get(), drstd.get()),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      const NormReference want =
          ReferenceGroupNorm(x, N, C, S, k.groups, k.channels_last, gamma.data(), beta.data(), 1e-5,
                             NORMKIT_ACTIVATION_SILU);
      const std::vector<float> out = (in_place ? dx : dy).Download();
      ExpectNormNear(std::vector<float>(out.begin() + off, out.begin() + off + n), want,
                     "group norm", 2e-5);
      const std::vector<float> mean = dmean.Download(), rstd = drstd.Download();
      for (int64_t u = 0; u < N * k.groups; ++u) {
        EXPECT_NEAR(mean[u], want.mean[u], 1e-6 * std::fabs(want.mean[u]));
        EXPECT_NEAR(rstd[u], want.rstd[u], 1e-5 * want.rstd[u]);
      }
      if (!in_place) {  // the same bits from run to run
        ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.groups, dgamma.get(), dbeta.get(), 1e-5f,
                                     NORMKIT_ACTIVATION_SILU, &yt, nullptr, nullptr),
                  NORMKIT_SUCCESS);
        EXPECT_EQ(dy.Download(), out) << "second run differs";
      }
    }
  }
}

TEST(Cuda, HostPointersAreRejectedAndNothingIsWritten) {
  SKIP_WITHOUT_GPU();
  const std::vector<int64_t> shape = {2, 4, 5, 6};
  const std::vector<float> x = RandomVector(Numel(shape), 1), gamma = RandomVector(4, 2);
  const std::vector<float> sentinel(x.size(), -7.0f);
  DeviceArray<float> dx(x), dy(sentinel), dgamma(gamma);
  normkit_tensor xt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, shape), dx.get());
  normkit_tensor yt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, shape), dy.get());
  EXPECT_EQ(normkit_group_norm(nullptr, &xt, 2, gamma.data(), nullptr, 1e-5f,
                               NORMKIT_ACTIVATION_NONE, &yt, nullptr, nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("gamma is host memory"), std::string::npos)
      << normkit_last_error();
  EXPECT_EQ(dy.Download(), sentinel);
  // A negative running variance on the device is found before anything is written.
  std::vector<float> var = {1.0f, -1.0f, 1.0f, 1.0f};
  DeviceArray<float> dvar(var), dmean(gamma);
  EXPECT_EQ(normkit_batch_norm_inference(nullptr, &xt, nullptr, nullptr, dmean.get(), dvar.get(),
                                         1e-5f, &yt),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("running_var[1]"), std::string::npos)
      << normkit_last_error();
  EXPECT_EQ(dy.Download(), sentinel);
  // A device index that does not exist.
  xt.device_index = yt.device_index = normkit_cuda_device_count();
  EXPECT_EQ(normkit_affine(nullptr, &xt, nullptr, nullptr, NORMKIT_PARAMS_PER_CHANNEL, &yt),
            NORMKIT_ERROR_DEVICE_UNAVAILABLE);
}

TEST(Cuda, RunsOnTheContextsStream) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Context ctx(1);
  ASSERT_EQ(normkit_context_set_cuda_stream(ctx.ctx, stream), NORMKIT_SUCCESS);
  EXPECT_EQ(normkit_context_cuda_stream(ctx.ctx), static_cast<void*>(stream));
  const std::vector<int64_t> shape = {4, 32, 16, 16};
  const std::vector<float> x = RandomVector(Numel(shape), 1);
  DeviceArray<float> dx(x), dy{std::vector<float>(x.size())};
  normkit_tensor xt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_LAST, shape), dx.get());
  normkit_tensor yt = OnDevice(Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_LAST, shape), dy.get());
  ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, 8, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_SILU,
                               &yt, nullptr, nullptr),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ExpectNormNear(
      dy.Download(),
      ReferenceGroupNorm(x, 4, 32, 256, 8, true, nullptr, nullptr, 1e-5, NORMKIT_ACTIVATION_SILU),
      "group norm on a stream", 2e-5);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace normkit_test
