/* SPDX-License-Identifier: Apache-2.0
 *
 * normkit: memory-speed normalization kernels for CPU inference.
 *
 * This header is the library's one stable ABI. Conventions:
 *  - Every operation returns a normkit_status. On failure, normkit_last_error()
 *    returns a message naming the argument and the values that were wrong, and
 *    no output byte has been written.
 *  - Tensors are described by normkit_tensor (dense, logical shape N, C, spatial...).
 *  - Per-channel parameters are float32 arrays of C values (or N x C, row-major,
 *    where an op says so).
 *  - Results are bitwise identical for every thread count and from run to run.
 *  - All functions are thread-safe: any number of threads may call normkit at
 *    once, on shared or separate contexts.
 */
#ifndef NORMKIT_NORMKIT_H_
#define NORMKIT_NORMKIT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(NORMKIT_BUILDING_LIBRARY)
#define NORMKIT_API __declspec(dllexport)
#elif defined(NORMKIT_STATIC)
#define NORMKIT_API
#else
#define NORMKIT_API __declspec(dllimport)
#endif
#else
#define NORMKIT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define NORMKIT_VERSION_MAJOR 0
#define NORMKIT_VERSION_MINOR 1
#define NORMKIT_VERSION_PATCH 0

/* ------------------------------------------------------------------------- */
/* Status codes                                                              */
/* ------------------------------------------------------------------------- */

typedef enum normkit_status {
  NORMKIT_SUCCESS = 0,
  /* An argument is NULL, out of range, or inconsistent with another. */
  NORMKIT_ERROR_INVALID_ARGUMENT = 1,
  /* Well-formed, but this op does not support it (dtype, layout, ...). */
  NORMKIT_ERROR_UNSUPPORTED = 2,
  /* The tensors name a device this build or this machine does not have. */
  NORMKIT_ERROR_DEVICE_UNAVAILABLE = 3,
  /* Scratch memory could not be allocated. CPU ops allocate before writing any output,
   * so every output is then as it was before the call. */
  NORMKIT_ERROR_OUT_OF_MEMORY = 4,
  /* A bug in normkit; please report it with the message. */
  NORMKIT_ERROR_INTERNAL = 5
} normkit_status;

/* A static, human-readable name for a status ("invalid argument", ...). Never NULL. */
NORMKIT_API const char* normkit_status_string(normkit_status status);

/* The message of the last failed call on this thread ("" if none yet). The pointer
 * stays valid until the next normkit call on the same thread. Never NULL. */
NORMKIT_API const char* normkit_last_error(void);

/* ------------------------------------------------------------------------- */
/* Library information                                                       */
/* ------------------------------------------------------------------------- */

/* Version as (major << 16) | (minor << 8) | patch; compare with NORMKIT_VERSION_*. */
NORMKIT_API uint32_t normkit_version(void);

/* Version as a string, e.g. "0.1.0". */
NORMKIT_API const char* normkit_version_string(void);

/* The SIMD target the CPU kernels dispatch to on this machine, e.g. "AVX3",
 * "AVX2", "SSE4", "EMU128". Chosen at first use from what the CPU supports. */
NORMKIT_API const char* normkit_simd_target(void);

/* The threading backend compiled in: "tbb", "openmp", "pool" or "serial". */
NORMKIT_API const char* normkit_threading_backend(void);

/* ------------------------------------------------------------------------- */
/* Contexts                                                                  */
/* ------------------------------------------------------------------------- */

/* The most threads a context may have. Each is an OS thread (OpenMP, pool backends)
 * or a TBB arena slot: more than the machine's hardware threads oversubscribe it. */
#define NORMKIT_MAX_THREADS 4096

/* A context caps the threads normkit uses for calls made with it. Every op takes
 * a `const normkit_context*`; NULL means the process default: the NORMKIT_NUM_THREADS
 * environment variable, read once at the first call, when it is a decimal integer in
 * [1, NORMKIT_MAX_THREADS] (spaces around it allowed); else (unset, empty, "0", "-3",
 * "4x", out of range) every hardware thread.
 * A context may be used by many threads at once; destroy it only when no call
 * using it is running. */
typedef struct normkit_context normkit_context;

/* Creates a context using at most `num_threads` threads (0 = the process
 * default). Errors: INVALID_ARGUMENT if `out` is NULL or num_threads is not in
 * [0, NORMKIT_MAX_THREADS]. */
NORMKIT_API normkit_status normkit_context_create(int32_t num_threads, normkit_context** out);

/* The host application's parallel-for (a framework's thread pool, as XNNPACK takes a
 * pthreadpool): it must call task(task_context, i) exactly once for every i in [0, n), on
 * any threads and in any order (the calling thread may take part), and return only when
 * all have returned. `pool` is what the host passed to
 * normkit_context_create_with_parallel_for. */
typedef void (*normkit_parallel_for_fn)(void* pool, int64_t n,
                                        void (*task)(void* task_context, int64_t i),
                                        void* task_context);

