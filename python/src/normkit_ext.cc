// SPDX-License-Identifier: Apache-2.0
// The normkit Python extension (nanobind): each op takes DLPack / buffer-protocol arrays
// (numpy, PyTorch CPU tensors) without copying, describes them to the C API (layout from
// the strides), checks what the C API cannot (the lengths of parameter arrays), and calls
// it with the GIL released. Outputs are allocated by the Python layer (normkit/_ops.py).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "normkit/normkit.h"

namespace nb = nanobind;

namespace {

// Any device: CPU arrays, and CUDA tensors, which normkit runs on the GPU when the library
// has its CUDA module (else the call raises with normkit's DEVICE_UNAVAILABLE message).
using Array = nb::ndarray<>;
using OptArray = std::optional<Array>;

// Raises the Python exception for a failed call, with normkit's message.
void Check(normkit_status status) {
  if (status == NORMKIT_SUCCESS) return;
  const std::string message = normkit_last_error();
  switch (status) {
    case NORMKIT_ERROR_INVALID_ARGUMENT: throw nb::value_error(message.c_str());
    case NORMKIT_ERROR_UNSUPPORTED: throw nb::type_error(message.c_str());
    case NORMKIT_ERROR_OUT_OF_MEMORY: throw std::bad_alloc();
    default: throw std::runtime_error(message);
  }
}

std::string Name(const char* op, const char* arg) {
  return std::string(op) + ": " + arg;
}

// The dtype of an array; the C API says which ops take which (float64: the shift-sum
// family only; bfloat16 / float16: every op on CPU), with normkit's message.
int32_t DtypeOf(const Array& a, const char* op, const char* arg) {
  if (a.dtype() == nb::dtype<float>()) return NORMKIT_DTYPE_FLOAT32;
  if (a.dtype() == nb::dtype<double>()) return NORMKIT_DTYPE_FLOAT64;
  const nb::dlpack::dtype t = a.dtype();
  if (t.bits == 16 && t.lanes == 1) {
    if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return NORMKIT_DTYPE_FLOAT16;
    if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat)) {
      return NORMKIT_DTYPE_BFLOAT16;
    }
  }
  throw nb::type_error((Name(op, arg) +
                        " must be float32, bfloat16 or float16 (float64: the shift-sum family "
                        "only)")
                           .c_str());
}

// Whether the strides are those of a dense array whose dimensions, from the innermost out,
// are taken in `order` (dimension indices, innermost first).
bool DenseInOrder(const Array& a, const int* order, size_t rank) {
  int64_t expected = 1;
  for (size_t k = 0; k < rank; ++k) {
    const size_t dim = static_cast<size_t>(order[k]);
    if (a.shape(dim) != 1 && a.stride(dim) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(dim));
  }
  return true;
}

// normkit's layout of `a`: channels-first when its strides are C-contiguous,
// channels-last when they are those of N, spatial..., C (PyTorch's channels_last).
// `requested` (-1: either) picks one where both hold (C = 1 or a spatial size of 1).
int32_t LayoutOf(const Array& a, int32_t requested, const char* op, const char* arg) {
  const size_t rank = a.ndim();
  int first[NORMKIT_MAX_RANK], last[NORMKIT_MAX_RANK];
  for (size_t k = 0; k < rank; ++k) first[k] = static_cast<int>(rank - 1 - k);
  // Channels-last: C innermost, then the spatial dimensions from the last, then N.
  last[0] = 1;
  for (size_t k = 1; k + 1 < rank; ++k) last[k] = static_cast<int>(rank - k);
  if (rank >= 2) last[rank - 1] = 0;
  const bool cf = DenseInOrder(a, first, rank);
  const bool cl = rank > 2 && DenseInOrder(a, last, rank);
  if (requested == NORMKIT_LAYOUT_CHANNELS_FIRST && cf) return requested;
  if (requested == NORMKIT_LAYOUT_CHANNELS_LAST && cl) return requested;
  if (requested < 0 && cf) return NORMKIT_LAYOUT_CHANNELS_FIRST;
  if (requested < 0 && cl) return NORMKIT_LAYOUT_CHANNELS_LAST;
  throw nb::value_error(
      (Name(op, arg) +
       (requested == NORMKIT_LAYOUT_CHANNELS_LAST
            ? " is not dense in channels-last order (use .contiguous(memory_format="
              "torch.channels_last))"
            : " is not a dense array in channels-first (C-contiguous) or channels-last order "
              "(use .contiguous() or np.ascontiguousarray)"))
          .c_str());
}

