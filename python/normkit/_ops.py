# SPDX-License-Identifier: Apache-2.0
"""The ops: outputs allocated here (like x: numpy for numpy, torch for torch, same
memory format), everything else checked and run by the extension."""
from __future__ import annotations

import sys
from typing import Optional

from . import _normkit

_LAYOUTS = {None: -1, "channels_first": 0, "nchw": 0, "channels_last": 1, "nhwc": 1}
_ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "silu": 2}


def _call(fn, *args):
    """fn(*args), torch CPU tensors among args handed over as DLPack capsules.

    nanobind imports a torch tensor through Tensor.__dlpack__, about 4 us a tensor here
    (a layer-norm call of x, gamma, beta and out took 20 us in the binding, 1.1 us with
    NumPy arrays); torch.utils.dlpack.to_dlpack makes the capsule in 0.2-0.45 us. The
    extension sees the same array either way (tensors that require grad included, as
    nanobind's own import takes them). CUDA tensors keep the __dlpack__ path, which orders
    the streams, and so do tensor subclasses. Exact type tests: isinstance against
    torch.Tensor goes through its metaclass, which cost NumPy callers more.
    """
    if not _TORCH:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "Tensor"):  # not (yet) imported: no tensors
            return fn(*args)
        from torch.utils.dlpack import to_dlpack

        _TORCH.extend(((torch.Tensor, torch.nn.Parameter), to_dlpack))
    types, to_dlpack = _TORCH
    # Every op's first tensor is one of its first two arguments: a call whose first two
    # are not torch tensors is a NumPy call (a torch tensor beside NumPy arrays still
    # works, through nanobind's own import), and skips the scan.
    if type(args[0]) not in types and type(args[1]) not in types:
        return fn(*args)
    return fn(*[to_dlpack(a) if type(a) in types and a.is_cpu else a for a in args])


# (torch.Tensor, torch.nn.Parameter), torch.utils.dlpack.to_dlpack: filled by _call once
# torch is imported.
_TORCH = []


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


def _empty_float32(x, shape):
    if _is_torch(x):
        import torch

        return x.new_empty(tuple(shape), dtype=torch.float32)
    import numpy as np

    return np.empty(tuple(shape), dtype=np.float32)


def affine(x, scale=None, shift=None, *, per_sample: bool = False, out=None, layout=None,
           context: Optional[_normkit.Context] = None):
    """y = x * scale + shift per channel (or per sample and channel with per_sample=True);
    scale / shift may be None. Returns out."""
    out = _empty_like(x) if out is None else out
    _call(_normkit.affine, x, scale, shift, per_sample, out, _layout(layout), context)
    return out


def batch_norm(x, running_mean, running_var, weight=None, bias=None, eps: float = 1e-5, *,
               out=None, layout=None, context: Optional[_normkit.Context] = None):
    """Inference batch norm over dim 1 (torch.nn.functional.batch_norm with training=False)."""
    out = _empty_like(x) if out is None else out
    _call(_normkit.batch_norm, x, running_mean, running_var, weight, bias, float(eps), out,
          _layout(layout), context)
    return out


def batch_norm_training(x, running_mean=None, running_var=None, weight=None, bias=None,
                        momentum: float = 0.1, eps: float = 1e-5, *, out=None, save_mean=None,
                        save_rstd=None, layout=None,
                        context: Optional[_normkit.Context] = None):
    """Training-mode batch norm over dim 1 (torch.nn.functional.batch_norm with
    training=True): y from the batch's own mean and biased variance per channel;
    running_mean / running_var (float32 [C], both or neither) are updated in place with
    `momentum` (the unbiased variance, as PyTorch keeps it); save_mean / save_rstd (float32
    [C], optional) receive the batch mean and 1 / sqrt(var + eps). x and out float32,
    bfloat16 or float16 (the same dtype, or one of them float32), CPU. Returns out."""
    out = _empty_like(x) if out is None else out
    _call(_normkit.batch_norm_training, x, running_mean, running_var, weight, bias, float(momentum),
          float(eps), out, save_mean, save_rstd, _layout(layout), context)
    return out