/* Creates a context whose calls run their parallel parts on the host's parallel-for
 * instead of normkit's threading backend: each loop asks it for at most `num_threads`
 * tasks (1 to NORMKIT_MAX_THREADS), each a contiguous run of normkit's blocks. The
 * blocks depend on the shape alone, so results are bitwise identical to those of any
 * other context. Calls on CUDA tensors ignore it. Errors: INVALID_ARGUMENT if `out` or
 * `parallel_for` is NULL or num_threads is not in [1, NORMKIT_MAX_THREADS]. */
NORMKIT_API normkit_status normkit_context_create_with_parallel_for(
    int32_t num_threads, normkit_parallel_for_fn parallel_for, void* pool, normkit_context** out);

/* Destroys a context. NULL is accepted and ignored. */
NORMKIT_API void normkit_context_destroy(normkit_context* context);

/* The thread count calls with this context use (NULL: the process default). */
NORMKIT_API int32_t normkit_context_num_threads(const normkit_context* context);

/* Sets the CUDA stream (a cudaStream_t passed as void*) on which calls with this
 * context run when their tensors are CUDA tensors; NULL (the initial value, and the
 * only stream of the NULL context) is the legacy default stream. Calls on CUDA tensors
 * are asynchronous with respect to the host, like cuDNN's: synchronize the stream
 * before reading results on the host. Set the stream before sharing the context
 * between threads. Errors: INVALID_ARGUMENT if `context` is NULL. */
NORMKIT_API normkit_status normkit_context_set_cuda_stream(normkit_context* context, void* stream);

/* The CUDA stream of `context` (NULL for the NULL context or when none was set). */
NORMKIT_API void* normkit_context_cuda_stream(const normkit_context* context);

/* The number of CUDA devices normkit can use: 0 when this build has no CUDA module,
 * or this machine has no NVIDIA driver or GPU. Never fails. */
NORMKIT_API int32_t normkit_cuda_device_count(void);

/* ------------------------------------------------------------------------- */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------- */

typedef enum normkit_dtype {
  NORMKIT_DTYPE_FLOAT32 = 1,
  /* The half dtypes: every op on the CPU; on CUDA every op but batch norm training and
   * the fused residual-add norms (CPU only). */
  NORMKIT_DTYPE_FLOAT16 = 2,  /* IEEE binary16 */
  NORMKIT_DTYPE_BFLOAT16 = 3, /* bfloat16 */
  NORMKIT_DTYPE_FLOAT64 = 4   /* the shift-sum family only */
} normkit_dtype;

typedef enum normkit_layout {
  /* N, C, spatial...: NCL, NCHW, NCDHW. Each (n, c) plane is contiguous. */
  NORMKIT_LAYOUT_CHANNELS_FIRST = 0,
  /* N, spatial..., C: NLC, NHWC, NDHWC. Channels of one pixel are contiguous. */
  NORMKIT_LAYOUT_CHANNELS_LAST = 1
} normkit_layout;

/* Where a tensor's data lives. In one call every tensor has the same device and
 * device_index (else INVALID_ARGUMENT), and every other array (parameters, masks,
 * normalizers, statistics outputs) lives there too: for CUDA tensors they are device
 * (or managed) pointers, checked with cudaPointerGetAttributes; host pointers are
 * rejected with INVALID_ARGUMENT. Pointers of CPU calls are not checked: passing
 * device memory to a CPU call is undefined.
 *
 * Calls on CUDA tensors: the same functions, rules and validation as on CPU. They
 * run on the context's stream (normkit_context_set_cuda_stream) and return before the
 * GPU has finished, like cuDNN calls; errors found by validation are returned at once,
 * and nothing is launched then. Results are deterministic run to run (no atomics) but
 * not bitwise equal to the CPU path's, except affine and batch norm on CPUs with FMA,
 * which compute the same fused multiply-add from the same folded parameters.
 * normkit_batch_norm_inference copies its C-float parameters to the host to validate and fold them,
 * which waits for the stream. Scratch memory (split group norms, pinv without a normalizer, the GAP
 * step) comes from cudaMallocAsync on the stream. */
typedef enum normkit_device {
  NORMKIT_DEVICE_CPU = 0,
  /* Runs on GPU `device_index` when the build has the CUDA module and the machine a
   * driver and that GPU (see normkit_cuda_device_count); else DEVICE_UNAVAILABLE. */
  NORMKIT_DEVICE_CUDA = 1
} normkit_device;

#define NORMKIT_MAX_RANK 5

/* A dense tensor. `shape` is always the logical order N, C, spatial...
 * (rank 2: N, C; rank 3: N, C, L; rank 4: N, C, H, W; rank 5: N, C, D, H, W);
 * `layout` says how those dims sit in memory. All dims must be >= 1.
 *
 * ABI: `struct_size` must be sizeof(normkit_tensor) as the caller compiled it
 * (normkit_tensor_init sets it). Later versions only append fields and read
 * them only when struct_size shows the caller has them, so binaries built
 * against this header keep working. A struct_size of 0 (a zeroed struct) is
 * rejected, which catches descriptors nobody initialized.
 * `data` (and every parameter array of a call) must be aligned to its element size
 * (4 bytes for float32, 8 for float64); any other offset is fine. A misaligned pointer
 * is rejected with INVALID_ARGUMENT naming it. */
