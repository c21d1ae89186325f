// SPDX-License-Identifier: Apache-2.0
// Header-only C++17 convenience over the C API: exceptions instead of status codes,
// RAII contexts, and tensor views built from a pointer and a shape. Nothing here
// crosses the ABI; it compiles into the caller.
#ifndef NORMKIT_NORMKIT_HPP_
#define NORMKIT_NORMKIT_HPP_

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "normkit/normkit.h"

namespace normkit {

// Thrown for any non-success status; what() is normkit_last_error().
class Error : public std::runtime_error {
 public:
  Error(normkit_status status, const char* message)
      : std::runtime_error(message), status_(status) {}
  normkit_status status() const noexcept { return status_; }

 private:
  normkit_status status_;
};

inline void Check(normkit_status status) {
  if (status != NORMKIT_SUCCESS) throw Error(status, normkit_last_error());
}

enum class Layout {
  kChannelsFirst = NORMKIT_LAYOUT_CHANNELS_FIRST,
  kChannelsLast = NORMKIT_LAYOUT_CHANNELS_LAST
};

// The element types of a tensor (normkit_dtype).
enum class Dtype {
  kFloat32 = NORMKIT_DTYPE_FLOAT32,
  kFloat16 = NORMKIT_DTYPE_FLOAT16,
  kBFloat16 = NORMKIT_DTYPE_BFLOAT16,
  kFloat64 = NORMKIT_DTYPE_FLOAT64
};

// A tensor view: data of float (float32) or double (float64, the shift-sum family), a
// logical shape N, C, spatial... and a layout; on the CPU, or on CUDA device
// `device_index` (OnCuda: data is a device pointer). The shape is a braced list or any
// container of integers known at run time (std::vector<int64_t>, std::array<int, 4>, ...).
// A view of const data is for inputs: passed as an output, the op would write through it.
// Half tensors name their dtype: Tensor(Dtype::kBFloat16, bits, shape), the data any
// 2-byte type (uint16_t bit patterns, a compiler's __bf16 / _Float16) or void.
class Tensor {
 public:
  template <class T>
  Tensor(T* data, std::initializer_list<int64_t> shape, Layout layout = Layout::kChannelsFirst) {
    Init(DtypeOf<T>(), data, shape.begin(), shape.end(), layout);
  }
  template <class T, class Shape, class = decltype(std::begin(std::declval<const Shape&>()))>
  Tensor(T* data, const Shape& shape, Layout layout = Layout::kChannelsFirst) {
    Init(DtypeOf<T>(), data, std::begin(shape), std::end(shape), layout);
  }
  template <class T>
  Tensor(Dtype dtype, T* data, std::initializer_list<int64_t> shape,
         Layout layout = Layout::kChannelsFirst) {
    CheckElementSize<T>(dtype);
    Init(dtype, data, shape.begin(), shape.end(), layout);
  }
  template <class T, class Shape, class = decltype(std::begin(std::declval<const Shape&>()))>
  Tensor(Dtype dtype, T* data, const Shape& shape, Layout layout = Layout::kChannelsFirst) {
    CheckElementSize<T>(dtype);
    Init(dtype, data, std::begin(shape), std::end(shape), layout);
  }
  Tensor& OnCuda(int32_t device_index = 0) noexcept {
    desc_.device = NORMKIT_DEVICE_CUDA;
    desc_.device_index = device_index;
    return *this;
  }
  const normkit_tensor* get() const noexcept { return &desc_; }

 private:
  template <class T>
  static constexpr Dtype DtypeOf() {
    using Element = std::remove_const_t<T>;
    static_assert(std::is_same_v<Element, float> || std::is_same_v<Element, double>,
                  "normkit::Tensor: data must be float (float32) or double (float64); half "
                  "tensors: Tensor(Dtype::kBFloat16 or kFloat16, data, shape)");
    return std::is_same_v<Element, float> ? Dtype::kFloat32 : Dtype::kFloat64;
  }

  // Typed data must have the dtype's element size (void data: the caller's word).
  template <class T>
  static void CheckElementSize(Dtype dtype) {
    if constexpr (!std::is_void_v<std::remove_const_t<T>>) {
      const size_t size = dtype == Dtype::kFloat64 ? 8 : dtype == Dtype::kFloat32 ? 4 : 2;
      if (sizeof(T) != size) {
        throw Error(NORMKIT_ERROR_INVALID_ARGUMENT,
                    "Tensor: the data's element size differs from the dtype's");
      }
    }
  }