// A tensor descriptor over `a` (rank 2 to 5).
normkit_tensor TensorOf(const Array& a, int32_t layout, const char* op, const char* arg) {
  if (a.ndim() < 2 || a.ndim() > NORMKIT_MAX_RANK) {
    throw nb::value_error(
        (Name(op, arg) + " must have rank 2 to 5, not " + std::to_string(a.ndim())).c_str());
  }
  normkit_tensor t;
  int64_t shape[NORMKIT_MAX_RANK];
  for (size_t k = 0; k < a.ndim(); ++k) shape[k] = static_cast<int64_t>(a.shape(k));
  normkit_tensor_init(&t, a.data(), static_cast<normkit_dtype>(DtypeOf(a, op, arg)),
                      static_cast<normkit_layout>(LayoutOf(a, layout, op, arg)),
                      static_cast<int32_t>(a.ndim()), shape);
  if (a.device_type() == nb::device::cuda::value) {
    normkit_tensor_set_device(&t, NORMKIT_DEVICE_CUDA, a.device_id());
  } else if (a.device_type() != nb::device::cpu::value) {
    throw nb::value_error((Name(op, arg) + " is on a device normkit does not run on").c_str());
  }
  return t;
}

// A dense float32 array of exactly `count` elements (any shape), or null when absent.
template <class T = float>
T* ParamOf(const OptArray& a, int64_t count, const char* op, const char* arg,
           int32_t device = NORMKIT_DEVICE_CPU) {
  if (!a) return nullptr;
  const int32_t where = a->device_type() == nb::device::cuda::value  ? NORMKIT_DEVICE_CUDA
                        : a->device_type() == nb::device::cpu::value ? NORMKIT_DEVICE_CPU
                                                                     : -1;
  if (where != device) {
    throw nb::value_error((Name(op, arg) + (device == NORMKIT_DEVICE_CUDA
                                                ? " must be a CUDA array, as the tensors are"
                                                : " must be a CPU array, as the tensors are"))
                              .c_str());
  }
  if (a->dtype() != nb::dtype<T>()) {
    throw nb::type_error(
        (Name(op, arg) + (sizeof(T) == 4 ? " must be float32" : " must be float64")).c_str());
  }
  if (static_cast<int64_t>(a->size()) != count) {
    throw nb::value_error((Name(op, arg) + " has " + std::to_string(a->size()) +
                           " elements, expected " + std::to_string(count))
                              .c_str());
  }
  int64_t expected = 1;
  for (size_t k = a->ndim(); k-- > 0;) {
    if (a->shape(k) != 1 && a->stride(k) != expected) {
      throw nb::value_error((Name(op, arg) + " must be contiguous").c_str());
    }
    expected *= static_cast<int64_t>(a->shape(k));
  }
  return static_cast<T*>(a->data());
}

// The error a Python parallel-for raised during this thread's current call (the host's
// parallel-for runs on the calling thread, so a thread-local carries it to Call()).
thread_local std::optional<nb::python_error> pending_pool_error;

// One normkit parallel loop on a Python parallel_for(n, run): `run(i)` runs task i with
// the GIL released, once; it raises IndexError outside [0, n) and RuntimeError after
// parallel_for returned. Waits for every started task before returning (a pool that
// returns early cannot leave one running), then runs the tasks the pool skipped on this
// thread, so the output is whole even when parallel_for raised (its error is raised by
// the op call afterwards).
class PythonLoop {
 public:
  PythonLoop(int64_t n, void (*task)(void*, int64_t), void* task_context)
      : n_(n), task_(task), task_context_(task_context), started_(static_cast<size_t>(n)) {}

  void Run(int64_t i) {
    if (i < 0 || i >= n_) {
      throw nb::index_error(("normkit parallel_for: task " + std::to_string(i) +
                             " is outside [0, " + std::to_string(n_) + ")")
                                .c_str());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_) throw std::runtime_error("normkit parallel_for: run(i) called after return");
      if (started_[static_cast<size_t>(i)]) return;
      started_[static_cast<size_t>(i)] = true;
      ++in_flight_;
    }
    {
      nb::gil_scoped_release release;
      task_(task_context_, i);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--in_flight_ == 0) idle_.notify_all();
  }

  // After the pool returned: no new starts, wait for running tasks, run the skipped ones.
  void Finish() {
    std::unique_lock<std::mutex> lock(mutex_);
    closed_ = true;
    idle_.wait(lock, [&] { return in_flight_ == 0; });
    for (int64_t i = 0; i < n_; ++i) {
      if (!started_[static_cast<size_t>(i)]) task_(task_context_, i);
    }
  }

 private:
  const int64_t n_;
  void (*const task_)(void*, int64_t);
  void* const task_context_;
  std::mutex mutex_;
  std::condition_variable idle_;
  std::vector<bool> started_;
  int64_t in_flight_ = 0;
  bool closed_ = false;
};