def batch_norm_training_backward(x, grad_output, save_mean, save_rstd, weight=None, *,
                                 output_mask=(True, True, True), grad_input=None,
                                 grad_weight=None, grad_bias=None, layout=None,
                                 context: Optional[_normkit.Context] = None):
    """The backward of batch_norm_training from its save_mean / save_rstd:
    (grad_input, grad_weight, grad_bias), each computed when its output_mask entry is True
    (else None; new arrays unless given). grad_output has x's shape and layout; grad_input
    may be x or grad_output (in place). x, grad_output and grad_input of one dtype (float32,
    bfloat16 or float16; the parameter arrays float32), CPU."""
    want_dx, want_gw, want_gb = (bool(m) for m in output_mask)
    if want_dx and grad_input is None:
        grad_input = _empty_like(x)
    channels = x.shape[1]
    if want_gw and grad_weight is None:
        grad_weight = _empty_float32(x, (channels,))
    if want_gb and grad_bias is None:
        grad_bias = _empty_float32(x, (channels,))
    dx = grad_input if want_dx else None
    gw = grad_weight if want_gw else None
    gb = grad_bias if want_gb else None
    _call(_normkit.batch_norm_training_backward, x, grad_output, save_mean, save_rstd, weight, dx,
          gw, gb, _layout(layout), context)
    return dx, gw, gb


def batch_norm_fold(running_mean, running_var, weight=None, bias=None, eps: float = 1e-5, *,
                    scale=None, shift=None):
    """(scale, shift) with batch_norm(x) == x * scale + shift per channel."""
    scale = _empty_like(running_mean) if scale is None else scale
    shift = _empty_like(running_mean) if shift is None else shift
    _call(_normkit.batch_norm_fold, running_mean, running_var, weight, bias, float(eps), scale,
          shift)
    return scale, shift


def fold_batch_norm_into_conv(weight, bias, running_mean, running_var, bn_weight=None,
                              bn_bias=None, eps: float = 1e-5, *, groups: int = 1,
                              transposed: bool = False, folded_bias=None):
    """Rewrites a conv's weight in place so that conv followed by the batch norm equals the
    conv alone with the returned bias (a new array unless folded_bias is given; it may be
    bias itself). weight: OIHW ([out, in / groups, k...]) or, transposed, IOHW."""
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    folded_bias = _empty(weight, (out_channels,)) if folded_bias is None else folded_bias
    _call(_normkit.fold_batch_norm_into_conv, weight, bias, folded_bias, int(groups),
          bool(transposed), running_mean, running_var, bn_weight, bn_bias, float(eps))
    return folded_bias


def fold_batch_norm_into_linear(weight, bias, running_mean, running_var, bn_weight=None,
                                bn_bias=None, eps: float = 1e-5, *, folded_bias=None):
    """As fold_batch_norm_into_conv for a linear layer's [out, in] weight."""
    folded_bias = _empty(weight, (weight.shape[0],)) if folded_bias is None else folded_bias
    _call(_normkit.fold_batch_norm_into_linear, weight, bias, folded_bias, running_mean,
          running_var, bn_weight, bn_bias, float(eps))
    return folded_bias


def _group_norm(x, groups, weight, bias, eps, activation, out, mean_out, rstd_out, layout,
                context):
    out = _empty_like(x) if out is None else out
    _call(_normkit.group_norm, x, int(groups), weight, bias, float(eps), _activation(activation),
          out, mean_out, rstd_out, _layout(layout), context)
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
    shape = x.shape
    if len(shape) == 2 and shape[1] == d:
        return x  # already rows; the extension checks they are dense, naming the argument
    if x.ndim < 1 or x.shape[-1] != d:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected [..., {d}]")
    dense = x.is_contiguous() if _is_torch(x) else x.flags.c_contiguous
    if not dense:
        raise ValueError(f"{name} must be contiguous (use .contiguous() or np.ascontiguousarray)")
    if x.ndim == 2:
        return x
    return x.view(-1, d) if _is_torch(x) else x.reshape(-1, d)


