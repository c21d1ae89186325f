# SPDX-License-Identifier: Apache-2.0
"""normkit for PyTorch models on the CPU.

- Modules that are PyTorch's own (subclasses: same parameters, buffers and state_dict)
  with a normkit forward for inference: GroupNorm (and GroupNormSiLU, GroupNorm with the
  SiLU after it fused), BatchNorm1d/2d/3d (eval mode; and training mode, forward and
  backward, through a torch.autograd.Function), InstanceNorm1d/2d/3d, LayerNorm over the
  last dimension, RMSNorm over the last dimension.
- convert(model): turns those modules of a model into normkit's, in place (a GroupNorm
  followed by an nn.SiLU in an nn.Sequential becomes one GroupNormSiLU).
- fold_batch_norms(model): folds eval-mode BatchNorms into the Conv / Linear before them
  (in nn.Sequential), with normkit's fold.

A module falls back to PyTorch's forward for what normkit does not do: training mode and
autograd (an input or parameter that requires grad while grad is enabled) except for
BatchNorm's float32 training mode, torch.compile of that training mode, tensors not
on the CPU, dtypes other than float32, and layouts other than contiguous or
channels_last. The normkit path runs through torch.library custom ops (normkit::*), so
torch.compile and torch.export see one op per norm.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import _normkit, _ops

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "GroupNormSiLU",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LayerNorm",
    "RMSNorm",
    "convert",
    "fold_batch_norms",
    "set_context",
    "set_num_threads",
]

# The context of the modules' calls (None: normkit's process default, NORMKIT_NUM_THREADS
# or every hardware thread).
_context: Optional[_normkit.Context] = None


def set_num_threads(num_threads: int) -> None:
    """Threads for normkit's calls from these modules (0: the process default); PyTorch's
    own ops keep torch.set_num_threads."""
    global _context
    _context = _normkit.Context(int(num_threads)) if num_threads else None


def set_context(context: Optional[_normkit.Context]) -> None:
    """The normkit.Context of the modules' calls (None: the process default), e.g. one
    that runs normkit's loops on the application's own pool (Context(n, parallel_for=f))."""
    global _context
    if context is not None and not isinstance(context, _normkit.Context):
        raise TypeError(f"set_context: context must be a normkit.Context or None, not "
                        f"{type(context).__name__}")
    _context = context


def _dense(x: torch.Tensor) -> bool:
    if x.is_contiguous():
        return True
    if x.dim() == 4:
        return x.is_contiguous(memory_format=torch.channels_last)
    if x.dim() == 5:
        return x.is_contiguous(memory_format=torch.channels_last_3d)
    return False


_HALF = (torch.bfloat16, torch.float16)


def _usable(x: torch.Tensor, *params: Optional[torch.Tensor], half: bool = False) -> bool:
    """Whether normkit can run this call: inference, float32 CPU tensors (half: also
    bfloat16 / float16 ones, with parameters of float32 or x's dtype), a dense layout."""
    x_ok = x.dtype == torch.float32 or (half and x.dtype in _HALF)
    if x.device.type != "cpu" or not x_ok or not _dense(x):
        return False
    if torch.is_grad_enabled() and (
        x.requires_grad or any(p is not None and p.requires_grad for p in params)
    ):
        return False
    return all(
        p is None or (p.device.type == "cpu" and p.dtype in (torch.float32, x.dtype)
                      and p.is_contiguous())
        for p in params
    )


def _float32(p: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A parameter as normkit takes it: float32 (a half model's C values widened)."""
    return None if p is None else _detached(p).float()


# ---- custom ops: opaque to torch.compile / torch.export, with fake (meta) kernels ----

def _group_norm_impl(x: torch.Tensor, groups: int, weight: Optional[torch.Tensor],
                   bias: Optional[torch.Tensor], eps: float, activation: int) -> torch.Tensor:
    act = {0: None, 1: "relu", 2: "silu"}[activation]
    if groups == 0:
        return _ops.instance_norm(x, weight, bias, eps, activation=act, context=_context)
    return _ops.group_norm(x, groups, weight, bias, eps, activation=act, context=_context)


_group_norm_op = torch.library.custom_op("normkit::group_norm", _group_norm_impl,
                                         mutates_args=())


@_group_norm_op.register_fake
def _(x, groups, weight, bias, eps, activation):
    return torch.empty_like(x)


def _batch_norm_impl(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                   weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                   eps: float) -> torch.Tensor:
    return _ops.batch_norm(x, running_mean, running_var, weight, bias, eps, context=_context)


_batch_norm_op = torch.library.custom_op("normkit::batch_norm", _batch_norm_impl,
                                         mutates_args=())


@_batch_norm_op.register_fake
def _(x, running_mean, running_var, weight, bias, eps):
    return torch.empty_like(x)


def _layer_norm_impl(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                   eps: float) -> torch.Tensor:
    return _ops.layer_norm(x, weight, bias, eps, context=_context)


_layer_norm_op = torch.library.custom_op("normkit::layer_norm", _layer_norm_impl,
                                         mutates_args=())


@_layer_norm_op.register_fake
def _(x, weight, bias, eps):
    return torch.empty_like(x)


def _rms_norm_impl(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    return _ops.rms_norm(x, weight, eps, context=_context)


_rms_norm_op = torch.library.custom_op("normkit::rms_norm", _rms_norm_impl,
                                       mutates_args=())


@_rms_norm_op.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


def _op(x: torch.Tensor, op, impl):
    """The custom op while torch.compile / torch.export trace (their tensors are fake or
    functional subclasses), the function itself in eager mode: the op's Python dispatch
    costs about 40 us a call, more than a small norm."""
    return impl if type(x) is torch.Tensor and not torch.compiler.is_compiling() else op


def _detached(p: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if p is None else p.detach()


# ---- modules ----

class GroupNorm(nn.GroupNorm):
    """nn.GroupNorm with normkit's forward (same parameters and state_dict)."""

    _activation = 0  # 2: SiLU fused after the affine (GroupNormSiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() >= 3 and _usable(x, self.weight, self.bias, half=True):
            run = _op(x, _group_norm_op, _group_norm_impl)
            return run(x, self.num_groups, _float32(self.weight), _float32(self.bias), self.eps,
                       self._activation)
        y = F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return F.silu(y) if self._activation == 2 else y


class GroupNormSiLU(GroupNorm):
    """nn.GroupNorm followed by nn.SiLU, as one normkit pass."""

    _activation = 2


def _memory_format(x: torch.Tensor):
    """The memory format x is dense in (normkit's layout of it)."""
    if x.is_contiguous():
        return torch.contiguous_format
    return torch.channels_last if x.dim() == 4 else torch.channels_last_3d


class _BatchNormTraining(torch.autograd.Function):
    """Training-mode batch norm with normkit's forward and backward (CPU; x float32,
    bfloat16 or float16, the parameters float32 or x's dtype)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
        channels = x.shape[1]
        save_mean = x.new_empty(channels, dtype=torch.float32)
        save_rstd = x.new_empty(channels, dtype=torch.float32)
        xd = x.detach()
        # normkit updates float32 running averages: a half model's are updated in a float32
        # copy and stored back rounded (PyTorch's CPU kernel also updates them in float).
        mean, var = running_mean, running_var
        if mean is not None and mean.dtype != torch.float32:
            mean, var = mean.float(), var.float()
        y = _ops.batch_norm_training(xd, mean, var, _float32(weight), _float32(bias), momentum,
                                     eps, save_mean=save_mean, save_rstd=save_rstd,
                                     context=_context)
        if mean is not running_mean:
            running_mean.copy_(mean)
            running_var.copy_(var)
        ctx.save_for_backward(xd, _float32(weight), save_mean, save_rstd)
        ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
        ctx.param_dtype = (weight if weight is not None else bias if bias is not None else x).dtype
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x, weight, save_mean, save_rstd = ctx.saved_tensors
        need = ctx.needs_input_grad
        grad_y = grad_y.contiguous(memory_format=_memory_format(x))
        dx, gw, gb = _ops.batch_norm_training_backward(
            x, grad_y, save_mean, save_rstd, weight,
            output_mask=(need[0], need[1] and ctx.has_weight, need[2] and ctx.has_bias),
            context=_context)
        # The parameters' gradients in their own dtype (normkit's are float32).
        gw = None if gw is None else gw.to(ctx.param_dtype)
        gb = None if gb is None else gb.to(ctx.param_dtype)
        return dx, gw, gb, None, None, None, None


def _training_usable(module, x: torch.Tensor) -> bool:
    """Whether normkit runs this training-mode (batch statistics) call: a float32, bfloat16
    or float16 CPU x in a dense layout, parameters of float32 or x's dtype, at least 2 values
    per channel (else PyTorch's error), eager."""
    params = (module.weight, module.bias, module.running_mean, module.running_var)
    x_ok = x.dtype == torch.float32 or x.dtype in _HALF
    return (x.device.type == "cpu" and x_ok and x.dim() >= 2 and _dense(x)
            and x.numel() >= 2 * x.shape[1] > 0 and type(x) is torch.Tensor
            and not torch.compiler.is_compiling()
            and all(p is None or (p.device.type == "cpu" and p.dtype in (torch.float32, x.dtype)
                                  and p.is_contiguous()) for p in params))


class _BatchNorm:
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (not self.training and self.running_mean is not None and x.dim() >= 2
                and _usable(x, self.weight, self.bias, self.running_mean, self.running_var,
                            half=True)):
            run = _op(x, _batch_norm_op, _batch_norm_impl)
            return run(x, _float32(self.running_mean), _float32(self.running_var),
                       _float32(self.weight), _float32(self.bias), self.eps)
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if batch_stats and _training_usable(self, x):
            self._check_input_dim(x)
            # nn.BatchNorm's bookkeeping: the step count, and the cumulative average when
            # momentum is None.
            factor = 0.0 if self.momentum is None else self.momentum
            if self.training and self.track_running_stats and self.num_batches_tracked is not None:
                self.num_batches_tracked.add_(1)
                if self.momentum is None:
                    factor = 1.0 / float(self.num_batches_tracked)
            update = not self.training or self.track_running_stats
            mean = self.running_mean if update else None
            var = self.running_var if update else None
            return _BatchNormTraining.apply(x, self.weight, self.bias, mean, var, factor, self.eps)
        return super().forward(x)


class BatchNorm1d(_BatchNorm, nn.BatchNorm1d):
    """nn.BatchNorm1d; normkit's forward in eval mode, forward and backward in training."""


class BatchNorm2d(_BatchNorm, nn.BatchNorm2d):
    """nn.BatchNorm2d; normkit's forward in eval mode, forward and backward in training."""


class BatchNorm3d(_BatchNorm, nn.BatchNorm3d):
    """nn.BatchNorm3d; normkit's forward in eval mode, forward and backward in training."""


class _InstanceNorm:
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batched = x.dim() == self._get_no_batch_dim() + 1
        if (batched and not self.track_running_stats
                and _usable(x, self.weight, self.bias, half=True)):
            run = _op(x, _group_norm_op, _group_norm_impl)
            return run(x, 0, _float32(self.weight), _float32(self.bias), self.eps, 0)
        return super().forward(x)


class InstanceNorm1d(_InstanceNorm, nn.InstanceNorm1d):
    """nn.InstanceNorm1d (without running statistics) with normkit's forward."""


class InstanceNorm2d(_InstanceNorm, nn.InstanceNorm2d):
    """nn.InstanceNorm2d (without running statistics) with normkit's forward."""


class InstanceNorm3d(_InstanceNorm, nn.InstanceNorm3d):
    """nn.InstanceNorm3d (without running statistics) with normkit's forward."""


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm; normkit's forward when it normalizes over the last dimension only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (len(self.normalized_shape) == 1 and x.dim() >= 2 and x.is_contiguous()
                and _usable(x, self.weight, self.bias, half=True)):
            run = _op(x, _layer_norm_op, _layer_norm_impl)
            return run(x, _float32(self.weight), _float32(self.bias), self.eps)
        return super().forward(x)


class RMSNorm(nn.RMSNorm):
    """nn.RMSNorm; normkit's forward when it normalizes over the last dimension only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (len(self.normalized_shape) == 1 and x.dim() >= 2 and x.is_contiguous()
                and _usable(x, self.weight, half=True)):
            eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
            run = _op(x, _rms_norm_op, _rms_norm_impl)
            return run(x, _float32(self.weight), eps)
        return super().forward(x)


_CONVERSIONS = {
    nn.GroupNorm: GroupNorm,
    nn.BatchNorm1d: BatchNorm1d,
    nn.BatchNorm2d: BatchNorm2d,
    nn.BatchNorm3d: BatchNorm3d,
    nn.InstanceNorm1d: InstanceNorm1d,
    nn.InstanceNorm2d: InstanceNorm2d,
    nn.InstanceNorm3d: InstanceNorm3d,
    nn.LayerNorm: LayerNorm,
    nn.RMSNorm: RMSNorm,
}


def convert(model: nn.Module) -> nn.Module:
    """Turns the model's PyTorch norms into normkit's, in place (their class changes; the
    parameters, buffers and state_dict stay as they are), and fuses a GroupNorm followed by
    an nn.SiLU in an nn.Sequential into one GroupNormSiLU (the SiLU becomes nn.Identity).
    Returns the model."""
    for module in list(model.modules()):
        if type(module) in _CONVERSIONS:
            module.__class__ = _CONVERSIONS[type(module)]
    for module in list(model.modules()):
        if isinstance(module, nn.Sequential):
            names = list(module._modules)
            for a, b in zip(names, names[1:]):
                first, second = module._modules[a], module._modules[b]
                if type(first) is GroupNorm and type(second) is nn.SiLU:
                    first.__class__ = GroupNormSiLU
                    module._modules[b] = nn.Identity()
    return model


@torch.no_grad()
def fold_batch_norms(model: nn.Module) -> nn.Module:
    """Folds each eval-mode BatchNorm that follows a Conv1d/2d/3d, ConvTranspose or Linear in
    an nn.Sequential into that layer's weight and bias (normkit's fold), and replaces the
    BatchNorm with nn.Identity. Returns the model."""
    convs = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
    transposed = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
    for module in list(model.modules()):
        if not isinstance(module, nn.Sequential):
            continue
        names = list(module._modules)
        for a, b in zip(names, names[1:]):
            layer, bn = module._modules[a], module._modules[b]
            if (not isinstance(bn, norms) or bn.training or bn.running_mean is None
                    or not isinstance(layer, convs + transposed + (nn.Linear,))
                    or layer.weight.dtype != torch.float32 or layer.weight.device.type != "cpu"):
                continue
            weight = layer.weight.data.contiguous()
            bias = None if layer.bias is None else layer.bias.data.contiguous()
            args = (bn.running_mean.contiguous(), bn.running_var.contiguous(),
                    _detached(bn.weight), _detached(bn.bias), bn.eps)
            if isinstance(layer, nn.Linear):
                folded = _ops.fold_batch_norm_into_linear(weight, bias, *args)
            else:
                folded = _ops.fold_batch_norm_into_conv(
                    weight, bias, *args, groups=layer.groups,
                    transposed=isinstance(layer, transposed))
            layer.weight.data = weight
            layer.bias = nn.Parameter(folded, requires_grad=layer.weight.requires_grad)
            module._modules[b] = nn.Identity()
    return model
