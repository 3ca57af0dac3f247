"""CPU emulation of torch_npu's fused optimizers, `torch_npu.optim.NpuFused*` (torch_npu 2.13.0).

The real classes pack ("combine") every parameter that has a gradient, that gradient and the
optimizer state into one contiguous buffer per dtype on the first `step()` (or on a `zero_grad()`
that finds gradients), move the tensors' data pointers into those buffers and from then on update
only the buffers. The emulation packs the same way on the backing device (parameters, gradients
and state tensors become views of flat buffers) and runs the real update math, so training code
behaves as on an NPU. Where the real packing fails silently or obscurely, the emulation raises:

* a parameter re-allocated after packing (`param.data = ...`, `model.half()`, `model.to(...)`):
  the real optimizer keeps updating its packed copy and the parameter silently stops training;
* a gradient set to None or re-assigned after packing (`model.zero_grad()`, whose default is
  set_to_none=True, `param.grad = ...`): the real optimizer reads only its packed gradient
  buffer, so it silently applies a stale (or zeroed) gradient;
* a parameter that had no gradient when packing happened is never packed: the real optimizer
  never updates it (NpuFusedSGD and NpuFusedBertAdam silently, the others fail with
  KeyError: 'step');
* `add_param_group()` after packing: the real next `step()` fails with IndexError;
* `load_state_dict()` after the first `step()`: the real optimizer silently keeps its packed state.

Errors the real classes raise themselves are raised with the same types and messages, less
torch_npu's error-code suffix: argument validation, `zero_grad(set_to_none=True)`, parameters
that are neither float32 nor float16, non-contiguous tensors, tensors off the (emulated) NPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer, ParamsT, required

from npu_migrate.emulation.state import backing
from npu_migrate.emulation.tensors import on_npu

__all__ = [
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedOptimizerBase",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
]

_FUSED_DTYPES = (torch.float32, torch.float16)  # the real buffers: index 0 float32, index 1 float16

_Closure = Callable[[], Any] | None


def _reject(invalid: bool, message: str) -> None:
    if invalid:
        raise ValueError(message)


def _grad_of(p: Tensor) -> Tensor:
    """`p.grad` of a parameter that packing takes or took: it had a gradient then."""
    assert p.grad is not None, "the gradient of a packed parameter was dropped"
    return p.grad


def _combine(tensors: list[Tensor]) -> Tensor:
    """A new flat buffer holding the values of `tensors`, one after the other."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


@dataclass(eq=False)
class _Bucket:
    """The parameters of one dtype in one param group, packed contiguously: the real
    `combined_params_indexed_by_group[group][dtype]` with its gradient and state counterparts."""

    params: list[Tensor]
    param: Tensor  # a slice of the dtype's buffer for all groups (`params_all_group_combined`)
    grad: Tensor
    state: dict[str, Any] | None = None  # 'step' (an int) and flat state buffers, once packed

    @property
    def packed_state(self) -> dict[str, Any]:
        """`state` in an update: step() checks first that it was packed (`_check_states`)."""
        assert self.state is not None, "the state was not packed"
        return self.state

    def split(self, flat: Tensor) -> list[Tensor]:
        """Per-parameter views of a flat buffer laid out like this bucket."""
        parts = flat.split([p.numel() for p in self.params])
        return [part.view_as(p) for part, p in zip(parts, self.params, strict=True)]