typedef struct normkit_tensor {
  uint32_t struct_size;
  int32_t dtype;        /* normkit_dtype */
  int32_t layout;       /* normkit_layout */
  int32_t device;       /* normkit_device */
  int32_t device_index; /* which GPU for NORMKIT_DEVICE_CUDA; 0 for CPU */
  int32_t rank;         /* 2..5 */
  int64_t shape[NORMKIT_MAX_RANK];
  void* data;
} normkit_tensor;

/* The same as normkit_tensor_init below, as exported functions, for callers that cannot
 * use a static inline function or mirror the struct's layout (ctypes, C#, Java's FFM, Go,
 * Rust): allocate normkit_tensor_struct_size() bytes (8-byte aligned) and fill them with
 * normkit_tensor_set. `t` holds room for the whole struct; nothing is validated here
 * (the ops do that). normkit_tensor_set_device makes it a CUDA tensor. */
NORMKIT_API size_t normkit_tensor_struct_size(void);
NORMKIT_API void normkit_tensor_set(void* t, void* data, int32_t dtype, int32_t layout,
                                    int32_t rank, const int64_t* shape);
NORMKIT_API void normkit_tensor_set_device(void* t, int32_t device, int32_t device_index);

/* Fills a CPU tensor descriptor; shape has `rank` entries in logical order. */
static inline void normkit_tensor_init(normkit_tensor* t, void* data, normkit_dtype dtype,
                                       normkit_layout layout, int32_t rank, const int64_t* shape) {
  int32_t i;
  t->struct_size = (uint32_t)sizeof(normkit_tensor);
  t->dtype = (int32_t)dtype;
  t->layout = (int32_t)layout;
  t->device = (int32_t)NORMKIT_DEVICE_CPU;
  t->device_index = 0;
  t->rank = rank;
  for (i = 0; i < NORMKIT_MAX_RANK; ++i) t->shape[i] = (i < rank) ? shape[i] : 0;
  t->data = data;
}

/* ------------------------------------------------------------------------- */
/* Affine: y = x * scale + shift                                             */
/* ------------------------------------------------------------------------- */

typedef enum normkit_param_kind {
  /* scale / shift hold C values, one per channel. */
  NORMKIT_PARAMS_PER_CHANNEL = 0,
  /* scale / shift hold N x C values (row-major), one per sample and channel. */
  NORMKIT_PARAMS_PER_SAMPLE_CHANNEL = 1
} normkit_param_kind;

/* y[n, c, s] = x[n, c, s] * scale[c] + shift[c]   (PER_CHANNEL)
 * y[n, c, s] = x[n, c, s] * scale[n*C + c] + shift[n*C + c]   (PER_SAMPLE_CHANNEL)
 *
 * x, y: rank 2..5, either layout, identical layout and shape; each float32, bfloat16
 *   or float16 (CPU and CUDA tensors, the same bits): the same dtype, or one of them float32
 *   (widen, or normalize-and-narrow, in one pass). The math is float32 whatever the
 *   storage; a half y is the float32 result rounded to nearest even (NaN stays NaN,
 *   overflow gives Inf), so within one unit in its last place of the exact result
 *   rounded to it.
 * scale, shift: float32 arrays as `param_kind` says; either may be NULL (no scale
 *   means scale 1, no shift means shift 0; with both NULL, y is a copy of x).
 * In place: y->data == x->data is allowed (one dtype); any other overlap of x and y,
 *   or of scale / shift with y, is rejected.
 * Computed with one fused multiply-add per element where the CPU has FMA.
 * Errors: INVALID_ARGUMENT (NULL x / y / data, bad struct_size, rank, dims, layout,
 *   param_kind, shape mismatch, overlap, in place with two dtypes); UNSUPPORTED (a
 *   dtype or pair of dtypes other than the above); DEVICE_UNAVAILABLE (CUDA tensors
 *   without the CUDA module or a usable GPU). */
NORMKIT_API normkit_status normkit_affine(const normkit_context* context, const normkit_tensor* x,
                                          const float* scale, const float* shift,
                                          int32_t param_kind, const normkit_tensor* y);

/* ------------------------------------------------------------------------- */
/* Batch norm (inference)                                                    */
/* ------------------------------------------------------------------------- */