def _row_norm(x, weight, bias, eps, rms, out, mean_out, rstd_out, context):
    if out is not None and x.ndim == 2 and out.ndim == 2:
        # Rows already (the decode calls of a few microseconds): the extension checks the
        # shapes and density and names the argument; the checks below cost 0.5 us a call.
        _call(_normkit.row_norm, x, weight, bias, float(eps), rms, out, mean_out, rstd_out,
              context)
        return out
    d = x.shape[-1]
    out = _empty_like(x) if out is None else out
    if out.shape != x.shape:  # tuples (numpy) or torch.Size, a tuple
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(x.shape)}")
    _call(_normkit.row_norm, _rows(x, d, "x"), weight, bias, float(eps), rms, _rows(out, d, "out"),
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


def _add_row_norm(x, residual, add_bias, weight, bias, eps, rms, out, residual_out, mean_out,
                  rstd_out, context):
    d = x.shape[-1]
    if tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"residual has shape {tuple(residual.shape)}, expected {tuple(x.shape)}")
    out = _empty_like(x) if out is None else out
    for name, t in (("out", out), ("residual_out", residual_out)):
        if t is not None and tuple(t.shape) != tuple(x.shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(x.shape)}")
    h = None if residual_out is None else _rows(residual_out, d, "residual_out")
    _call(_normkit.add_row_norm, _rows(x, d, "x"), _rows(residual, d, "residual"), add_bias, weight,
          bias, float(eps), rms, _rows(out, d, "out"), h, mean_out, rstd_out, context)
    return out


def add_layer_norm(x, residual, weight=None, bias=None, eps: float = 1e-5, *, add_bias=None,
                   out=None, residual_out=None, mean_out=None, rstd_out=None,
                   context: Optional[_normkit.Context] = None):
    """A transformer block's add & norm in one pass: h = x + residual (+ add_bias),
    returns layer_norm(h) over the last dimension. x, residual and residual_out share one
    dtype (float32, bfloat16 or float16; a half h is the float32 sum rounded to it, and y
    the norm of that h); out is x's dtype or, with a half x, float32. residual_out, when
    given, receives h (the next block's residual); out and residual_out may be x or
    residual (in place)."""
    return _add_row_norm(x, residual, add_bias, weight, bias, eps, False, out, residual_out,
                         mean_out, rstd_out, context)


def add_rms_norm(x, residual, weight=None, eps: float = 1e-6, *, add_bias=None, out=None,
                 residual_out=None, rstd_out=None, context: Optional[_normkit.Context] = None):
    """h = x + residual (+ add_bias), returns rms_norm(h); as add_layer_norm."""
    return _add_row_norm(x, residual, add_bias, weight, None, eps, True, out, residual_out, None,
                         rstd_out, context)


# ---- shift-sum family (coded-aperture imaging) ----

_AXES = {"w": 0, "h": 1}
_MASK_KINDS = {None: 0, "none": 0, "hw": 1, "chw": 2, "bchw": 3, "phi_chw": 4, "phi_bchw": 5}
_PINV_MODES = {"moore_penrose": 0, "divide_by_mask": 1}


def _shift_geometry(x_shape, step, axis):
    b, c, h, w = (int(v) for v in x_shape)
    spread = (c - 1) * abs(int(step))
    return (h + spread, w) if axis == "h" else (h, w + spread)