  template <class T, class It>
  void Init(Dtype dtype, T* data, It first, It last, Layout layout) {
    using Element = std::remove_const_t<T>;
    int64_t dims[NORMKIT_MAX_RANK] = {};
    int32_t rank = 0;
    for (It it = first; it != last; ++it) {
      if (rank == NORMKIT_MAX_RANK) throw Error(NORMKIT_ERROR_INVALID_ARGUMENT, "Tensor: rank > 5");
      const auto dim = *it;
      if (dim < 0 || static_cast<uint64_t>(dim) > static_cast<uint64_t>(INT64_MAX)) {
        throw Error(NORMKIT_ERROR_INVALID_ARGUMENT, "Tensor: a dimension is out of range");
      }
      dims[rank++] = static_cast<int64_t>(dim);
    }
    normkit_tensor_init(&desc_, const_cast<Element*>(data), static_cast<normkit_dtype>(dtype),
                        static_cast<normkit_layout>(layout), rank, dims);
  }

  normkit_tensor desc_;
};

// CUDA devices normkit can use (0 without the CUDA module, a driver or a GPU).
inline int32_t CudaDeviceCount() noexcept {
  return normkit_cuda_device_count();
}

// Owns a normkit_context; 0 threads means the process default.
class Context {
 public:
  explicit Context(int32_t num_threads = 0) { Check(normkit_context_create(num_threads, &ctx_)); }
  ~Context() { normkit_context_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  Context(Context&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}
  Context& operator=(Context&& other) noexcept {
    std::swap(ctx_, other.ctx_);
    return *this;
  }
  int32_t num_threads() const { return normkit_context_num_threads(ctx_); }
  // The cudaStream_t (as void*) calls on CUDA tensors run on; nullptr: default stream.
  void set_cuda_stream(void* stream) { Check(normkit_context_set_cuda_stream(ctx_, stream)); }
  void* cuda_stream() const noexcept { return normkit_context_cuda_stream(ctx_); }
  const normkit_context* get() const noexcept { return ctx_; }

 private:
  normkit_context* ctx_ = nullptr;
};

// y = x * scale + shift (see normkit_affine). scale / shift may be nullptr.
inline void Affine(const Tensor& x, const float* scale, const float* shift, const Tensor& y,
                   normkit_param_kind kind = NORMKIT_PARAMS_PER_CHANNEL,
                   const Context* ctx = nullptr) {
  Check(normkit_affine(ctx ? ctx->get() : nullptr, x.get(), scale, shift, kind, y.get()));
}

// Batch norm inference (see normkit_batch_norm_inference). gamma / beta may be nullptr.
inline void BatchNormInference(const Tensor& x, const float* gamma, const float* beta,
                               const float* mean, const float* var, float eps, const Tensor& y,
                               const Context* ctx = nullptr) {
  Check(normkit_batch_norm_inference(ctx ? ctx->get() : nullptr, x.get(), gamma, beta, mean, var,
                                     eps, y.get()));
}

// Batch norm in training mode, the forward pass (see normkit_batch_norm_training).
// running_mean / running_var: both or neither; save_mean / save_rstd may be nullptr.
inline void BatchNormTraining(const Tensor& x, const float* gamma, const float* beta, float eps,
                              float momentum, float* running_mean, float* running_var,
                              const Tensor& y, float* save_mean = nullptr,
                              float* save_rstd = nullptr, const Context* ctx = nullptr) {
  Check(normkit_batch_norm_training(ctx ? ctx->get() : nullptr, x.get(), gamma, beta, eps, momentum,
                                    running_mean, running_var, y.get(), save_mean, save_rstd));
}

// Batch norm in training mode, the backward pass (see normkit_batch_norm_training_backward).
// dx, gamma, grad_gamma and grad_beta may be nullptr.
inline void BatchNormTrainingBackward(const Tensor& x, const Tensor& dy, const float* save_mean,
                                      const float* save_rstd, const float* gamma, const Tensor* dx,
                                      float* grad_gamma, float* grad_beta,
                                      const Context* ctx = nullptr) {
  Check(normkit_batch_norm_training_backward(ctx ? ctx->get() : nullptr, x.get(), dy.get(),
                                             save_mean, save_rstd, gamma, dx ? dx->get() : nullptr,
                                             grad_gamma, grad_beta));
}

// Folds BN statistics into per-channel scale / shift (see normkit_batch_norm_fold).
inline void BatchNormFold(int64_t channels, const float* gamma, const float* beta,
                          const float* mean, const float* var, float eps, float* scale,
                          float* shift) {
  Check(normkit_batch_norm_fold(channels, gamma, beta, mean, var, eps, scale, shift));
}

// See normkit_fold_batch_norm_into_conv.
inline void FoldBatchNormIntoConv(float* weight, int64_t out_channels, int64_t in_channels,
                                  int64_t groups, int64_t kernel_elems,
                                  normkit_conv_weight_order order, const float* bias,
                                  float* folded_bias, const float* gamma, const float* beta,
                                  const float* mean, const float* var, float eps) {
  Check(normkit_fold_batch_norm_into_conv(weight, out_channels, in_channels, groups, kernel_elems,
                                          order, bias, folded_bias, gamma, beta, mean, var, eps));
}

// See normkit_fold_batch_norm_into_linear.
inline void FoldBatchNormIntoLinear(float* weight, int64_t out_features, int64_t in_features,
                                    const float* bias, float* folded_bias, const float* gamma,
                                    const float* beta, const float* mean, const float* var,
                                    float eps) {
  Check(normkit_fold_batch_norm_into_linear(weight, out_features, in_features, bias, folded_bias,
                                            gamma, beta, mean, var, eps));
}

// Group norm (see normkit_group_norm). gamma / beta / mean_out / rstd_out may be nullptr.
inline void GroupNorm(const Tensor& x, int64_t groups, const float* gamma, const float* beta,
                      float eps, const Tensor& y,
                      normkit_activation activation = NORMKIT_ACTIVATION_NONE,
                      const Context* ctx = nullptr, float* mean_out = nullptr,
                      float* rstd_out = nullptr) {
  Check(normkit_group_norm(ctx ? ctx->get() : nullptr, x.get(), groups, gamma, beta, eps,
                           activation, y.get(), mean_out, rstd_out));
}

// Instance norm: group norm with groups = C (see normkit_instance_norm).
inline void InstanceNorm(const Tensor& x, const float* gamma, const float* beta, float eps,
                         const Tensor& y, normkit_activation activation = NORMKIT_ACTIVATION_NONE,
                         const Context* ctx = nullptr, float* mean_out = nullptr,
                         float* rstd_out = nullptr) {
  Check(normkit_instance_norm(ctx ? ctx->get() : nullptr, x.get(), gamma, beta, eps, activation,
                              y.get(), mean_out, rstd_out));
}

// Layer norm over C and space with per-channel gamma / beta: group norm with one group.
inline void ChannelLayerNorm(const Tensor& x, const float* gamma, const float* beta, float eps,
                             const Tensor& y,
                             normkit_activation activation = NORMKIT_ACTIVATION_NONE,
                             const Context* ctx = nullptr, float* mean_out = nullptr,
                             float* rstd_out = nullptr) {
  Check(normkit_channel_layer_norm(ctx ? ctx->get() : nullptr, x.get(), gamma, beta, eps,
                                   activation, y.get(), mean_out, rstd_out));
}

// Layer norm over the last dim of a [rows, D] tensor (see normkit_layer_norm).
inline void LayerNorm(const Tensor& x, const float* gamma, const float* beta, float eps,
                      const Tensor& y, const Context* ctx = nullptr, float* mean_out = nullptr,
                      float* rstd_out = nullptr) {
  Check(normkit_layer_norm(ctx ? ctx->get() : nullptr, x.get(), gamma, beta, eps, y.get(), mean_out,
                           rstd_out));
}

// RMS norm over the last dim of a [rows, D] tensor (see normkit_rms_norm).
inline void RmsNorm(const Tensor& x, const float* gamma, float eps, const Tensor& y,
                    const Context* ctx = nullptr, float* rstd_out = nullptr) {
  Check(normkit_rms_norm(ctx ? ctx->get() : nullptr, x.get(), gamma, eps, y.get(), rstd_out));
}

// Residual add fused with layer norm: h = x + residual (+ bias), y = layer norm of h
// (see normkit_add_layer_norm); h_out, when given, receives h.
inline void AddLayerNorm(const Tensor& x, const Tensor& residual, const float* bias,
                         const float* gamma, const float* beta, float eps, const Tensor& y,
                         const Tensor* h_out = nullptr, const Context* ctx = nullptr,
                         float* mean_out = nullptr, float* rstd_out = nullptr) {
  Check(normkit_add_layer_norm(ctx ? ctx->get() : nullptr, x.get(), residual.get(), bias, gamma,
                               beta, eps, y.get(), h_out ? h_out->get() : nullptr, mean_out,
                               rstd_out));
}

// Residual add fused with RMS norm (see normkit_add_rms_norm).
inline void AddRmsNorm(const Tensor& x, const Tensor& residual, const float* bias,
                       const float* gamma, float eps, const Tensor& y,
                       const Tensor* h_out = nullptr, const Context* ctx = nullptr,
                       float* rstd_out = nullptr) {
  Check(normkit_add_rms_norm(ctx ? ctx->get() : nullptr, x.get(), residual.get(), bias, gamma, eps,
                             y.get(), h_out ? h_out->get() : nullptr, rstd_out));
}

// Parameters of the shift-sum family (see normkit_shift_sum_params): the step S, then
// the axis, scale and mask as needed, e.g. ShiftSumParams(2).Scale(0.5).Mask(
// NORMKIT_MASK_HW, mask).
class ShiftSumParams {
 public:
  explicit ShiftSumParams(int64_t step) { normkit_shift_sum_params_init(&params_, step); }
  ShiftSumParams& Axis(normkit_shift_axis axis) {
    params_.axis = axis;
    return *this;
  }
  ShiftSumParams& Scale(double scale) {
    params_.scale = scale;
    return *this;
  }
  // mask: data of x's dtype, channels-first, as `kind` says.
  ShiftSumParams& Mask(normkit_mask_kind kind, const void* mask) {
    params_.mask_kind = kind;
    params_.mask = mask;
    return *this;
  }
  const normkit_shift_sum_params* get() const noexcept { return &params_; }