/* Folds inference batch norm into per-channel scale / shift, in float:
 *   scale[c] = gamma[c] / sqrt(var[c] + eps),  shift[c] = beta[c] - mean[c] * scale[c],
 * each addition, square root, division, product and difference correctly rounded
 * and none fused, so every SIMD target and the CUDA path give the same bits; scale
 * is within 2.5 * 2^-24 relative of the exact value. (normkit_batch_norm_inference
 * applies exactly these scale / shift.)
 * gamma / beta may be NULL (1 / 0: BatchNorm without affine). mean and var are
 * required. scale and shift are outputs of `channels` floats; each may be the very
 * same array as any input (all of a channel's inputs are read before its outputs are
 * written), but must not partially overlap one. The folded form cancels when a running
 * mean is large next to its standard deviation: shift carries a float ulp of
 * mean * scale, so x * scale + shift is off by about 2^-24 * |mean| / sqrt(var + eps)
 * in units of |gamma| (normkit_batch_norm_inference avoids this; see there).
 * Errors: INVALID_ARGUMENT (channels < 1, NULL mean / var / scale / shift, eps not
 *   finite or <= 0, a negative or non-finite var[c], scale overlapping shift). */
NORMKIT_API normkit_status normkit_batch_norm_fold(int64_t channels, const float* gamma,
                                                   const float* beta, const float* running_mean,
                                                   const float* running_var, float eps,
                                                   float* scale, float* shift);

/* y = (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c], in one pass over x.
 * When every channel has |mean| <= 64 * sqrt(var + eps) this is the folded affine (the
 * scale / shift of normkit_batch_norm_fold, one FMA per element); otherwise the mean
 * is subtracted first, y = (x - mean) * scale + beta, at the same speed. Either way
 * the result is within 1e-5 of the output's scale (|gamma| + |beta|) of the exact
 * value, for any ratio of mean to standard deviation.
 * x, y: as for normkit_affine (float32, bfloat16 or float16 in the same pairs, rank
 *   2..5, either layout, in place allowed). gamma / beta may be NULL; mean / var are C
 *   floats; none of them may overlap y.
 * CUDA tensors: the parameters are device arrays, folded on the device; this call waits
 *   for the context's stream, to check running_var (and, for the choice above,
 *   running_mean) on the host before y is written. To apply the same batch norm many times
 *   without that wait, fold it once with normkit_batch_norm_fold and call normkit_affine
 *   (exact to 1e-5 while |mean| <= 64 std, see there).
 * Errors: those of normkit_batch_norm_fold and normkit_affine. */
NORMKIT_API normkit_status normkit_batch_norm_inference(
    const normkit_context* context, const normkit_tensor* x, const float* gamma, const float* beta,
    const float* running_mean, const float* running_var, float eps, const normkit_tensor* y);

/* Batch norm in training mode, the forward pass (PyTorch's F.batch_norm with
 * training=True): for each channel c, the mean and the biased variance of x over the batch
 * and the spatial positions (n = N * spatial values, at least 2), then
 *   y = (x - mean[c]) * rstd[c] * gamma[c] + beta[c],  rstd = 1 / sqrt(var + eps),
 *   running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean[c],
 *   running_var[c]  = (1 - momentum) * running_var[c]  + momentum * var[c] * n / (n - 1)
 * (the unbiased variance, as PyTorch keeps it). save_mean / save_rstd receive mean and
 * rstd (the backward pass's saved statistics). The statistics are computed in double
 * from block moments merged in a fixed order (exact for a mean far from the spread; past
 * FLT_MAX or with NaN / Inf, from the values again in double), so every output is
 * bitwise the same for any thread count; the running averages and the saved statistics
 * are computed in double and rounded once.
 * x, y: CPU tensors of one shape and layout, rank 2..5 (NCHW... or NHWC...), y may be x
 *   (in place, one dtype). Dtypes: float32, bfloat16 or float16, x and y the same or one
 *   of them float32; a half x is read in its own bytes and widened exactly, a half y is the
 *   float32 result rounded to nearest even: the bits of the float32 call on x's widened
 *   values, rounded. The arrays stay float32. gamma / beta: C floats or NULL (1 and 0);
 *   running_mean / running_var:
 *   C floats each, both or neither (NULL: not updated); save_mean / save_rstd: C floats or
 *   NULL. momentum: in [0, 1]. The outputs may overlap nothing; gamma / beta may not
 *   overlap y.
 * Errors: INVALID_ARGUMENT (descriptors, fewer than 2 values per channel, eps, momentum,
 *   one of running_mean / running_var NULL, overlaps, misaligned arrays, y in place on x
 *   with another dtype); UNSUPPORTED (float64, two different half dtypes, CUDA tensors).
 *   Nothing is written on error. */
NORMKIT_API normkit_status normkit_batch_norm_training(const normkit_context* context,
                                                       const normkit_tensor* x, const float* gamma,
                                                       const float* beta, float eps, float momentum,
                                                       float* running_mean, float* running_var,
                                                       const normkit_tensor* y, float* save_mean,
                                                       float* save_rstd);

