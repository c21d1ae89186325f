# SPDX-License-Identifier: Apache-2.0
"""The ops: outputs allocated here (like x: numpy for numpy, torch for torch, same
memory format), everything else checked and run by the extension."""
from __future__ import annotations

from typing import Optional

from . import _normkit

_LAYOUTS = {None: -1, "channels_first": 0, "nchw": 0, "channels_last": 1, "nhwc": 1}
_ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "silu": 2}


def _layout(layout) -> int:
    try:
        return _LAYOUTS[layout if layout is None else str(layout).lower()]
    except KeyError:
        raise ValueError(
            f"layout must be None, 'channels_first' or 'channels_last', not {layout!r}"
        ) from None


def _activation(activation) -> int:
    try:
        return _ACTIVATIONS[activation if activation is None else str(activation).lower()]
    except KeyError:
        raise ValueError(f"activation must be None, 'relu' or 'silu', not {activation!r}") from None


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _empty_like(x):
    """A new array of x's kind, dtype, shape and memory layout."""
    if _is_torch(x):
        import torch

        return torch.empty_like(x)  # preserve_format: the same strides for a dense x
    import numpy as np

    return np.empty_like(x)  # order 'K': the same memory layout


def _empty(x, shape):
    if _is_torch(x):
        return x.new_empty(tuple(shape))
    import numpy as np

    return np.empty(tuple(shape), dtype=x.dtype)


def affine(x, scale=None, shift=None, *, per_sample: bool = False, out=None, layout=None,
           context: Optional[_normkit.Context] = None):
    """y = x * scale + shift per channel (or per sample and channel with per_sample=True);
    scale / shift may be None. Returns out."""
    out = _empty_like(x) if out is None else out
    _normkit.affine(x, scale, shift, per_sample, out, _layout(layout), context)
    return out


def batch_norm(x, running_mean, running_var, weight=None, bias=None, eps: float = 1e-5, *,
               out=None, layout=None, context: Optional[_normkit.Context] = None):
    """Inference batch norm over dim 1 (torch.nn.functional.batch_norm with training=False)."""
    out = _empty_like(x) if out is None else out
    _normkit.batch_norm(x, running_mean, running_var, weight, bias, float(eps), out,
                        _layout(layout), context)
    return out


def batch_norm_fold(running_mean, running_var, weight=None, bias=None, eps: float = 1e-5, *,
                    scale=None, shift=None):
    """(scale, shift) with batch_norm(x) == x * scale + shift per channel."""
    scale = _empty_like(running_mean) if scale is None else scale
    shift = _empty_like(running_mean) if shift is None else shift
    _normkit.batch_norm_fold(running_mean, running_var, weight, bias, float(eps), scale, shift)
    return scale, shift


def fold_batch_norm_into_conv(weight, bias, running_mean, running_var, bn_weight=None,
                              bn_bias=None, eps: float = 1e-5, *, groups: int = 1,
                              transposed: bool = False, folded_bias=None):
    """Rewrites a conv's weight in place so that conv followed by the batch norm equals the
    conv alone with the returned bias (a new array unless folded_bias is given; it may be
    bias itself). weight: OIHW ([out, in / groups, k...]) or, transposed, IOHW."""
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    folded_bias = _empty(weight, (out_channels,)) if folded_bias is None else folded_bias
    _normkit.fold_batch_norm_into_conv(weight, bias, folded_bias, int(groups), bool(transposed),
                                       running_mean, running_var, bn_weight, bn_bias, float(eps))
    return folded_bias


def fold_batch_norm_into_linear(weight, bias, running_mean, running_var, bn_weight=None,
                                bn_bias=None, eps: float = 1e-5, *, folded_bias=None):
    """As fold_batch_norm_into_conv for a linear layer's [out, in] weight."""
    folded_bias = _empty(weight, (weight.shape[0],)) if folded_bias is None else folded_bias
    _normkit.fold_batch_norm_into_linear(weight, bias, folded_bias, running_mean, running_var,
                                         bn_weight, bn_bias, float(eps))
    return folded_bias


def _group_norm(x, groups, weight, bias, eps, activation, out, mean_out, rstd_out, layout,
                context):
    out = _empty_like(x) if out is None else out
    _normkit.group_norm(x, int(groups), weight, bias, float(eps), _activation(activation), out,
                        mean_out, rstd_out, _layout(layout), context)
    return out


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5, *,
               activation=None, out=None, mean_out=None, rstd_out=None, layout=None,
               context: Optional[_normkit.Context] = None):
    """torch.nn.functional.group_norm, with an optional fused activation ('relu', 'silu')
    and optional [N, G] float32 mean / rstd outputs."""
    if int(num_groups) < 1:
        raise ValueError(f"group_norm: num_groups = {num_groups}, must be >= 1")
    return _group_norm(x, num_groups, weight, bias, eps, activation, out, mean_out, rstd_out,
                       layout, context)


def instance_norm(x, weight=None, bias=None, eps: float = 1e-5, *, activation=None, out=None,
                  mean_out=None, rstd_out=None, layout=None,
                  context: Optional[_normkit.Context] = None):
    """Instance norm (group norm with one channel a group), affine when weight / bias given."""
    return _group_norm(x, 0, weight, bias, eps, activation, out, mean_out, rstd_out, layout,
                       context)


def channel_layer_norm(x, weight=None, bias=None, eps: float = 1e-5, *, activation=None,
                       out=None, mean_out=None, rstd_out=None, layout=None,
                       context: Optional[_normkit.Context] = None):
    """Layer norm over C and space with per-channel weight / bias (nn.GroupNorm(1, C))."""
    return _group_norm(x, -1, weight, bias, eps, activation, out, mean_out, rstd_out, layout,
                       context)


def _rows(x, d, name):
    """x as [rows, d], a view (never a copy: an output written through a copy would be lost)."""
    if x.ndim < 1 or x.shape[-1] != d:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected [..., {d}]")
    dense = x.is_contiguous() if _is_torch(x) else x.flags.c_contiguous
    if not dense:
        raise ValueError(f"{name} must be contiguous (use .contiguous() or np.ascontiguousarray)")
    if x.ndim == 2:
        return x
    return x.view(-1, d) if _is_torch(x) else x.reshape(-1, d)


def _row_norm(x, weight, bias, eps, rms, out, mean_out, rstd_out, context):
    d = x.shape[-1]
    out = _empty_like(x) if out is None else out
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(x.shape)}")
    _normkit.row_norm(_rows(x, d, "x"), weight, bias, float(eps), rms, _rows(out, d, "out"),
                      mean_out, rstd_out, context)
    return out


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, *, out=None, mean_out=None,
               rstd_out=None, context: Optional[_normkit.Context] = None):
    """Layer norm over the last dimension (torch.nn.functional.layer_norm with
    normalized_shape = x.shape[-1:]); x of any rank, dense in its last dimension."""
    return _row_norm(x, weight, bias, eps, False, out, mean_out, rstd_out, context)


def rms_norm(x, weight=None, eps: float = 1e-6, *, out=None, rstd_out=None,
             context: Optional[_normkit.Context] = None):
    """RMS norm over the last dimension (torch.nn.functional.rms_norm)."""
    return _row_norm(x, weight, None, eps, True, out, None, rstd_out, context)