// normkit_parallel_for_fn over a Python callable (`pool` is the callable).
void PythonParallelFor(void* pool, int64_t n, void (*task)(void*, int64_t), void* task_context) {
  auto loop = std::make_shared<PythonLoop>(n, task, task_context);
  {
    nb::gil_scoped_acquire gil;
    // `run` holds the loop, so a pool keeping it past return gets an error, not a crash.
    nb::object run = nb::cpp_function([loop](int64_t i) { loop->Run(i); }, nb::arg("i"));
    try {
      nb::handle(static_cast<PyObject*>(pool))(n, run);
    } catch (nb::python_error& e) {
      if (!pending_pool_error) pending_pool_error.emplace(std::move(e));
    }
  }
  loop->Finish();
}

// Threads for the calls made with it; wraps normkit_context: normkit's own backend, a
// Python parallel-for, or a C one (a function address and its pool).
class Context {
 public:
  explicit Context(int32_t num_threads, std::optional<nb::callable> parallel_for) {
    if (!parallel_for) {
      Check(normkit_context_create(num_threads, &ctx_));
      return;
    }
    parallel_for_ = *parallel_for;
    Check(normkit_context_create_with_parallel_for(num_threads, &PythonParallelFor,
                                                   parallel_for_.ptr(), &ctx_));
  }
  Context(int32_t num_threads, uintptr_t parallel_for, uintptr_t pool) {
    if (parallel_for == 0) throw nb::value_error("Context: parallel_for must not be 0 (NULL)");
    Check(normkit_context_create_with_parallel_for(
        num_threads, reinterpret_cast<normkit_parallel_for_fn>(parallel_for),
        reinterpret_cast<void*>(pool), &ctx_));
  }
  ~Context() { normkit_context_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  int32_t num_threads() const { return normkit_context_num_threads(ctx_); }
  const normkit_context* get() const { return ctx_; }
  nb::object parallel_for() const { return parallel_for_.is_valid() ? parallel_for_ : nb::none(); }

 private:
  normkit_context* ctx_ = nullptr;
  nb::object parallel_for_;  // keeps the Python callable alive for the context's life
};

const normkit_context* ContextOf(const Context* c) {
  return c ? c->get() : nullptr;
}

int64_t Channels(const normkit_tensor& t) {
  return t.shape[1];
}

// Calls `f` without the GIL, then raises for a failed status.
template <class F>
void Call(F&& f) {
  normkit_status status;
  {
    nb::gil_scoped_release release;
    status = f();
  }
  if (pending_pool_error) {
    nb::python_error error = std::move(*pending_pool_error);
    pending_pool_error.reset();
    throw error;
  }
  Check(status);
}

void Affine(const Array& x, const OptArray& scale, const OptArray& shift, bool per_sample,
            const Array& out, int32_t layout, const Context* ctx) {
  constexpr const char* op = "affine";
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  const normkit_tensor yt = TensorOf(out, xt.layout, op, "out");
  const int64_t n = per_sample ? xt.shape[0] * Channels(xt) : Channels(xt);
  const float* s = ParamOf(scale, n, op, "scale", xt.device);
  const float* b = ParamOf(shift, n, op, "shift", xt.device);
  const int32_t kind = per_sample ? NORMKIT_PARAMS_PER_SAMPLE_CHANNEL : NORMKIT_PARAMS_PER_CHANNEL;
  Call([&] { return normkit_affine(ContextOf(ctx), &xt, s, b, kind, &yt); });
}

void BatchNorm(const Array& x, const Array& running_mean, const Array& running_var,
               const OptArray& weight, const OptArray& bias, float eps, const Array& out,
               int32_t layout, const Context* ctx) {
  constexpr const char* op = "batch_norm";
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  const normkit_tensor yt = TensorOf(out, xt.layout, op, "out");
  const int64_t C = Channels(xt);
  const float* mean = ParamOf(OptArray(running_mean), C, op, "running_mean", xt.device);
  const float* var = ParamOf(OptArray(running_var), C, op, "running_var", xt.device);
  const float* g = ParamOf(weight, C, op, "weight", xt.device);
  const float* b = ParamOf(bias, C, op, "bias", xt.device);
  Call(
      [&] { return normkit_batch_norm_inference(ContextOf(ctx), &xt, g, b, mean, var, eps, &yt); });
}

void BatchNormTraining(const Array& x, const OptArray& running_mean, const OptArray& running_var,
                       const OptArray& weight, const OptArray& bias, float momentum, float eps,
                       const Array& out, const OptArray& save_mean, const OptArray& save_rstd,
                       int32_t layout, const Context* ctx) {
  constexpr const char* op = "batch_norm_training";
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  const normkit_tensor yt = TensorOf(out, xt.layout, op, "out");
  const int64_t C = Channels(xt);
  float* mean = ParamOf(running_mean, C, op, "running_mean", xt.device);
  float* var = ParamOf(running_var, C, op, "running_var", xt.device);
  const float* g = ParamOf(weight, C, op, "weight", xt.device);
  const float* b = ParamOf(bias, C, op, "bias", xt.device);
  float* sm = ParamOf(save_mean, C, op, "save_mean", xt.device);
  float* sr = ParamOf(save_rstd, C, op, "save_rstd", xt.device);
  Call([&] {
    return normkit_batch_norm_training(ContextOf(ctx), &xt, g, b, eps, momentum, mean, var, &yt, sm,
                                       sr);
  });
}

void BatchNormTrainingBackward(const Array& x, const Array& dy, const Array& save_mean,
                               const Array& save_rstd, const OptArray& weight, const OptArray& dx,
                               const OptArray& grad_weight, const OptArray& grad_bias,
                               int32_t layout, const Context* ctx) {
  constexpr const char* op = "batch_norm_training_backward";
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  const normkit_tensor dyt = TensorOf(dy, xt.layout, op, "grad_output");
  normkit_tensor dxt{};
  if (dx) dxt = TensorOf(*dx, xt.layout, op, "grad_input");
  const int64_t C = Channels(xt);
  const float* sm = ParamOf(OptArray(save_mean), C, op, "save_mean", xt.device);
  const float* sr = ParamOf(OptArray(save_rstd), C, op, "save_rstd", xt.device);
  const float* g = ParamOf(weight, C, op, "weight", xt.device);
  float* gw = ParamOf(grad_weight, C, op, "grad_weight", xt.device);
  float* gb = ParamOf(grad_bias, C, op, "grad_bias", xt.device);
  Call([&] {
    return normkit_batch_norm_training_backward(ContextOf(ctx), &xt, &dyt, sm, sr, g,
                                                dx ? &dxt : nullptr, gw, gb);
  });
}

void BatchNormFold(const Array& running_mean, const Array& running_var, const OptArray& weight,
                   const OptArray& bias, float eps, const Array& scale, const Array& shift) {
  constexpr const char* op = "batch_norm_fold";
  const auto C = static_cast<int64_t>(running_mean.size());
  const float* mean = ParamOf(OptArray(running_mean), C, op, "running_mean");
  const float* var = ParamOf(OptArray(running_var), C, op, "running_var");
  const float* g = ParamOf(weight, C, op, "weight");
  const float* b = ParamOf(bias, C, op, "bias");
  float* s = ParamOf(OptArray(scale), C, op, "scale");
  float* h = ParamOf(OptArray(shift), C, op, "shift");
  Call([&] { return normkit_batch_norm_fold(C, g, b, mean, var, eps, s, h); });
}

void FoldIntoConv(const Array& weight, const OptArray& bias, const Array& folded_bias,
                  int64_t groups, bool transposed, const Array& running_mean,
                  const Array& running_var, const OptArray& bn_weight, const OptArray& bn_bias,
                  float eps) {
  constexpr const char* op = "fold_batch_norm_into_conv";
  if (weight.ndim() < 3)
    throw nb::value_error("fold_batch_norm_into_conv: weight must have rank >= 3");
  // OIHW: [out, in / groups, k...]; transposed IOHW: [in, out / groups, k...].
  int64_t kernel = 1;
  for (size_t k = 2; k < weight.ndim(); ++k) kernel *= static_cast<int64_t>(weight.shape(k));
  const auto d0 = static_cast<int64_t>(weight.shape(0)), d1 = static_cast<int64_t>(weight.shape(1));
  const int64_t out_channels = transposed ? d1 * groups : d0;
  const int64_t in_channels = transposed ? d0 : d1 * groups;
  float* w = ParamOf(OptArray(weight), static_cast<int64_t>(weight.size()), op, "weight");
  const float* b = ParamOf(bias, out_channels, op, "bias");
  float* fb = ParamOf(OptArray(folded_bias), out_channels, op, "folded_bias");
  const float* mean = ParamOf(OptArray(running_mean), out_channels, op, "running_mean");
  const float* var = ParamOf(OptArray(running_var), out_channels, op, "running_var");
  const float* g = ParamOf(bn_weight, out_channels, op, "bn_weight");
  const float* be = ParamOf(bn_bias, out_channels, op, "bn_bias");
  const int32_t order = transposed ? NORMKIT_CONV_WEIGHT_IOHW_TRANSPOSED : NORMKIT_CONV_WEIGHT_OIHW;
  Call([&] {
    return normkit_fold_batch_norm_into_conv(w, out_channels, in_channels, groups, kernel, order, b,
                                             fb, g, be, mean, var, eps);
  });
}

void FoldIntoLinear(const Array& weight, const OptArray& bias, const Array& folded_bias,
                    const Array& running_mean, const Array& running_var, const OptArray& bn_weight,
                    const OptArray& bn_bias, float eps) {
  constexpr const char* op = "fold_batch_norm_into_linear";
  if (weight.ndim() != 2)
    throw nb::value_error("fold_batch_norm_into_linear: weight must be [out, in]");
  const auto out_f = static_cast<int64_t>(weight.shape(0));
  const auto in_f = static_cast<int64_t>(weight.shape(1));
  float* w = ParamOf(OptArray(weight), out_f * in_f, op, "weight");
  const float* b = ParamOf(bias, out_f, op, "bias");
  float* fb = ParamOf(OptArray(folded_bias), out_f, op, "folded_bias");
  const float* mean = ParamOf(OptArray(running_mean), out_f, op, "running_mean");
  const float* var = ParamOf(OptArray(running_var), out_f, op, "running_var");
  const float* g = ParamOf(bn_weight, out_f, op, "bn_weight");
  const float* be = ParamOf(bn_bias, out_f, op, "bn_bias");
  Call([&] {
    return normkit_fold_batch_norm_into_linear(w, out_f, in_f, b, fb, g, be, mean, var, eps);
  });
}

// Group norm and its forms; groups = 0: instance norm (G = C), -1: channel layer norm (G = 1).
void GroupNorm(const Array& x, int64_t groups, const OptArray& weight, const OptArray& bias,
               float eps, int32_t activation, const Array& out, const OptArray& mean_out,
               const OptArray& rstd_out, int32_t layout, const Context* ctx) {
  const char* op = groups == 0 ? "instance_norm" : groups < 0 ? "channel_layer_norm" : "group_norm";
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  const normkit_tensor yt = TensorOf(out, xt.layout, op, "out");
  const int64_t C = Channels(xt);
  const int64_t G = groups == 0 ? C : groups < 0 ? 1 : groups;
  const float* g = ParamOf(weight, C, op, "weight", xt.device);
  const float* b = ParamOf(bias, C, op, "bias", xt.device);
  float* m = ParamOf(mean_out, xt.shape[0] * G, op, "mean_out", xt.device);
  float* r = ParamOf(rstd_out, xt.shape[0] * G, op, "rstd_out", xt.device);
  Call([&] {
    if (groups == 0)
      return normkit_instance_norm(ContextOf(ctx), &xt, g, b, eps, activation, &yt, m, r);
    if (groups < 0) {
      return normkit_channel_layer_norm(ContextOf(ctx), &xt, g, b, eps, activation, &yt, m, r);
    }
    return normkit_group_norm(ContextOf(ctx), &xt, groups, g, b, eps, activation, &yt, m, r);
  });
}

// Layer norm (rms = false) or RMS norm of [rows, D] (x viewed as 2-D by the Python layer).
void RowNorm(const Array& x, const OptArray& weight, const OptArray& bias, float eps, bool rms,
             const Array& out, const OptArray& mean_out, const OptArray& rstd_out,
             const Context* ctx) {
  const char* op = rms ? "rms_norm" : "layer_norm";
  const normkit_tensor xt = TensorOf(x, NORMKIT_LAYOUT_CHANNELS_FIRST, op, "x");
  const normkit_tensor yt = TensorOf(out, NORMKIT_LAYOUT_CHANNELS_FIRST, op, "out");
  const int64_t D = xt.shape[1], rows = xt.shape[0];
  const float* g = ParamOf(weight, D, op, "weight", xt.device);
  const float* b = ParamOf(bias, D, op, "bias", xt.device);
  float* m = ParamOf(mean_out, rows, op, "mean_out", xt.device);
  float* r = ParamOf(rstd_out, rows, op, "rstd_out", xt.device);
  Call([&] {
    return rms ? normkit_rms_norm(ContextOf(ctx), &xt, g, eps, &yt, r)
               : normkit_layer_norm(ContextOf(ctx), &xt, g, b, eps, &yt, m, r);
  });
}

// Residual add + layer norm (rms = false) or RMS norm of [rows, D]: h = x + residual
// (+ add_bias), out = norm(h); h_out (or None) receives h.
void AddRowNorm(const Array& x, const Array& residual, const OptArray& add_bias,
                const OptArray& weight, const OptArray& bias, float eps, bool rms, const Array& out,
                const OptArray& h_out, const OptArray& mean_out, const OptArray& rstd_out,
                const Context* ctx) {
  const char* op = rms ? "add_rms_norm" : "add_layer_norm";
  const normkit_tensor xt = TensorOf(x, NORMKIT_LAYOUT_CHANNELS_FIRST, op, "x");
  const normkit_tensor rt = TensorOf(residual, NORMKIT_LAYOUT_CHANNELS_FIRST, op, "residual");
  const normkit_tensor yt = TensorOf(out, NORMKIT_LAYOUT_CHANNELS_FIRST, op, "out");
  normkit_tensor ht{};
  if (h_out) ht = TensorOf(*h_out, NORMKIT_LAYOUT_CHANNELS_FIRST, op, "residual_out");
  const int64_t D = xt.shape[1], rows = xt.shape[0];
  const float* a = ParamOf(add_bias, D, op, "add_bias", xt.device);
  const float* g = ParamOf(weight, D, op, "weight", xt.device);
  const float* b = ParamOf(bias, D, op, "bias", xt.device);
  float* m = ParamOf(mean_out, rows, op, "mean_out", xt.device);
  float* r = ParamOf(rstd_out, rows, op, "rstd_out", xt.device);
  const normkit_tensor* hp = h_out ? &ht : nullptr;
  Call([&] {
    return rms ? normkit_add_rms_norm(ContextOf(ctx), &xt, &rt, a, g, eps, &yt, hp, r)
               : normkit_add_layer_norm(ContextOf(ctx), &xt, &rt, a, g, b, eps, &yt, hp, m, r);
  });
}

// ---- shift-sum family ----

// The shift-sum call's parameters over a validated mask: its kind (NORMKIT_MASK_*) and the
// element count the kind implies for x [B, C, H, W], step and axis.
struct ShiftSumArgs {
  normkit_shift_sum_params params;
  int64_t B, C, H, W, H_out, W_out;
  bool per_sample;
};

template <class T>
ShiftSumArgs ShiftSumArgsOf(const char* op, const normkit_tensor& x, int64_t step, int32_t axis,
                            double scale, const OptArray& mask, int32_t mask_kind) {
  if (x.rank != 4) throw nb::value_error((Name(op, "x") + " must be [B, C, H, W]").c_str());
  ShiftSumArgs a;
  a.B = x.shape[0];
  a.C = x.shape[1];
  a.H = x.shape[2];
  a.W = x.shape[3];
  const int64_t spread = (a.C - 1) * (step < 0 ? -step : step);
  a.H_out = axis == NORMKIT_SHIFT_ALONG_H ? a.H + spread : a.H;
  a.W_out = axis == NORMKIT_SHIFT_ALONG_H ? a.W : a.W + spread;
  int64_t count = 0;
  switch (mask_kind) {
    case NORMKIT_MASK_NONE: count = 0; break;
    case NORMKIT_MASK_HW: count = a.H * a.W; break;
    case NORMKIT_MASK_CHW: count = a.C * a.H * a.W; break;
    case NORMKIT_MASK_BCHW: count = a.B * a.C * a.H * a.W; break;
    case NORMKIT_MASK_PHI_CHW: count = a.C * a.H_out * a.W_out; break;
    case NORMKIT_MASK_PHI_BCHW: count = a.B * a.C * a.H_out * a.W_out; break;
    default: throw nb::value_error((Name(op, "mask_kind") + " is not a mask kind").c_str());
  }
  if (mask_kind == NORMKIT_MASK_NONE && mask) {
    throw nb::value_error((Name(op, "mask") + " given with mask_kind 'none'").c_str());
  }
  const T* m =
      mask_kind == NORMKIT_MASK_NONE ? nullptr : ParamOf<T>(mask, count, op, "mask", x.device);
  if (mask_kind != NORMKIT_MASK_NONE && m == nullptr) {
    throw nb::value_error((Name(op, "mask") + " is missing for its mask_kind").c_str());
  }
  normkit_shift_sum_params_init(&a.params, step);
  a.params.axis = axis;
  a.params.scale = scale;
  a.params.mask_kind = mask_kind;
  a.params.mask = m;
  a.per_sample = mask_kind == NORMKIT_MASK_BCHW || mask_kind == NORMKIT_MASK_PHI_BCHW;
  return a;
}

// op: 0 A (x -> out = y), 1 A^T (x = y -> out = x), 2 pinv, 3 GAP step (x in place, y),
// 4 shift (x -> out = xs), 5 unshift (x = xs -> out = x). `x` is always the [B, C, H, W]
// side (its shape fixes the geometry), `other` the y / xs side.
void ShiftSumCall(int32_t which, const Array& x, const Array& other, int64_t step, int32_t axis,
                  double scale, const OptArray& mask, int32_t mask_kind, int32_t pinv_mode,
                  double lambda, double gamma, const OptArray& normalizer, int32_t layout,
                  const Context* ctx) {
  static const char* const kOps[] = {
      "shift_sum", "shift_sum_adjoint", "shift_sum_pinv", "shift_sum_gap_step", "shift", "unshift"};
  const char* op = kOps[which];
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  // y [B, 1, H', W'] is dense in both layouts: it takes x's tag (rank 3: channels-first).
  const normkit_tensor ot = TensorOf(other, other.ndim() == 4 ? xt.layout : -1, op,
                                     which == 4 || which == 5 ? "xs" : "y");
  const bool f64 = xt.dtype == NORMKIT_DTYPE_FLOAT64;
  const ShiftSumArgs a = f64 ? ShiftSumArgsOf<double>(op, xt, step, axis, scale, mask, mask_kind)
                             : ShiftSumArgsOf<float>(op, xt, step, axis, scale, mask, mask_kind);
  const int64_t phi = (a.per_sample ? a.B : 1) * a.H_out * a.W_out;
  const void* norm =
      f64 ? static_cast<const void*>(ParamOf<double>(normalizer, phi, op, "normalizer", xt.device))
          : static_cast<const void*>(ParamOf<float>(normalizer, phi, op, "normalizer", xt.device));
  const normkit_context* c = ContextOf(ctx);
  Call([&] {
    switch (which) {
      case 0: return normkit_shift_sum(c, &xt, &a.params, &ot);
      case 1: return normkit_shift_sum_adjoint(c, &ot, &a.params, &xt);
      case 2: return normkit_shift_sum_pinv(c, &ot, &a.params, pinv_mode, norm, &xt);
      case 3: return normkit_shift_sum_gap_step(c, &xt, &ot, &a.params, lambda, gamma, norm);
      case 4: return normkit_shift(c, &xt, &a.params, &ot);
      default: return normkit_unshift(c, &ot, &a.params, &xt);
    }
  });
}

// Phi_s for x's shape (x's data is not read), into `out` ([H', W'] or [B, H', W']).
void ShiftSumNormalizer(const Array& x, int64_t step, int32_t axis, double scale,
                        const OptArray& mask, int32_t mask_kind, const Array& out, int32_t layout,
                        const Context* ctx) {
  constexpr const char* op = "shift_sum_normalizer";
  const normkit_tensor xt = TensorOf(x, layout, op, "x");
  const bool f64 = xt.dtype == NORMKIT_DTYPE_FLOAT64;
  const ShiftSumArgs a = f64 ? ShiftSumArgsOf<double>(op, xt, step, axis, scale, mask, mask_kind)
                             : ShiftSumArgsOf<float>(op, xt, step, axis, scale, mask, mask_kind);
  const int64_t phi = (a.per_sample ? a.B : 1) * a.H_out * a.W_out;
  void* p = f64 ? static_cast<void*>(ParamOf<double>(OptArray(out), phi, op, "out", xt.device))
                : static_cast<void*>(ParamOf<float>(OptArray(out), phi, op, "out", xt.device));
  Call([&] { return normkit_shift_sum_normalizer(ContextOf(ctx), &xt, &a.params, p); });
}

}  // namespace