/* Batch norm in training mode, the backward pass (PyTorch's batch_norm backward with
 * training=True, from the forward's saved statistics): with n = N * spatial values a
 * channel and xhat = (x - save_mean[c]) * save_rstd[c],
 *   grad_beta[c]  = sum(dy),   grad_gamma[c] = sum(dy * xhat),
 *   dx = gamma[c] * save_rstd[c] * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n)
 * (the sums over the channel's n values). The sums are computed in double from block
 * sums merged in a fixed order, so every output is bitwise the same for any thread count;
 * grad_gamma / grad_beta are rounded once. dx is computed in float from five per-channel
 * coefficients; a channel whose float values could overflow on the way (values near
 * FLT_MAX, NaN / Inf) is computed in double.
 * x, dy, dx: CPU tensors of one shape, layout and dtype (float32, bfloat16 or float16:
 *   half values widened exactly, a half dx the float32 result rounded to nearest even),
 *   rank 2..5 (NCHW... or NHWC...); dx may be NULL (only the parameter gradients), x, dy,
 *   or memory disjoint from both.
 *   save_mean / save_rstd: C floats (normkit_batch_norm_training's save_mean / save_rstd),
 *   required. gamma: C floats or NULL (1). grad_gamma / grad_beta: C floats or NULL (not
 *   computed); they may overlap nothing; no array may overlap dx.
 * Errors: INVALID_ARGUMENT (descriptors, dy or dx unlike x, save_mean / save_rstd NULL,
 *   overlaps, misaligned arrays); UNSUPPORTED (float64, CUDA tensors). Nothing is written
 *   on error. */
NORMKIT_API normkit_status normkit_batch_norm_training_backward(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* dy,
    const float* save_mean, const float* save_rstd, const float* gamma, const normkit_tensor* dx,
    float* grad_gamma, float* grad_beta);

/* ------------------------------------------------------------------------- */
/* Folding batch norm into the preceding layer                              */
/* ------------------------------------------------------------------------- */

typedef enum normkit_conv_weight_order {
  /* Convolution: [out_channels, in_channels / groups, k...] (PyTorch Conv*d, OIHW). */
  NORMKIT_CONV_WEIGHT_OIHW = 0,
  /* Transposed convolution: [in_channels, out_channels / groups, k...]
   * (PyTorch ConvTranspose*d, IOHW). */
  NORMKIT_CONV_WEIGHT_IOHW_TRANSPOSED = 1
} normkit_conv_weight_order;

/* Rewrites a convolution followed by BatchNorm (over the conv's out channels)
 * into one convolution:  weight'[o, ...] = weight[o, ...] * scale[o],
 *                        bias'[o] = bias[o] * scale[o] + shift[o]
 * with scale = gamma / sqrt(var + eps), shift = beta - mean * scale computed in
 * double (the fold runs once per model, so each weight is rounded once: closer than
 * normkit_batch_norm_fold's float scale, not bit for bit it). `bias` may be NULL (a conv
 * without bias gets one: bias' = shift). `weight` is updated in place; `folded_bias`
 * receives out_channels floats and may equal `bias`.
 * kernel_elems is the product of the kernel's spatial dims (1 for 1x1 or linear).
 * groups divides in_channels and out_channels (groups == in_channels ==
 * out_channels is depthwise). folded_bias may also be the very same array as gamma,
 * beta, running_mean or running_var (all are read before anything is written).
 * Errors: INVALID_ARGUMENT (NULL weight / folded_bias / mean / var, dims < 1, groups
 *   not dividing the channels, bad weight_order, bad eps or var, overflowing sizes,
 *   folded_bias partially overlapping bias or a BN parameter, weight overlapping any
 *   other array). Nothing is written on error. */
NORMKIT_API normkit_status normkit_fold_batch_norm_into_conv(
    float* weight, int64_t out_channels, int64_t in_channels, int64_t groups, int64_t kernel_elems,
    int32_t weight_order, const float* bias, float* folded_bias, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var, float eps);

/* Linear layer [out_features, in_features] followed by BatchNorm1d over its
 * outputs; the same rule as normkit_fold_batch_norm_into_conv with one group and a
 * 1-element kernel. */
NORMKIT_API normkit_status normkit_fold_batch_norm_into_linear(
    float* weight, int64_t out_features, int64_t in_features, const float* bias, float* folded_bias,
    const float* gamma, const float* beta, const float* running_mean, const float* running_var,
    float eps);

/* ------------------------------------------------------------------------- */
/* Group norm, instance norm, layer norm, RMS norm                           */
/* ------------------------------------------------------------------------- */

/* Activation applied after the affine of a normalization (saves a pass over y). */
typedef enum normkit_activation {
  NORMKIT_ACTIVATION_NONE = 0,
  NORMKIT_ACTIVATION_RELU = 1, /* max(v, 0); NaN stays NaN */
  NORMKIT_ACTIVATION_SILU = 2  /* v * sigmoid(v) = v / (1 + exp(-v)) */
} normkit_activation;

