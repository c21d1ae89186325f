# SPDX-License-Identifier: Apache-2.0
"""normkit: memory-speed normalization kernels for CPU inference.

Every op takes numpy arrays or any DLPack tensor on the CPU (PyTorch tensors in either
memory format) without copying them, writes into ``out`` when given (``out=x`` is in
place) or into a new array of x's kind and layout, and raises TypeError / ValueError
with normkit's message for a wrong dtype, layout or shape. The GIL is released while a
call runs. Results are bitwise identical for any thread count.
"""
from ._normkit import Context, cuda_device_count, simd_target, threading_backend, version
from ._ops import (
    add_layer_norm,
    add_rms_norm,
    affine,
    batch_norm,
    batch_norm_fold,
    batch_norm_training,
    batch_norm_training_backward,
    channel_layer_norm,
    fold_batch_norm_into_conv,
    fold_batch_norm_into_linear,
    group_norm,
    instance_norm,
    layer_norm,
    rms_norm,
    shift,
    shift_sum,
    shift_sum_adjoint,
    shift_sum_gap_step,
    shift_sum_normalizer,
    shift_sum_pinv,
    unshift,
)

__version__ = version()
__all__ = [
    "Context",
    "add_layer_norm",
    "add_rms_norm",
    "affine",
    "batch_norm",
    "batch_norm_fold",
    "batch_norm_training",
    "batch_norm_training_backward",
    "channel_layer_norm",
    "cuda_device_count",
    "fold_batch_norm_into_conv",
    "fold_batch_norm_into_linear",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "rms_norm",
    "shift",
    "shift_sum",
    "shift_sum_adjoint",
    "shift_sum_gap_step",
    "shift_sum_normalizer",
    "shift_sum_pinv",
    "simd_target",
    "threading_backend",
    "unshift",
]