class NpuFusedOptimizerBase(Optimizer):
    """Emulates `torch_npu.optim.NpuFusedOptimizerBase`: packing, a `zero_grad` whose default is
    set_to_none=False and that raises ValueError for set_to_none=True, `clip_grad_norm_fused_`,
    `get_combined_params` and `get_combined_grads`.

    `step()` runs the closure under torch.no_grad() as torch_npu does, so a closure that calls
    `backward()` fails (NpuFusedLamb and NpuFusedAdamP run it under enable_grad, after packing).
    Subclasses give `_state_keys`, `_update` (the real `_group_step` on one bucket) and, where
    the state is not step 0 and zeroed buffers, `_init_param_state`.
    """

    _counts_param_steps: ClassVar[bool] = True  # the real _group_step does state[p]['step'] += 1
    _sparse_error: ClassVar[str]

    def __init__(self, params: ParamsT, default: dict[str, Any]) -> None:
        self.is_params_grads_combined = False
        self.is_states_combined = False
        super().__init__(params, default)
        self.is_fused_optimizer = True  # torch_npu's GradScaler then unscales the packed gradients
        self.params_all_group_combined: list[Tensor | None] = [None, None]
        self.grads_all_group_combined: list[Tensor | None] = [None, None]
        self._buckets: list[list[_Bucket]] = []
        self._packed: dict[int, tuple[int, int]] = {}  # id(param) -> its param and grad data_ptr

    # ------------------------------------------------------------ the public API

    @torch.no_grad()
    def step(self, closure: _Closure = None) -> Any:
        loss = None
        if closure is not None:
            loss = closure()
        self._pack()
        self._run_group_steps()
        return loss

    @torch.no_grad()
    def zero_grad(self, set_to_none: bool = False) -> None:
        if set_to_none:
            raise ValueError("set_to_none is not supported in fused optimizers")
        self._maybe_init_combined_params_and_grads()
        if not self.is_params_grads_combined:
            super().zero_grad(set_to_none=False)
            return
        for grads in self.grads_all_group_combined:
            if grads is not None:
                grads.zero_()

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if self.is_params_grads_combined or self.is_states_combined:
            raise RuntimeError(
                f"{type(self).__name__}.add_param_group() after the optimizer packed its parameters (on "
                "the first step(), or a zero_grad() that found gradients): the real torch_npu fused "
                "optimizer never packs the new group and its next step() fails with IndexError. "
                "Add every param group before training starts."
            )
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.is_states_combined and state_dict["state"]:
            raise RuntimeError(
                f"{type(self).__name__}.load_state_dict() after the first step(): the real torch_npu "
                "fused optimizer keeps using the state it packed then and would silently ignore the "
                "loaded one. Load the checkpoint into a new optimizer, before its first step()."
            )
        super().load_state_dict(state_dict)

    def get_combined_params(self) -> list[Tensor | None]:
        """The packed parameters: [float32 buffer, float16 buffer], None where there is none."""
        return self.params_all_group_combined

    def get_combined_grads(self) -> list[Tensor | None]:
        return self.grads_all_group_combined

    def clip_grad_norm_fused_(self, max_norm: float, norm_type: float = 2) -> Tensor:
        """Clip the packed gradients in place to a total norm of `max_norm`; returns the norm."""
        with torch.no_grad():
            self._maybe_init_combined_params_and_grads()
        if not self.is_params_grads_combined:
            raise ValueError("Value of param 'is_params_grads_combined' must be True")
        self._check_packing()
        grads = [g for g in self.grads_all_group_combined if g is not None]
        max_norm, norm_type = float(max_norm), float(norm_type)
        if norm_type == math.inf:
            total_norm = max(g.float().abs().max() for g in grads)
        else:
            total_norm = torch.stack([g.float().abs().pow(norm_type).sum() for g in grads]).sum()
            total_norm = total_norm.pow(1 / norm_type)
        clip_coef = max_norm / (total_norm + 1e-6)
        if clip_coef < 1:
            for g in grads:
                g.mul_(clip_coef)
        return total_norm

    # ------------------------------------------------------------ packing

    def _pack(self) -> None:
        self._maybe_init_combined_params_and_grads()
        self._maybe_init_combined_states()

    def _pack_then_close(self, closure: _Closure) -> Any:
        """NpuFusedLamb's and NpuFusedAdamP's order: pack, then run the closure with gradients on."""
        self._pack()
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()

    def _maybe_init_combined_params_and_grads(self) -> None:
        """Pack every parameter that has a gradient, and the gradient, into one flat buffer per dtype
        (groups one after the other); the tensors become views of the buffers. Done once it packed
        something: a parameter without a gradient then is never packed."""
        if self.is_params_grads_combined:
            return
        by_group: list[list[list[Tensor]]] = []  # [group][dtype index] -> parameters
        for group in self.param_groups:
            by_dtype: list[list[Tensor]] = [[] for _ in _FUSED_DTYPES]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype not in _FUSED_DTYPES:
                    raise TypeError(
                        "Fused optimizer's parameters must be either float32 or float16, "
                        f"but received {p.dtype}"
                    )
                self._check_packable(p)
                by_dtype[_FUSED_DTYPES.index(p.dtype)].append(p)
            by_group.append(by_dtype)

        self._buckets = [[] for _ in self.param_groups]
        for index in range(len(_FUSED_DTYPES)):
            params = [p for by_dtype in by_group for p in by_dtype[index]]
            if not params:
                continue
            param_flat = _combine(params)
            grad_flat = _combine([_grad_of(p) for p in params])
            self.params_all_group_combined[index] = param_flat
            self.grads_all_group_combined[index] = grad_flat
            offset = 0
            for group_buckets, by_dtype in zip(self._buckets, by_group, strict=True):
                if not by_dtype[index]:
                    continue
                end = offset + sum(p.numel() for p in by_dtype[index])
                bucket = _Bucket(by_dtype[index], param_flat[offset:end], grad_flat[offset:end])
                for p, param_view, grad_view in zip(
                    bucket.params, bucket.split(bucket.param), bucket.split(bucket.grad), strict=True
                ):
                    p.data = param_view
                    p.grad = grad_view
                    self._packed[id(p)] = (p.data_ptr(), grad_view.data_ptr())
                group_buckets.append(bucket)
                offset = end
            self.is_params_grads_combined = True

    def _check_packable(self, p: Tensor) -> None:
        grad = _grad_of(p)
        if grad.is_sparse:
            raise RuntimeError(self._sparse_error)
        for tensor in (p, grad):
            if not on_npu(tensor):
                raise RuntimeError(f"Tensors to combine must be on NPU, got {tensor.device.type}.")
            if not tensor.is_contiguous():
                raise RuntimeError("Tensors to combine must be contiguous.")

    def _maybe_init_combined_states(self) -> None:
        """Create the state of every packed parameter (or keep a loaded one) and pack it like the
        parameters. Done once, at the first step(), even when nothing was packed yet."""
        if self.is_states_combined:
            return
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            if self._needs_state(group):
                for bucket in buckets:
                    self._pack_state(group, bucket)
        self.is_states_combined = True

    def _pack_state(self, group: dict[str, Any], bucket: _Bucket) -> None:
        for p in bucket.params:
            self._init_param_state(p, group)
        first = self.state[bucket.params[0]]
        packed: dict[str, Any] = {"step": int(first["step"])} if "step" in first else {}
        for key in self._state_keys(group):
            packed[key] = _combine([self.state[p][key].to(p) for p in bucket.params])
            for p, view in zip(bucket.params, bucket.split(packed[key]), strict=True):
                self.state[p][key] = view
        bucket.state = packed

    def _needs_state(self, group: dict[str, Any]) -> bool:
        return True

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def _init_param_state(self, p: Tensor, group: dict[str, Any]) -> None:
        """A new parameter's state is step 0 and zeroed buffers; a loaded one is kept."""
        state = self.state[p]
        if not state:
            state["step"] = 0
            for key in self._state_keys(group):
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)

    # ------------------------------------------------------------ stepping

    def _run_group_steps(self) -> None:
        self._check_packing()
        self._check_states()
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            if self._counts_param_steps:
                for p in group["params"]:
                    if p.grad is not None:
                        self.state[p]["step"] += 1
            for bucket in buckets:
                self._update(group, bucket)

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        raise NotImplementedError

    def _check_packing(self) -> None:
        """Raise where a parameter or its gradient is not, or no longer, in the packed buffers."""
        name = type(self).__name__
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(group["params"]):
                where = f"{name}: parameter {i} of param group {g} (shape {tuple(p.shape)})"
                pointers = self._packed.get(id(p))
                if pointers is None:
                    if p.grad is not None:
                        consequence = (
                            "never updates it: its step() fails with KeyError: 'step'"
                            if self._counts_param_steps
                            else "silently never updates it"
                        )
                        raise RuntimeError(
                            f"{where} had no gradient when the optimizer packed its parameters (first "
                            "step() or zero_grad() after a backward()), so it is not in the packed "
                            f"buffers and the real torch_npu fused optimizer {consequence}. Make every "
                            "trained parameter get a gradient before the first step(), or give the "
                            "parameters that start training later their own optimizer."
                        )
                    continue
                param_ptr, grad_ptr = pointers
                if p.data_ptr() != param_ptr:
                    raise RuntimeError(
                        f"{where} was re-allocated after the optimizer packed it "
                        "(e.g. `param.data = ...`, `model.to(...)`, `.half()`, `.float()`): the real "
                        "torch_npu fused optimizer keeps updating its packed copy and would silently "
                        "stop updating this parameter. Move and cast the model before the first step(), "
                        "or create a new optimizer."
                    )
                if p.grad is None or p.grad.data_ptr() != grad_ptr:
                    raise RuntimeError(
                        f"{where}: its .grad was set to None or replaced after the optimizer packed it "
                        "(e.g. by `model.zero_grad()`, whose default is set_to_none=True, `param.grad = "
                        "None` or `param.grad = tensor`): the real torch_npu fused optimizer reads only "
                        "its packed gradient buffer and would silently apply a stale or zeroed gradient. "
                        "Call optimizer.zero_grad() and change gradients in place."
                    )

    def _check_states(self) -> None:
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            if self._needs_state(group) and any(bucket.state is None for bucket in buckets):
                raise RuntimeError(
                    f"{type(self).__name__}: the first step() ran before any parameter had a gradient, "
                    "so the real torch_npu fused optimizer packed an empty state then and never builds "
                    "one for parameters packed later: this step() fails there (KeyError: 'step', or "
                    "AttributeError on a None state buffer). Call step() only after backward()."
                )