/* Group normalization (inference and training forward):
 *   y[n, c, s] = act((x[n, c, s] - mean[n, g]) * rstd[n, g] * gamma[c] + beta[c]),
 *   g = c / (C / groups), mean and biased variance over the group's C/groups
 *   channels and all spatial positions, rstd = 1 / sqrt(var + eps).
 * x, y: float32, rank 2..5, either layout, same layout / shape; y may be x (in place),
 *   no other overlap. Also bfloat16 / float16 (CPU), in normkit_affine's pairs: a half x
 *   gives exactly the float32 result of its values (each widened exactly as it is loaded,
 *   the float32 plan's arithmetic), a half y that result rounded to nearest even. Parameters and
 *   mean_out / rstd_out stay float32.
 * groups: >= 1 and divides C. gamma, beta: C floats or NULL (1 / 0).
 * eps: finite and > 0. activation: a normkit_activation.
 * mean_out, rstd_out: N x groups floats (row-major) receiving the statistics, or
 *   NULL; they must not overlap x, y, gamma, beta or each other.
 * Statistics are exact in float32 terms (block moments in double merged with Chan's
 * formula, never E[x^2] - E[x]^2) and bitwise identical for any thread count. A
 * constant group gives beta (variance 0), never NaN; NaN or Inf in a group reaches
 * only that group's outputs. Reads x from memory once when a group (channels-first)
 * or a sample (channels-last) fits in 1 MiB, otherwise twice.
 * Errors: INVALID_ARGUMENT (NULL x / y / data, descriptor, shape mismatch, groups,
 *   eps, activation, overlap, in place with two dtypes); UNSUPPORTED (float64, two
 *   different half dtypes);
 *   DEVICE_UNAVAILABLE (CUDA tensors without a usable GPU). Nothing is written on error. */
NORMKIT_API normkit_status normkit_group_norm(const normkit_context* context,
                                              const normkit_tensor* x, int64_t groups,
                                              const float* gamma, const float* beta, float eps,
                                              int32_t activation, const normkit_tensor* y,
                                              float* mean_out, float* rstd_out);

/* Instance normalization: normkit_group_norm with groups = C (statistics per sample
 * and channel over the spatial positions); mean_out / rstd_out hold N x C floats. */
NORMKIT_API normkit_status normkit_instance_norm(const normkit_context* context,
                                                 const normkit_tensor* x, const float* gamma,
                                                 const float* beta, float eps, int32_t activation,
                                                 const normkit_tensor* y, float* mean_out,
                                                 float* rstd_out);

/* Layer normalization over C and all spatial positions of each sample, with
 * per-channel gamma / beta: normkit_group_norm with groups = 1 (PyTorch's
 * nn.GroupNorm(1, C)); mean_out / rstd_out hold N floats. */
NORMKIT_API normkit_status normkit_channel_layer_norm(const normkit_context* context,
                                                      const normkit_tensor* x, const float* gamma,
                                                      const float* beta, float eps,
                                                      int32_t activation, const normkit_tensor* y,
                                                      float* mean_out, float* rstd_out);

/* Layer normalization over the last dimension of a row-major [rows, D] tensor (the
 * transformer form; describe [B, T, D] as rank 2 [B*T, D], either layout tag):
 *   y[r, d] = (x[r, d] - mean[r]) * rstd[r] * gamma[d] + beta[d].
 * gamma, beta: D floats or NULL. mean_out, rstd_out: `rows` floats or NULL.
 * x, y: also bfloat16 / float16 (CPU), in normkit_affine's pairs: a half x gives exactly
 *   the float32 result of its values (widened exactly as they are loaded), a half y that
 *   result rounded to nearest even.
 * Other rules as for normkit_group_norm (rank must be 2). */
NORMKIT_API normkit_status normkit_layer_norm(const normkit_context* context,
                                              const normkit_tensor* x, const float* gamma,
                                              const float* beta, float eps, const normkit_tensor* y,
                                              float* mean_out, float* rstd_out);

/* RMS normalization over the last dimension of a [rows, D] tensor:
 *   y[r, d] = x[r, d] * rstd[r] * gamma[d],  rstd = 1 / sqrt(mean(x[r, :]^2) + eps).
 * gamma: D floats or NULL. rstd_out: `rows` floats or NULL. Rules as normkit_layer_norm. */
NORMKIT_API normkit_status normkit_rms_norm(const normkit_context* context, const normkit_tensor* x,
                                            const float* gamma, float eps, const normkit_tensor* y,
                                            float* rstd_out);

/* Residual add fused with layer norm (a transformer block's "add & norm"):
 *   h[r, d] = (x[r, d] + residual[r, d]) + bias[d]      (each add rounded to float,
 *                                                        then to x's dtype),
 *   y[r, d] = (h[r, d] - mean[r]) * rstd[r] * gamma[d] + beta[d],
 * reading x and residual once and writing y (and h, when h_out is given: the next
 * block's residual) once; h stays in cache between the two. The statistics and y are
 * bitwise those of normkit_layer_norm on h as stored (a half h: the float sum rounded to
 * nearest even, as a framework's add in that dtype stores it), whether or not h_out is
 * given.
 * x, residual, h_out: CPU tensors of one dtype (float32, bfloat16 or float16) and one
 *   shape [rows, D] (rank 2); y: the same shape, in normkit_affine's dtype pairs with x
 *   (x's dtype, or float32 with a half x, or a half y with a float32 x). h_out may be
 *   NULL. Each output may be an input itself (y->data == x->data or residual->data with
 *   one dtype, likewise h_out) but must not otherwise overlap one; y and h_out must not
 *   overlap. x and residual may be the same array.
 * bias, gamma, beta: D floats or NULL (0, 1, 0); mean_out, rstd_out: `rows` floats or
 *   NULL. None may overlap an output.
 * Errors: INVALID_ARGUMENT (as normkit_layer_norm, for residual and h_out too, and the
 *   overlaps above, in place with two dtypes); UNSUPPORTED (float64, CUDA tensors: CPU only
 *   for now). Nothing is written on error. */