 private:
  normkit_shift_sum_params params_;
};

// Forward operator A (see normkit_shift_sum): x [B, C, H, W] -> y [B, 1, H', W'].
inline void ShiftSum(const Tensor& x, const ShiftSumParams& params, const Tensor& y,
                     const Context* ctx = nullptr) {
  Check(normkit_shift_sum(ctx ? ctx->get() : nullptr, x.get(), params.get(), y.get()));
}

// Adjoint A^T (see normkit_shift_sum_adjoint): y -> x.
inline void ShiftSumAdjoint(const Tensor& y, const ShiftSumParams& params, const Tensor& x,
                            const Context* ctx = nullptr) {
  Check(normkit_shift_sum_adjoint(ctx ? ctx->get() : nullptr, y.get(), params.get(), x.get()));
}

// Normalizer Phi_s (see normkit_shift_sum_normalizer); x gives the shape only (its data may
// be nullptr); phi_s holds [H', W'] (or [B, H', W']) values of x's dtype.
inline void ShiftSumNormalizer(const Tensor& x, const ShiftSumParams& params, void* phi_s,
                               const Context* ctx = nullptr) {
  Check(normkit_shift_sum_normalizer(ctx ? ctx->get() : nullptr, x.get(), params.get(), phi_s));
}

// Pseudo-inverse (see normkit_shift_sum_pinv): y -> x.
inline void ShiftSumPinv(const Tensor& y, const ShiftSumParams& params, const Tensor& x,
                         normkit_pinv_mode mode = NORMKIT_PINV_MOORE_PENROSE,
                         const void* normalizer = nullptr, const Context* ctx = nullptr) {
  Check(normkit_shift_sum_pinv(ctx ? ctx->get() : nullptr, y.get(), params.get(), mode, normalizer,
                               x.get()));
}

// GAP / ADMM step, in place on x (see normkit_shift_sum_gap_step).
inline void ShiftSumGapStep(const Tensor& x, const Tensor& y, const ShiftSumParams& params,
                            double lambda, double gamma, const void* normalizer = nullptr,
                            const Context* ctx = nullptr) {
  Check(normkit_shift_sum_gap_step(ctx ? ctx->get() : nullptr, x.get(), y.get(), params.get(),
                                   lambda, gamma, normalizer));
}

// The zero-padded stack of shifted channels and back (see normkit_shift / normkit_unshift).
inline void Shift(const Tensor& x, const ShiftSumParams& params, const Tensor& xs,
                  const Context* ctx = nullptr) {
  Check(normkit_shift(ctx ? ctx->get() : nullptr, x.get(), params.get(), xs.get()));
}
inline void Unshift(const Tensor& xs, const ShiftSumParams& params, const Tensor& x,
                    const Context* ctx = nullptr) {
  Check(normkit_unshift(ctx ? ctx->get() : nullptr, xs.get(), params.get(), x.get()));
}

}  // namespace normkit

#endif  // NORMKIT_NORMKIT_HPP_