class NpuFusedSGD(NpuFusedOptimizerBase):
    """Emulates `torch_npu.optim.NpuFusedSGD`: torch's SGD (L2 weight decay, momentum, dampening,
    nesterov; the first step takes the weight-decayed gradient as momentum buffer), `lr` required.

    As in torch_npu, whether a step decays the momentum buffers is one optimizer-wide flag, set
    when the state is packed (False if the last packed parameter had no buffer yet, True if it had a
    loaded one) and True after every step(). No state at all when momentum is 0.
    """

    _counts_param_steps = False
    _sparse_error = "NpuFusedSGD does not support sparse gradients"  # torch_npu fails while packing

    def __init__(
        self,
        params: ParamsT,
        lr: float = required,  # type: ignore[assignment]
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        _reject(lr is not required and lr < 0.0, f"Invalid learning rate: {lr}")
        _reject(momentum < 0.0, f"Invalid momentum value: {momentum}")
        _reject(weight_decay < 0.0, f"Invalid weight_decay value: {weight_decay}")
        _reject(
            nesterov and (momentum <= 0.0 or not math.isclose(dampening, 0.0, abs_tol=1e-15)),
            "Nesterov momentum requires a momentum and zero dampening",
        )
        defaults = dict(
            lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov
        )
        self._momentum_buffer_already_in_state = False
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)

    def step(self, closure: _Closure = None) -> Any:
        loss = super().step(closure)
        self._momentum_buffer_already_in_state = True
        return loss

    def _needs_state(self, group: dict[str, Any]) -> bool:
        return group["momentum"] != 0

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return ["momentum_buffer"]

    def _init_param_state(self, p: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        self._momentum_buffer_already_in_state = "momentum_buffer" in state
        if not self._momentum_buffer_already_in_state:
            state["momentum_buffer"] = _grad_of(p).add(p, alpha=group["weight_decay"])

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        momentum = group["momentum"]
        grad = bucket.grad
        if group["weight_decay"] != 0:
            grad = grad.add(bucket.param, alpha=group["weight_decay"])
        if momentum != 0:
            buf = bucket.packed_state["momentum_buffer"]
            if self._momentum_buffer_already_in_state:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        bucket.param.add_(grad, alpha=-group["lr"])


class _NpuFusedAdamBase(NpuFusedOptimizerBase):
    """Adam and AdamW as torch_npu fuses them (bias-corrected, optional amsgrad)."""

    _decoupled_weight_decay: ClassVar[bool]

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        amsgrad: bool,
    ) -> None:
        _reject(lr < 0.0, f"Invalid learning rate: {lr}")
        _reject(eps < 0.0, f"Invalid epsilon value: {eps}")
        _reject(betas[0] < 0.0 or betas[0] >= 1.0, f"Invalid beta parameter at index 0: {betas[0]}")
        _reject(betas[1] < 0.0 or betas[1] >= 1.0, f"Invalid beta parameter at index 1: {betas[1]}")
        _reject(weight_decay < 0.0, f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"] else [])

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        lr, weight_decay = group["lr"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        if self._decoupled_weight_decay:
            param.mul_(1 - lr * weight_decay)
        elif weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        state["step"] += 1
        bias_correction1 = 1 - beta1 ** state["step"]
        bias_correction2 = 1 - beta2 ** state["step"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        if group["amsgrad"]:
            torch.max(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
            exp_avg_sq = state["max_exp_avg_sq"]
        denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(group["eps"])
        param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)


class NpuFusedAdam(_NpuFusedAdamBase):
    """Emulates `torch_npu.optim.NpuFusedAdam`: torch's Adam (L2 weight decay added to the gradient,
    optional amsgrad); no `maximize`, `foreach`, `capturable`, `differentiable` or `fused`."""

    _decoupled_weight_decay = False
    _sparse_error = "NpuFusedAdam does not support sparse gradients, please consider SparseAdam instead"

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class NpuFusedAdamW(_NpuFusedAdamBase):
    """Emulates `torch_npu.optim.NpuFusedAdamW`: torch's AdamW (decoupled weight decay
    `param *= 1 - lr * weight_decay` before the Adam step, default 1e-2, optional amsgrad); no
    `maximize` although the real docstring lists it."""

    _decoupled_weight_decay = True
    _sparse_error = "NpuFusedAdamW does not support sparse gradients, please consider SparseAdam instead"

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class NpuFusedAdadelta(NpuFusedOptimizerBase):
    """Emulates `torch_npu.optim.NpuFusedAdadelta`: torch's Adadelta with L2 weight decay."""

    _sparse_error = "NpuFusedAdadelta does not support sparse gradients"

    def __init__(
        self, params: ParamsT, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0
    ) -> None:
        _reject(lr < 0.0, f"Invalid learning rate: {lr}")
        _reject(rho < 0.0 or rho > 1.0, f"Invalid rho value: {rho}")
        _reject(eps < 0.0, f"Invalid epsilon value: {eps}")
        _reject(weight_decay < 0.0, f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return ["square_avg", "acc_delta"]

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        rho, eps = group["rho"], group["eps"]
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
        param.add_(delta, alpha=-group["lr"])
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)


def _check_rmsprop(lr: float, eps: float, momentum: float, weight_decay: float, alpha: float) -> None:
    """The argument checks both RMSprop variants make, in the real order."""
    _reject(lr < 0.0, f"Invalid learning rate: {lr}")
    _reject(eps < 0.0, f"Invalid epsilon value: {eps}")
    _reject(momentum < 0.0, f"Invalid momentum value: {momentum}")
    _reject(weight_decay < 0.0, f"Invalid weight_decay value: {weight_decay}")
    _reject(alpha < 0.0, f"Invalid alpha value: {alpha}")


class _RMSpropState(NpuFusedOptimizerBase):
    """State shared by both RMSprop variants: square_avg, plus a momentum buffer and a gradient
    average when momentum and centering are on."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return (
            ["square_avg"]
            + (["momentum_buffer"] if group["momentum"] > 0 else [])
            + (["grad_avg"] if group["centered"] else [])
        )


class NpuFusedRMSprop(_RMSpropState):
    """Emulates `torch_npu.optim.NpuFusedRMSprop`: torch's RMSprop (eps added after the square root,
    L2 weight decay, optional momentum and centering)."""

    _sparse_error = "NpuFusedRMSprop does not support sparse gradients."

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
    ) -> None:
        _check_rmsprop(lr, eps, momentum, weight_decay, alpha)
        defaults = dict(
            lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay
        )
        super().__init__(params, defaults)

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        alpha = group["alpha"]
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        square_avg = state["square_avg"].mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if group["centered"]:
            grad_avg = state["grad_avg"].mul_(alpha).add_(grad, alpha=1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_().add_(group["eps"])
        else:
            avg = square_avg.sqrt().add_(group["eps"])
        if group["momentum"] > 0:
            buf = state["momentum_buffer"].mul_(group["momentum"]).addcdiv_(grad, avg)
            param.add_(buf, alpha=-group["lr"])
        else:
            param.addcdiv_(grad, avg, value=-group["lr"])


class NpuFusedRMSpropTF(_RMSpropState):
    """Emulates `torch_npu.optim.NpuFusedRMSpropTF`, TensorFlow's RMSprop (as timm's RMSpropTF):
    square_avg starts at ones and is updated as `sq += (1 - alpha) * (g*g - sq)`, eps goes inside the
    square root, `lr_in_momentum` (default) accumulates lr in the momentum buffer. With
    `decoupled_decay` the decay is `param -= weight_decay * param`, not scaled by lr. The default
    alpha is 0.9 (the real docstring says 0.99)."""

    _sparse_error = "NpuFusedRMSpropTF does not support sparse gradients."

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.9,
        eps: float = 1e-10,
        weight_decay: float = 0,
        momentum: float = 0.0,
        centered: bool = False,
        decoupled_decay: bool = False,
        lr_in_momentum: bool = True,
    ) -> None:
        _check_rmsprop(lr, eps, momentum, weight_decay, alpha)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            decoupled_decay=decoupled_decay,
            lr_in_momentum=lr_in_momentum,
        )
        super().__init__(params, defaults)

    def _init_param_state(self, p: Tensor, group: dict[str, Any]) -> None:
        if not self.state[p]:
            super()._init_param_state(p, group)
            self.state[p]["square_avg"].fill_(1)

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        one_minus_alpha = 1.0 - group["alpha"]
        weight_decay = group["weight_decay"]
        if weight_decay != 0:
            if group.get("decoupled_decay"):
                param.add_(param, alpha=-weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        square_avg = state["square_avg"].add_(grad.pow(2) - state["square_avg"], alpha=one_minus_alpha)
        if group["centered"]:
            grad_avg = state["grad_avg"].add_(grad - state["grad_avg"], alpha=one_minus_alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).add(group["eps"]).sqrt_()
        else:
            avg = square_avg.add(group["eps"]).sqrt_()
        if group["momentum"] > 0:
            buf = state["momentum_buffer"].mul_(group["momentum"])
            if group.get("lr_in_momentum"):
                buf.addcdiv_(grad, avg, value=group["lr"])
                param.sub_(buf)
            else:
                buf.addcdiv_(grad, avg)
                param.add_(buf, alpha=-group["lr"])
        else:
            param.addcdiv_(grad, avg, value=-group["lr"])


class NpuFusedLamb(NpuFusedOptimizerBase):
    """Emulates `torch_npu.optim.NpuFusedLamb` (as cybertronai's pytorch-lamb): Adam moments without
    bias correction, `adam_step = exp_avg / (sqrt(exp_avg_sq) + eps) + weight_decay * param`, then
    `param -= lr * trust_ratio * adam_step` with the per-parameter trust ratio
    `clamp(||param||, 0, 10) / ||adam_step||` (1 where either norm is 0, always 1 with `adam=True`).

    Traps as in torch_npu: weight_decay is not validated; the closure runs after packing;
    `use_global_grad_norm=True` makes step() fail with AttributeError (the real class calls a
    `get_optimizer_combined_grads` method that does not exist).
    """

    _sparse_error = "NpuFusedLamb does not support sparse gradients, please consider SparseAdam instead."

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        adam: bool = False,
        use_global_grad_norm: bool = False,
    ) -> None:
        _reject(lr < 0.0, f"Invalid learning rate: {lr}")
        _reject(betas[0] < 0.0 or betas[0] >= 1.0, f"Invalid beta parameter at index 0: {betas[0]}")
        _reject(betas[1] < 0.0 or betas[1] >= 1.0, f"Invalid beta parameter at index 1: {betas[1]}")
        _reject(eps < 0.0, f"Invalid epsilon value: {eps}")
        self.adam = adam
        self.use_global_grad_norm = use_global_grad_norm
        self.global_grad_norm = torch.ones(1, device=backing())  # gradients are divided by it when > 1
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: _Closure = None) -> Any:
        loss = self._pack_then_close(closure)
        if self.use_global_grad_norm:
            raise AttributeError(
                "'NpuFusedLamb' object has no attribute 'get_optimizer_combined_grads' (torch_npu's "
                "NpuFusedLamb cannot step with use_global_grad_norm=True)"
            )
        self._run_group_steps()
        return loss

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return ["exp_avg", "exp_avg_sq"]

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        beta1, beta2 = group["betas"]
        if self.global_grad_norm.item() > 1:
            grad = grad / self.global_grad_norm
        state["step"] += 1
        exp_avg = state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        adam_step = exp_avg / exp_avg_sq.sqrt().add(group["eps"])
        if group["weight_decay"] != 0:
            adam_step.add_(param, alpha=group["weight_decay"])
        trust_ratio = torch.ones_like(param)
        if not self.adam:
            for p, step, ratio in zip(
                bucket.params, bucket.split(adam_step), bucket.split(trust_ratio), strict=True
            ):
                weight_norm = p.pow(2).sum().sqrt().clamp(0, 10)
                adam_norm = step.pow(2).sum().sqrt()
                if weight_norm != 0 and adam_norm != 0:
                    ratio.fill_(weight_norm / adam_norm)
        param.addcmul_(adam_step, trust_ratio, value=-group["lr"])


class NpuFusedAdamP(NpuFusedOptimizerBase):
    """Emulates `torch_npu.optim.NpuFusedAdamP` (as clovaai's AdamP): bias-corrected Adam whose
    update, for parameters of two or more dimensions, is projected off the parameter's direction
    when gradient and parameter are nearly orthogonal (cosine below `delta / sqrt(dim)`, per
    channel then per layer), which also scales the decoupled weight decay by `wd_ratio`.
    No argument validation and the closure runs after packing, as in torch_npu."""

    _sparse_error = "NpuFusedAdamP does not support sparse gradients, please consider SparseAdam instead"

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        delta: float = 0.1,
        wd_ratio: float = 0.1,
        nesterov: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            delta=delta,
            wd_ratio=wd_ratio,
            nesterov=nesterov,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: _Closure = None) -> Any:
        loss = self._pack_then_close(closure)
        self._run_group_steps()
        return loss

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return ["exp_avg", "exp_avg_sq"]

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        beta1, beta2 = group["betas"]
        state["step"] += 1
        bias_correction1 = 1 - beta1 ** state["step"]
        bias_correction2 = 1 - beta2 ** state["step"]
        exp_avg = state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(group["eps"])
        momentum = beta1 * exp_avg + (1 - beta1) * grad if group["nesterov"] else exp_avg
        perturb = momentum / denom
        wd_ratio = torch.ones_like(param)
        for p, p_perturb, p_wd_ratio in zip(
            bucket.params, bucket.split(perturb), bucket.split(wd_ratio), strict=True
        ):
            if p.dim() > 1:
                p_wd_ratio.fill_(
                    _project(p, _grad_of(p), p_perturb, group["delta"], group["wd_ratio"], group["eps"])
                )
        if group["weight_decay"] > 0:
            param.mul_(1 - group["lr"] * group["weight_decay"] * wd_ratio)
        param.add_(perturb, alpha=-group["lr"] / bias_correction1)


def _project(p: Tensor, grad: Tensor, perturb: Tensor, delta: float, wd_ratio: float, eps: float) -> float:
    """AdamP's projection, in place on `perturb`; returns the weight decay ratio to apply."""
    expand_size = [-1] + [1] * (p.dim() - 1)
    for view in (lambda x: x.view(x.size(0), -1), lambda x: x.view(1, -1)):
        p_view, grad_view = view(p), view(grad)
        cosine = (grad_view * p_view).sum(dim=1).abs()
        cosine = cosine / grad_view.norm(dim=1).add_(eps) / p_view.norm(dim=1).add_(eps)
        if cosine.max() < delta / math.sqrt(p_view.size(1)):
            p_n = p / p_view.norm(dim=1).view(expand_size).add_(eps)
            perturb -= p_n * view(p_n * perturb).sum(dim=1).view(expand_size)
            return wd_ratio
    return 1.0


WARMUP_DEFAULT = 0.002
DEGREE_DEFAULT = 0.5


def _warmup_cosine(x: float, warmup: float = WARMUP_DEFAULT) -> float:
    if x < warmup:
        return x / warmup
    raise TypeError(
        "cos(): argument 'input' (position 1) must be Tensor, not float (torch_npu's NpuFusedBertAdam "
        "computes its 'warmup_cosine' schedule with torch.cos on a float, which fails once warmup is over)"
    )


def _warmup_constant(x: float, warmup: float = WARMUP_DEFAULT) -> float:
    return x / warmup if x < warmup else 1.0


def _warmup_linear(x: float, warmup: float = WARMUP_DEFAULT) -> float:
    return x / warmup if x < warmup else max((x - 1.0) / (warmup - 1.0), 0.0)


def _warmup_poly(x: float, warmup: float = WARMUP_DEFAULT, degree: float = DEGREE_DEFAULT) -> float:
    return x / warmup if x < warmup else (1.0 - x) ** degree


SCHEDULES: dict[str, Callable[..., float]] = {
    "warmup_cosine": _warmup_cosine,
    "warmup_constant": _warmup_constant,
    "warmup_linear": _warmup_linear,
    "warmup_poly": _warmup_poly,
}


class NpuFusedBertAdam(NpuFusedOptimizerBase):
    """Emulates `torch_npu.optim.NpuFusedBertAdam` (BERT's Adam): no bias correction, decoupled
    weight decay added to the update, lr scaled by `schedule(step / t_total, warmup)` when
    t_total != -1, `lr` required.

    Traps as in torch_npu: gradients are clipped in place to `max_grad_norm` (the constructor's
    value; the param-group key is ignored) per param group and dtype, not per parameter; the
    per-parameter 'step' in the state stays 0, so a checkpointed optimizer restarts its schedule;
    the 'warmup_cosine' schedule raises TypeError once warmup is over.
    """

    _counts_param_steps = False
    _sparse_error = "NpuFusedBertAdam does not support sparse gradients"  # torch_npu fails while packing

    def __init__(
        self,
        params: ParamsT,
        lr: float = required,  # type: ignore[assignment]
        warmup: float = -1,
        t_total: int = -1,
        schedule: str = "warmup_linear",
        b1: float = 0.9,
        b2: float = 0.999,
        e: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
    ) -> None:
        _reject(lr is not required and lr < 0.0, f"Invalid learning rate: {lr}")
        _reject((warmup < 0.0 and warmup != -1) or warmup >= 1.0, f"Invalid warmup: {warmup}")
        _reject(schedule not in SCHEDULES, f"Invalid schedule parameter: {schedule}")
        _reject(b1 < 0.0 or b1 >= 1.0, f"Invalid b1 parameter: {b1}")
        _reject(b2 < 0.0 or b2 >= 1.0, f"Invalid b2 parameter: {b2}")
        _reject(e < 0.0, f"Invalid epsilon value: {e}")
        defaults = dict(
            lr=lr,
            schedule=schedule,
            warmup=warmup,
            t_total=t_total,
            b1=b1,
            b2=b2,
            e=e,
            weight_decay=weight_decay,
            max_grad_norm=max_grad_norm,
        )
        self.max_grad_norm = max_grad_norm
        super().__init__(params, defaults)

    def _state_keys(self, group: dict[str, Any]) -> list[str]:
        return ["exp_avg", "exp_avg_sq"]

    def _update(self, group: dict[str, Any], bucket: _Bucket) -> None:
        param, grad, state = bucket.param, bucket.grad, bucket.packed_state
        beta1, beta2 = group["b1"], group["b2"]
        if self.max_grad_norm > 0:
            clip_coef = self.max_grad_norm / (grad.float().abs().pow(2.0).sum().pow(0.5) + 1e-6)
            if clip_coef < 1.0:
                grad.mul_(clip_coef)
        exp_avg = state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        update = exp_avg / (exp_avg_sq.sqrt() + group["e"])
        if group["weight_decay"] > 0.0:
            update += group["weight_decay"] * param
        lr = group["lr"]
        if group["t_total"] != -1:
            lr *= SCHEDULES[group["schedule"]](state["step"] / group["t_total"], group["warmup"])
        param.add_(update, alpha=-lr)
        state["step"] += 1