NORMKIT_API normkit_status normkit_add_layer_norm(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* residual,
    const float* bias, const float* gamma, const float* beta, float eps, const normkit_tensor* y,
    const normkit_tensor* h_out, float* mean_out, float* rstd_out);

/* Residual add fused with RMS norm: h = (x + residual) + bias as in
 * normkit_add_layer_norm, y[r, d] = h[r, d] * rstd[r] * gamma[d],
 * rstd = 1 / sqrt(mean(h[r, :]^2) + eps). Rules as normkit_add_layer_norm. */
NORMKIT_API normkit_status normkit_add_rms_norm(const normkit_context* context,
                                                const normkit_tensor* x,
                                                const normkit_tensor* residual, const float* bias,
                                                const float* gamma, float eps,
                                                const normkit_tensor* y,
                                                const normkit_tensor* h_out, float* rstd_out);

/* ------------------------------------------------------------------------- */
/* Shift-sum: the coded-aperture spectral imaging (CASSI) operators          */
/* ------------------------------------------------------------------------- */

/* x is [B, C, H, W] (rank 4, channels-first, or channels-last [B, H, W, C]); channel
 * c is offset by c*S + o along the shift axis, o = (C-1) * max(0, -S) so that every
 * offset is >= 0 (for S >= 0 channel 0 stays). Along W, y is [B, H, W'] with
 * W' = W + (C-1)|S|; along H, y is [B, H', W] with H' = H + (C-1)|S|. y is given as a
 * rank-4 [B, 1, H', W'] or a rank-3 channels-first [B, H', W'] descriptor.
 * Dtypes: x, y and xs float32 or float64, all of one call alike, masks and normalizers
 * of that dtype. Or, on CPU, x and y (xs) bfloat16 / float16 in the pairs of the other ops
 * (one half dtype, or one side float32), with float32 masks, normalizers and Phi_s: the
 * math is float32, chunks of samples widened into a float scratch (about the cost of
 * the float32 call today, not yet half of it), the half output the float32 result
 * rounded to nearest even. On CUDA the same pairs: the channels-first operators along W
 * read and write half as stored, the rest run the float32 kernels on chunks of samples
 * widened on the device; bitwise the float32 CUDA call on the widened values, rounded. */

typedef enum normkit_shift_axis {
  NORMKIT_SHIFT_ALONG_W = 0, /* the usual CASSI dispersion along columns */
  NORMKIT_SHIFT_ALONG_H = 1  /* dispersion along rows (e.g. deepinv's default) */
} normkit_shift_axis;

/* How the mask M is given (always channels-first, whatever x's layout). */
typedef enum normkit_mask_kind {
  NORMKIT_MASK_NONE = 0,    /* no mask: the plain shift-and-sum */
  NORMKIT_MASK_HW = 1,      /* [H, W], applied before shifting, shared by all channels */
  NORMKIT_MASK_CHW = 2,     /* [C, H, W], per channel, before shifting */
  NORMKIT_MASK_BCHW = 3,    /* [B, C, H, W], per sample and channel, before shifting */
  NORMKIT_MASK_PHI_CHW = 4, /* Phi [C, H', W'] in the shifted domain (e.g. mask_3d_shift) */
  NORMKIT_MASK_PHI_BCHW = 5 /* Phi [B, C, H', W'] in the shifted domain */
} normkit_mask_kind;

/* Parameters shared by the shift-sum calls. Initialize with
 * normkit_shift_sum_params_init; fields are only appended in later versions. */
typedef struct normkit_shift_sum_params {
  uint32_t struct_size; /* sizeof(normkit_shift_sum_params) of the caller's header */
  int32_t axis;         /* normkit_shift_axis */
  int64_t step;         /* S, negative allowed; (C-1)*|S| must fit int64 (C = 1: any S) */
  double scale;         /* s, multiplies A and A^T (1 by default; 2/C is common) */
  int32_t mask_kind;    /* normkit_mask_kind */
  const void* mask;     /* mask data (float64 x: float64, else float32), NULL for NONE */
} normkit_shift_sum_params;

/* Exported equivalents for callers that cannot mirror the struct (see
 * normkit_tensor_set): normkit_shift_sum_params_set fills every field. */
NORMKIT_API size_t normkit_shift_sum_params_struct_size(void);
NORMKIT_API void normkit_shift_sum_params_set(void* p, int64_t step, int32_t axis, double scale,
                                              int32_t mask_kind, const void* mask);