def _mask_kind(mask, mask_kind, x_shape, step, axis):
    """The mask's kind: given, or from its shape ([H, W], [C, H, W], [B, C, H, W] before
    shifting; [C, H', W'] or [B, C, H', W'] in the shifted domain)."""
    if mask is None:
        if mask_kind not in (None, "none"):
            raise ValueError(f"mask_kind {mask_kind!r} needs a mask")
        return 0
    if mask_kind is not None:
        try:
            return _MASK_KINDS[str(mask_kind).lower()]
        except KeyError:
            raise ValueError(f"mask_kind must be one of {sorted(k for k in _MASK_KINDS if k)}, "
                             f"not {mask_kind!r}") from None
    b, c, h, w = (int(v) for v in x_shape)
    ho, wo = _shift_geometry(x_shape, step, axis)
    shape = tuple(int(v) for v in mask.shape)
    kinds = {(h, w): 1, (c, h, w): 2, (b, c, h, w): 3, (c, ho, wo): 4, (b, c, ho, wo): 5}
    if shape not in kinds:
        raise ValueError(f"mask shape {shape} is none of [H, W], [C, H, W], [B, C, H, W], "
                         f"[C, H', W'], [B, C, H', W'] for x {tuple(x_shape)}; give mask_kind")
    return kinds[shape]


def _axis(axis):
    try:
        return _AXES[str(axis).lower()]
    except KeyError:
        raise ValueError(f"axis must be 'w' or 'h', not {axis!r}") from None


def _shift_call(which, x, other, step, axis, scale, mask, mask_kind, pinv_mode, lambda_, gamma,
                normalizer, layout, context):
    kind = _mask_kind(mask, mask_kind, x.shape, step, str(axis).lower())
    _call(_normkit.shift_sum_call, which, x, other, int(step), _axis(axis), float(scale), mask,
          kind, pinv_mode, float(lambda_), float(gamma), normalizer, _layout(layout), context)


def _y_like(x, step, axis):
    ho, wo = _shift_geometry(x.shape, step, str(axis).lower())
    return _empty(x, (x.shape[0], 1, ho, wo))


def shift_sum(x, step: int, *, axis="w", scale: float = 1.0, mask=None, mask_kind=None,
              out=None, layout=None, context: Optional[_normkit.Context] = None):
    """The CASSI forward operator A: channel c of x [B, C, H, W] shifted by c * step along
    `axis`, masked and summed, times `scale`. Returns y [B, 1, H', W']."""
    out = _y_like(x, step, axis) if out is None else out
    _shift_call(0, x, out, step, axis, scale, mask, mask_kind, 0, 0.0, 0.0, None, layout,
                context)
    return out


def _x_shape_for(y, channels, step, axis):
    b, _, ho, wo = (int(v) for v in y.shape)
    spread = (int(channels) - 1) * abs(int(step))
    return (b, int(channels), ho - spread, wo) if str(axis).lower() == "h" else (
        b, int(channels), ho, wo - spread)


def shift_sum_adjoint(y, step: int, channels: Optional[int] = None, *, axis="w",
                      scale: float = 1.0, mask=None, mask_kind=None, out=None, layout=None,
                      context: Optional[_normkit.Context] = None):
    """The adjoint A^T of shift_sum: x [B, C, H, W] from y [B, 1, H', W'] (C from
    `channels` or `out`)."""
    out = _x_out(out, y, channels, step, axis, layout, "shift_sum_adjoint")
    _shift_call(1, out, y, step, axis, scale, mask, mask_kind, 0, 0.0, 0.0, None, layout, context)
    return out


def _x_out(out, y, channels, step, axis, layout, op):
    """`out`, or a new x [B, C, H, W] for y (channels-last when layout asks for it)."""
    if out is not None:
        return out
    if channels is None:
        raise ValueError(f"{op}: give channels or out")
    shape = _x_shape_for(y, channels, step, axis)
    if layout in ("channels_last", "nhwc"):
        return _channels_last_empty(y, shape)
    return _empty(y, shape)


def _channels_last_empty(like, shape):
    if _is_torch(like):
        import torch

        return like.new_empty(shape).contiguous(memory_format=torch.channels_last)
    import numpy as np

    b, c, h, w = shape
    return np.empty((b, h, w, c), dtype=like.dtype).transpose(0, 3, 1, 2)


