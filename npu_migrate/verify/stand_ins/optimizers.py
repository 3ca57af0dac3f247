"""apex's fused optimizers in plain torch, with the update their multi-tensor kernels apply
(csrc/multi_tensor_adam.cu, the SGD of torch.optim): FusedAdam in its AdamW mode (decoupled
weight decay, the default) or its Adam mode (L2, `adam_w_mode=False`), bias correction optional;
FusedSGD as torch's SGD, weight decay before or after the momentum."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

Tensor = torch.Tensor


class FusedAdam(Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        capturable: bool = False,
        master_weights: bool = False,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        defaults = {
            "lr": lr,
            "bias_correction": bias_correction,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults)
        self.adam_w_mode = adam_w_mode

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            step = group["step"]
            bc1 = 1 - beta1**step if group["bias_correction"] else 1.0
            bc2 = 1 - beta2**step if group["bias_correction"] else 1.0
            decay, lr, eps = group["weight_decay"], group["lr"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                g, w = p.grad.float(), p.float()
                if not self.adam_w_mode:
                    g = g + decay * w
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                update = (m / bc1) / ((v / bc2).sqrt() + eps)
                if self.adam_w_mode:
                    update = update + decay * w
                p.copy_(w - lr * update)
        return loss


class FusedSGD(torch.optim.SGD):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        wd_after_momentum: bool = False,
        materialize_master_grads: bool = True,
        set_grad_none: bool = False,
    ) -> None:
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov)
        self.wd_after_momentum = wd_after_momentum

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        if not self.wd_after_momentum:
            return super().step(closure)
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            momentum, dampening, decay = group["momentum"], group["dampening"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if momentum:
                    buffer = self.state[p].get("momentum_buffer")
                    if buffer is None:
                        buffer = self.state[p]["momentum_buffer"] = d.clone()
                    else:
                        buffer.mul_(momentum).add_(d, alpha=1 - dampening)
                    d = d + momentum * buffer if group["nesterov"] else buffer
                if decay:
                    d = d + decay * p
                p.add_(d, alpha=-group["lr"])
        return loss


class FusedLAMB(Optimizer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "npu-migrate's apex stand-in has no FusedLAMB (its two-stage trust-ratio update): "
            "verify the original with an optimizer whose update is known, or on CUDA with apex"
        )