static inline void normkit_shift_sum_params_init(normkit_shift_sum_params* p, int64_t step) {
  p->struct_size = (uint32_t)sizeof(normkit_shift_sum_params);
  p->axis = (int32_t)NORMKIT_SHIFT_ALONG_W;
  p->step = step;
  p->scale = 1.0;
  p->mask_kind = (int32_t)NORMKIT_MASK_NONE;
  p->mask = 0;
}

/* Forward operator A:  y[b, h, w'] = s * sum_c M_c[h, w] * x[b, c, h, w],  w' = w + c*S + o
 * (along W; rows instead of columns along H). With a Phi mask the product uses
 * Phi_c[h, w'] instead of M_c[h, w]. Each y row is one task summing channels in
 * order: bitwise identical for any thread count. Reads x once, writes y once.
 * Errors: INVALID_ARGUMENT (descriptors, shapes inconsistent with C, S, W', params,
 *   mask missing or overlapping y, y overlapping x); UNSUPPORTED (dtype other than
 *   float32 / float64); DEVICE_UNAVAILABLE. Nothing is written on error. */
NORMKIT_API normkit_status normkit_shift_sum(const normkit_context* context,
                                             const normkit_tensor* x,
                                             const normkit_shift_sum_params* params,
                                             const normkit_tensor* y);

/* Adjoint A^T:  x[b, c, h, w] = s * M_c[h, w] * y[b, h, w + c*S + o]; without a mask the
 * plain window extraction ("shift back"). <A x, y> = <x, A^T y>. */
NORMKIT_API normkit_status normkit_shift_sum_adjoint(const normkit_context* context,
                                                     const normkit_tensor* y,
                                                     const normkit_shift_sum_params* params,
                                                     const normkit_tensor* x);

/* Normalizer Phi_s[h, w'] = sum_c Phi_c[h, w']^2 over the positions channel c covers
 * (the diagonal of A A^T is s^2 Phi_s); without a mask, the count of channels covering
 * each position (the alpha of coded-aperture reconstruction codes). x gives the shape only: its
 * data is not read and may be NULL. phi_s: [H', W'] values (float64 for float64 x, else
 * float32), or [B, H', W'] for per-sample masks. */
NORMKIT_API normkit_status normkit_shift_sum_normalizer(const normkit_context* context,
                                                        const normkit_tensor* x,
                                                        const normkit_shift_sum_params* params,
                                                        void* phi_s);

typedef enum normkit_pinv_mode {
  /* x = A^T(y / (s^2 Phi_s)), the Moore-Penrose pseudo-inverse; positions no channel
   * covers (Phi_s = 0) give 0, never NaN. */
  NORMKIT_PINV_MOORE_PENROSE = 0,
  /* The pseudo-inverse of coded-aperture reconstruction codes: x_c = window_c(y / (s * alpha)) /
   * M_c with alpha the count of covering channels; pixels where the mask is 0 give 0 rather than
   * 0/0. */
  NORMKIT_PINV_DIVIDE_BY_MASK = 1
} normkit_pinv_mode;

/* Pseudo-inverse of A (see normkit_pinv_mode). normalizer: Phi_s as returned by
 * normkit_shift_sum_normalizer, or NULL to compute it on the fly (MOORE_PENROSE); must
 * be NULL with DIVIDE_BY_MASK (INVALID_ARGUMENT otherwise). */
NORMKIT_API normkit_status normkit_shift_sum_pinv(const normkit_context* context,
                                                  const normkit_tensor* y,
                                                  const normkit_shift_sum_params* params,
                                                  int32_t mode, const void* normalizer,
                                                  const normkit_tensor* x);

/* Fused GAP / ADMM data-consistency step, in place on x:
 *   x <- x + lambda * A^T((y - A x) / (s^2 Phi_s + gamma))
 * (positions where s^2 Phi_s + gamma = 0 contribute 0; s^2 Phi_s is the diagonal of A A^T,
 * so one step from x = 0 with lambda = 1, gamma = 0 is the Moore-Penrose pinv for any s).
 * normalizer: Phi_s or NULL (computed on the fly). Along W each x row is read once and
 * written once; along H x is read twice. lambda, gamma: finite. */
NORMKIT_API normkit_status normkit_shift_sum_gap_step(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* y,
    const normkit_shift_sum_params* params, double lambda, double gamma, const void* normalizer);

/* The zero-padded stack of shifted channels: xs[b, c, h, w + c*S + o] = x[b, c, h, w]
 * (along W), xs is [B, C, H', W'] in x's layout; the mask and scale of `params` are
 * not used. normkit_unshift cuts the windows back out (xs -> x). */
NORMKIT_API normkit_status normkit_shift(const normkit_context* context, const normkit_tensor* x,
                                         const normkit_shift_sum_params* params,
                                         const normkit_tensor* xs);
NORMKIT_API normkit_status normkit_unshift(const normkit_context* context, const normkit_tensor* xs,
                                           const normkit_shift_sum_params* params,
                                           const normkit_tensor* x);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NORMKIT_NORMKIT_H_ */