NB_MODULE(_normkit, m) {
  m.doc() = "normkit's C API for Python: zero-copy, the GIL released during calls.";
  // Contexts held by other modules' globals (normkit.torch) outlive this module at exit.
  nb::set_leak_warnings(false);
  nb::class_<Context>(
      m, "Context",
      "Threads for the calls made with it: num_threads of normkit's backend (0: the default),\n"
      "or, with parallel_for, at most num_threads tasks a loop on parallel_for(n, run),\n"
      "which must call run(i) once for each i in range(n) (from any threads) and return when\n"
      "they are done; run releases the GIL. Results are bitwise those of any other context.")
      .def(nb::init<int32_t, std::optional<nb::callable>>(), nb::arg("num_threads") = 0,
           nb::arg("parallel_for").none() = nb::none())
      .def_static(
          "from_c_parallel_for",
          [](int32_t num_threads, uintptr_t parallel_for, uintptr_t pool) {
            return new Context(num_threads, parallel_for, pool);
          },
          nb::arg("num_threads"), nb::arg("parallel_for"), nb::arg("pool") = 0,
          nb::rv_policy::take_ownership,
          "A context on a C parallel-for: `parallel_for` is the address of a\n"
          "normkit_parallel_for_fn (void (*)(void* pool, int64_t n, void (*task)(void*, "
          "int64_t),\nvoid* task_context)) and `pool` the pointer passed to it as its first "
          "argument.\nBoth must stay valid while the context is used.")
      .def_prop_ro("num_threads", &Context::num_threads)
      .def_prop_ro("parallel_for", &Context::parallel_for);
  m.def("version", [] { return std::string(normkit_version_string()); });
  m.def("simd_target", [] { return std::string(normkit_simd_target()); });
  m.def("threading_backend", [] { return std::string(normkit_threading_backend()); });
  m.def("cuda_device_count", [] { return normkit_cuda_device_count(); });
  m.def("affine", &Affine, nb::arg("x"), nb::arg("scale").none(), nb::arg("shift").none(),
        nb::arg("per_sample"), nb::arg("out"), nb::arg("layout"), nb::arg("context").none());
  m.def("batch_norm", &BatchNorm, nb::arg("x"), nb::arg("running_mean"), nb::arg("running_var"),
        nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps"), nb::arg("out"),
        nb::arg("layout"), nb::arg("context").none());
  m.def("batch_norm_training", &BatchNormTraining, nb::arg("x"), nb::arg("running_mean").none(),
        nb::arg("running_var").none(), nb::arg("weight").none(), nb::arg("bias").none(),
        nb::arg("momentum"), nb::arg("eps"), nb::arg("out"), nb::arg("save_mean").none(),
        nb::arg("save_rstd").none(), nb::arg("layout"), nb::arg("context").none());
  m.def("batch_norm_training_backward", &BatchNormTrainingBackward, nb::arg("x"), nb::arg("dy"),
        nb::arg("save_mean"), nb::arg("save_rstd"), nb::arg("weight").none(), nb::arg("dx").none(),
        nb::arg("grad_weight").none(), nb::arg("grad_bias").none(), nb::arg("layout"),
        nb::arg("context").none());
  m.def("batch_norm_fold", &BatchNormFold, nb::arg("running_mean"), nb::arg("running_var"),
        nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps"), nb::arg("scale"),
        nb::arg("shift"));
  m.def("fold_batch_norm_into_conv", &FoldIntoConv, nb::arg("weight"), nb::arg("bias").none(),
        nb::arg("folded_bias"), nb::arg("groups"), nb::arg("transposed"), nb::arg("running_mean"),
        nb::arg("running_var"), nb::arg("bn_weight").none(), nb::arg("bn_bias").none(),
        nb::arg("eps"));
  m.def("fold_batch_norm_into_linear", &FoldIntoLinear, nb::arg("weight"), nb::arg("bias").none(),
        nb::arg("folded_bias"), nb::arg("running_mean"), nb::arg("running_var"),
        nb::arg("bn_weight").none(), nb::arg("bn_bias").none(), nb::arg("eps"));
  m.def("group_norm", &GroupNorm, nb::arg("x"), nb::arg("groups"), nb::arg("weight").none(),
        nb::arg("bias").none(), nb::arg("eps"), nb::arg("activation"), nb::arg("out"),
        nb::arg("mean_out").none(), nb::arg("rstd_out").none(), nb::arg("layout"),
        nb::arg("context").none());
  m.def("shift_sum_call", &ShiftSumCall, nb::arg("which"), nb::arg("x"), nb::arg("other"),
        nb::arg("step"), nb::arg("axis"), nb::arg("scale"), nb::arg("mask").none(),
        nb::arg("mask_kind"), nb::arg("pinv_mode"), nb::arg("lambda_"), nb::arg("gamma"),
        nb::arg("normalizer").none(), nb::arg("layout"), nb::arg("context").none());
  m.def("shift_sum_normalizer", &ShiftSumNormalizer, nb::arg("x"), nb::arg("step"), nb::arg("axis"),
        nb::arg("scale"), nb::arg("mask").none(), nb::arg("mask_kind"), nb::arg("out"),
        nb::arg("layout"), nb::arg("context").none());
  m.def("row_norm", &RowNorm, nb::arg("x"), nb::arg("weight").none(), nb::arg("bias").none(),
        nb::arg("eps"), nb::arg("rms"), nb::arg("out"), nb::arg("mean_out").none(),
        nb::arg("rstd_out").none(), nb::arg("context").none());
  m.def("add_row_norm", &AddRowNorm, nb::arg("x"), nb::arg("residual"), nb::arg("add_bias").none(),
        nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps"), nb::arg("rms"),
        nb::arg("out"), nb::arg("h_out").none(), nb::arg("mean_out").none(),
        nb::arg("rstd_out").none(), nb::arg("context").none());
}