def shift_sum_pinv(y, step: int, channels: Optional[int] = None, *, mode="moore_penrose",
                   axis="w", scale: float = 1.0, mask=None, mask_kind=None, normalizer=None,
                   out=None, layout=None, context: Optional[_normkit.Context] = None):
    """A pseudo-inverse of A: 'moore_penrose' (A^T(y / (s^2 Phi_s)), 0 where no channel
    covers) or 'divide_by_mask'. normalizer: Phi_s from shift_sum_normalizer, or None."""
    try:
        pinv_mode = _PINV_MODES[mode]
    except KeyError:
        raise ValueError(f"mode must be 'moore_penrose' or 'divide_by_mask', not {mode!r}") from None
    out = _x_out(out, y, channels, step, axis, layout, "shift_sum_pinv")
    _shift_call(2, out, y, step, axis, scale, mask, mask_kind, pinv_mode, 0.0, 0.0, normalizer,
                layout, context)
    return out


def shift_sum_gap_step(x, y, step: int, lambda_: float = 1.0, gamma: float = 0.0, *, axis="w",
                       scale: float = 1.0, mask=None, mask_kind=None, normalizer=None,
                       layout=None, context: Optional[_normkit.Context] = None):
    """One GAP / ADMM data-consistency step, in place on x:
    x += lambda_ * A^T((y - A x) / (s^2 Phi_s + gamma)). Returns x."""
    _shift_call(3, x, y, step, axis, scale, mask, mask_kind, 0, lambda_, gamma, normalizer,
                layout, context)
    return x


def shift_sum_normalizer(x, step: int, *, axis="w", scale: float = 1.0, mask=None,
                         mask_kind=None, out=None, layout=None,
                         context: Optional[_normkit.Context] = None):
    """Phi_s = sum_c Phi_c^2 over the covered positions ([H', W'], or [B, H', W'] for
    per-sample masks) for x's shape (x's values are not read)."""
    kind = _mask_kind(mask, mask_kind, x.shape, step, str(axis).lower())
    ho, wo = _shift_geometry(x.shape, step, str(axis).lower())
    if out is None:
        shape = ((x.shape[0],) if kind in (3, 5) else ()) + (ho, wo)
        # Phi_s is float32 beside bfloat16 / float16 x (float64 beside float64).
        out = _empty(x, shape) if str(x.dtype).endswith(("float32", "float64")) else _empty_float32(
            x, shape)
    _call(_normkit.shift_sum_normalizer, x, int(step), _axis(axis), float(scale), mask, kind, out,
          _layout(layout), context)
    return out


def shift(x, step: int, *, axis="w", out=None, layout=None,
          context: Optional[_normkit.Context] = None):
    """The zero-padded stack of shifted channels: [B, C, H', W'] in x's layout."""
    if out is None:
        b, c = x.shape[0], x.shape[1]
        ho, wo = _shift_geometry(x.shape, step, str(axis).lower())
        out = _empty_like_shape(x, (b, c, ho, wo))
    _shift_call(4, x, out, step, axis, 1.0, None, None, 0, 0.0, 0.0, None, layout, context)
    return out


def unshift(xs, step: int, *, axis="w", out=None, layout=None,
            context: Optional[_normkit.Context] = None):
    """The inverse of shift: x [B, C, H, W] from the stack xs [B, C, H', W']."""
    if out is None:
        out = _empty_like_shape(xs, _x_shape_for(xs, xs.shape[1], step, axis))
    _shift_call(5, out, xs, step, axis, 1.0, None, None, 0, 0.0, 0.0, None, layout, context)
    return out


def _empty_like_shape(x, shape):
    """A new array of `shape` in x's layout (channels-last when x is)."""
    dense_first = x.is_contiguous() if _is_torch(x) else x.flags.c_contiguous
    return _empty(x, shape) if dense_first else _channels_last_empty(x, shape)
