"""The emulated fused optimizers (npu_migrate.emulation.optim): their steps against torch's
optimizers or, where torch has none, small per-parameter references written from the algorithms the
real classes implement; their signatures and messages against the real torch_npu sources (read with
`ast`, never imported); and the traps of the real packing, which the emulation turns into errors."""

from __future__ import annotations

import ast
import copy
import inspect
import io
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.sources import torch_npu_sources

torch = pytest.importorskip("torch")

from torch.optim.optimizer import required  # noqa: E402

from npu_migrate.emulation import optim as fused  # noqa: E402

Factory = Callable[[list[Any]], Any]
STEPS = 5


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))


def batches(steps: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(8, 4, generator=generator), torch.randn(8, 3, generator=generator)) for _ in range(steps)
    ]


def backward(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def train(model: torch.nn.Module, optimizer: Any, steps: int = STEPS, seed: int = 1) -> None:
    for batch in batches(steps, seed):
        optimizer.zero_grad()
        backward(model, batch)
        optimizer.step()


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module, **tolerance: float) -> None:
    for (name, x), y in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(x, y, msg=lambda m, name=name: f"{name}: {m}", **tolerance)


# ---------------------------------------------------------------- per-parameter references


class PerParameter(torch.optim.Optimizer):
    """A reference optimizer: `update` for every parameter with a gradient, after `prepare(group)`."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            self.prepare(group)
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, p.grad, self.state[p], group)

    def prepare(self, group: dict[str, Any]) -> None:
        pass

    def update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        raise NotImplementedError


class RMSpropTFReference(PerParameter):
    """TensorFlow's RMSprop as timm's RMSpropTF writes it."""

    def __init__(self, params: Any, lr: float, **options: Any) -> None:
        defaults = dict(alpha=0.9, eps=1e-10, weight_decay=0, momentum=0.0, centered=False)
        defaults.update(decoupled_decay=False, lr_in_momentum=True)
        super().__init__(params, {**defaults, **options, "lr": lr})

    def update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        if not state:
            state.update(square_avg=torch.ones_like(p), buf=torch.zeros_like(p), grad_avg=torch.zeros_like(p))
        alpha, lr, eps, wd = group["alpha"], group["lr"], group["eps"], group["weight_decay"]
        if wd and group["decoupled_decay"]:
            p.mul_(1 - wd)
        elif wd:
            grad = grad + wd * p
        state["square_avg"] = alpha * state["square_avg"] + (1 - alpha) * grad * grad
        square_avg = state["square_avg"]
        if group["centered"]:
            state["grad_avg"] = alpha * state["grad_avg"] + (1 - alpha) * grad
            square_avg = square_avg - state["grad_avg"] ** 2
        avg = (square_avg + eps).sqrt()
        if group["momentum"] > 0 and group["lr_in_momentum"]:
            state["buf"] = group["momentum"] * state["buf"] + lr * grad / avg
            p.sub_(state["buf"])
        elif group["momentum"] > 0:
            state["buf"] = group["momentum"] * state["buf"] + grad / avg
            p.sub_(lr * state["buf"])
        else:
            p.sub_(lr * grad / avg)


class LambReference(PerParameter):
    """cybertronai's pytorch-lamb: no bias correction, trust ratio clamp(|p|, 0, 10) / |adam step|."""

    def __init__(self, params: Any, lr: float, weight_decay: float = 0, adam: bool = False) -> None:
        self.adam = adam
        super().__init__(params, dict(lr=lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=weight_decay))

    def update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        beta1, beta2 = group["betas"]
        if not state:
            state.update(exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        state["exp_avg"] = beta1 * state["exp_avg"] + (1 - beta1) * grad
        state["exp_avg_sq"] = beta2 * state["exp_avg_sq"] + (1 - beta2) * grad * grad
        adam_step = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["eps"]) + group["weight_decay"] * p
        weight_norm, adam_norm = p.norm().clamp(0, 10), adam_step.norm()
        trust_ratio = 1.0 if self.adam or weight_norm == 0 or adam_norm == 0 else weight_norm / adam_norm
        p.sub_(group["lr"] * trust_ratio * adam_step)


class AdamPReference(PerParameter):
    """clovaai's AdamP."""

    def __init__(self, params: Any, lr: float, **options: Any) -> None:
        defaults = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0, delta=0.1, wd_ratio=0.1, nesterov=False)
        super().__init__(params, {**defaults, **options, "lr": lr})

    @staticmethod
    def projection(
        p: torch.Tensor, grad: torch.Tensor, perturb: torch.Tensor, delta: float, wd_ratio: float, eps: float
    ) -> tuple[torch.Tensor, float]:
        expand = [-1] + [1] * (p.dim() - 1)
        for view in (lambda x: x.reshape(x.size(0), -1), lambda x: x.reshape(1, -1)):
            cosine = (view(grad) * view(p)).sum(dim=1).abs()
            cosine = cosine / (view(grad).norm(dim=1) + eps) / (view(p).norm(dim=1) + eps)
            if cosine.max() < delta / math.sqrt(view(p).size(1)):
                p_n = p / (view(p).norm(dim=1).view(expand) + eps)
                return perturb - p_n * view(p_n * perturb).sum(dim=1).view(expand), wd_ratio
        return perturb, 1

    def update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        beta1, beta2 = group["betas"]
        if not state:
            state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        state["step"] += 1
        state["exp_avg"] = beta1 * state["exp_avg"] + (1 - beta1) * grad
        state["exp_avg_sq"] = beta2 * state["exp_avg_sq"] + (1 - beta2) * grad * grad
        denom = state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** state["step"]) + group["eps"]
        momentum = beta1 * state["exp_avg"] + (1 - beta1) * grad if group["nesterov"] else state["exp_avg"]
        perturb, wd_ratio = momentum / denom, 1
        if p.dim() > 1:
            perturb, wd_ratio = self.projection(
                p, grad, perturb, group["delta"], group["wd_ratio"], group["eps"]
            )
        if group["weight_decay"] > 0:
            p.mul_(1 - group["lr"] * group["weight_decay"] * wd_ratio)
        p.sub_(group["lr"] / (1 - beta1 ** state["step"]) * perturb)


class BertAdamReference(PerParameter):
    """BERT's Adam, with gradients clipped over the whole param group as torch_npu's fused one does."""

    SCHEDULES: ClassVar[dict[str, Callable[[float, float], float]]] = {
        "warmup_linear": lambda x, warmup: x / warmup if x < warmup else max((x - 1.0) / (warmup - 1.0), 0.0),
        "warmup_poly": lambda x, warmup: x / warmup if x < warmup else (1.0 - x) ** 0.5,
    }

    def __init__(self, params: Any, lr: float, **options: Any) -> None:
        defaults = dict(warmup=-1, t_total=-1, schedule="warmup_linear", b1=0.9, b2=0.999, e=1e-6)
        super().__init__(
            params, {**defaults, "weight_decay": 0.01, "max_grad_norm": 1.0, **options, "lr": lr}
        )

    def prepare(self, group: dict[str, Any]) -> None:
        grads = [p.grad for p in group["params"] if p.grad is not None]
        total_norm = torch.cat([g.reshape(-1) for g in grads]).norm()
        if group["max_grad_norm"] > 0 and group["max_grad_norm"] / (total_norm + 1e-6) < 1:
            for g in grads:
                g.mul_(group["max_grad_norm"] / (total_norm + 1e-6))

    def update(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        b1, b2 = group["b1"], group["b2"]
        if not state:
            state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        state["exp_avg"] = b1 * state["exp_avg"] + (1 - b1) * grad
        state["exp_avg_sq"] = b2 * state["exp_avg_sq"] + (1 - b2) * grad * grad
        update = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["e"]) + group["weight_decay"] * p
        lr = group["lr"]
        if group["t_total"] != -1:
            lr *= self.SCHEDULES[group["schedule"]](state["step"] / group["t_total"], group["warmup"])
        p.sub_(lr * update)
        state["step"] += 1


# ---------------------------------------------------------------- the steps


def torch_optim(cls: type, **options: Any) -> Factory:
    return lambda params: cls(params, foreach=False, **options)


SAME_STEPS: dict[str, tuple[Factory, Factory]] = {
    "sgd": (lambda ps: fused.NpuFusedSGD(ps, lr=0.1), torch_optim(torch.optim.SGD, lr=0.1)),
    "sgd-momentum-dampening-wd": (
        lambda ps: fused.NpuFusedSGD(ps, lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.01),
        torch_optim(torch.optim.SGD, lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.01),
    ),
    "sgd-nesterov": (
        lambda ps: fused.NpuFusedSGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
        torch_optim(torch.optim.SGD, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    ),
    "adam": (lambda ps: fused.NpuFusedAdam(ps, lr=0.01), torch_optim(torch.optim.Adam, lr=0.01)),
    "adam-wd-amsgrad": (
        lambda ps: fused.NpuFusedAdam(ps, lr=0.01, weight_decay=0.1, amsgrad=True),
        torch_optim(torch.optim.Adam, lr=0.01, weight_decay=0.1, amsgrad=True),
    ),
    "adamw": (lambda ps: fused.NpuFusedAdamW(ps, lr=0.01), torch_optim(torch.optim.AdamW, lr=0.01)),
    "adamw-amsgrad": (
        lambda ps: fused.NpuFusedAdamW(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True),
        torch_optim(torch.optim.AdamW, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True),
    ),
    "adadelta": (
        lambda ps: fused.NpuFusedAdadelta(ps, weight_decay=0.01),
        torch_optim(torch.optim.Adadelta, weight_decay=0.01),
    ),
    "rmsprop": (lambda ps: fused.NpuFusedRMSprop(ps, lr=0.01), torch_optim(torch.optim.RMSprop, lr=0.01)),
    "rmsprop-centered-momentum-wd": (
        lambda ps: fused.NpuFusedRMSprop(ps, lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
        torch_optim(torch.optim.RMSprop, lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
    ),
    "rmsprop_tf": (
        lambda ps: fused.NpuFusedRMSpropTF(ps, lr=0.01),
        lambda ps: RMSpropTFReference(ps, lr=0.01),
    ),
    "rmsprop_tf-centered-momentum-wd": (
        lambda ps: fused.NpuFusedRMSpropTF(ps, lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
        lambda ps: RMSpropTFReference(ps, lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
    ),
    "rmsprop_tf-decoupled-lr-outside-momentum": (
        lambda ps: fused.NpuFusedRMSpropTF(
            ps, lr=0.01, momentum=0.5, weight_decay=0.01, decoupled_decay=True, lr_in_momentum=False
        ),
        lambda ps: RMSpropTFReference(
            ps, lr=0.01, momentum=0.5, weight_decay=0.01, decoupled_decay=True, lr_in_momentum=False
        ),
    ),
    "lamb": (
        lambda ps: fused.NpuFusedLamb(ps, lr=0.01, weight_decay=0.01),
        lambda ps: LambReference(ps, lr=0.01, weight_decay=0.01),
    ),
    "lamb-adam": (
        lambda ps: fused.NpuFusedLamb(ps, lr=0.01, adam=True),
        lambda ps: LambReference(ps, lr=0.01, adam=True),
    ),
    "adamp": (lambda ps: fused.NpuFusedAdamP(ps, lr=0.01), lambda ps: AdamPReference(ps, lr=0.01)),
    "adamp-projected-nesterov-wd": (
        lambda ps: fused.NpuFusedAdamP(ps, lr=0.01, weight_decay=0.1, delta=1.0, nesterov=True),
        lambda ps: AdamPReference(ps, lr=0.01, weight_decay=0.1, delta=1.0, nesterov=True),
    ),
    "bert_adam": (lambda ps: fused.NpuFusedBertAdam(ps, lr=0.01), lambda ps: BertAdamReference(ps, lr=0.01)),
    "bert_adam-clipped-scheduled": (
        lambda ps: fused.NpuFusedBertAdam(ps, lr=0.01, warmup=0.2, t_total=10, max_grad_norm=0.1),
        lambda ps: BertAdamReference(ps, lr=0.01, warmup=0.2, t_total=10, max_grad_norm=0.1),
    ),
    "bert_adam-poly": (
        lambda ps: fused.NpuFusedBertAdam(ps, lr=0.01, warmup=0.1, t_total=8, schedule="warmup_poly"),
        lambda ps: BertAdamReference(ps, lr=0.01, warmup=0.1, t_total=8, schedule="warmup_poly"),
    ),
}


@pytest.mark.parametrize("case", SAME_STEPS)
def test_steps_match_the_reference_optimizer(case: str) -> None:
    make_fused, make_reference = SAME_STEPS[case]
    model, expected = make_model(), make_model()
    parameters = list(model.parameters())
    before = [p.detach().clone() for p in parameters]
    train(model, make_fused(parameters))
    train(expected, make_reference(list(expected.parameters())))
    assert_same_parameters(model, expected, rtol=1e-5, atol=1e-6)
    assert list(model.parameters()) == parameters  # updated in place, never replaced
    assert all(not torch.equal(p, b) for p, b in zip(parameters, before, strict=True))


def test_float16_parameters_are_packed_apart_and_stepped_alike() -> None:
    model, expected = make_model(), make_model()
    for m in (model, expected):
        m[2].half()
        m.forward = lambda x, m=m: m[2](m[1](m[0](x)).half()).float()
    optimizer = fused.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, optimizer, steps=3)
    train(expected, torch.optim.SGD(expected.parameters(), lr=0.1, momentum=0.9, foreach=False), steps=3)
    assert_same_parameters(model, expected)
    float32, float16 = optimizer.get_combined_params()
    assert (float32.dtype, float32.numel()) == (torch.float32, 4 * 6 + 6)
    assert (float16.dtype, float16.numel()) == (torch.float16, 6 * 3 + 3)


def test_parameters_grads_and_state_live_in_the_packed_buffers() -> None:
    model = make_model()
    optimizer = fused.NpuFusedAdam(model.parameters(), lr=0.01)
    train(model, optimizer, steps=1)
    (params, _), (grads, _) = optimizer.get_combined_params(), optimizer.get_combined_grads()
    for p in model.parameters():
        assert p.untyped_storage().data_ptr() == params.untyped_storage().data_ptr()
        assert p.grad.untyped_storage().data_ptr() == grads.untyped_storage().data_ptr()
    states = [optimizer.state[p]["exp_avg"].untyped_storage().data_ptr() for p in model.parameters()]
    assert len(set(states)) == 1


def test_clip_grad_norm_fused_matches_torch() -> None:
    model, expected = make_model(), make_model()
    optimizer = fused.NpuFusedSGD(model.parameters(), lr=0.1)
    backward(model, batches(1)[0])
    backward(expected, batches(1)[0])
    norm = optimizer.clip_grad_norm_fused_(0.05)
    torch.testing.assert_close(norm, torch.nn.utils.clip_grad_norm_(expected.parameters(), 0.05))
    for p, q in zip(model.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


# ---------------------------------------------------------------- against the real sources

CLASSES = [name for name in fused.__all__ if name != "NpuFusedOptimizerBase"]


@pytest.fixture(scope="module")
def real_optim() -> Path:
    folder = torch_npu_sources() / "optim"
    assert folder.is_dir(), f"no {folder}"
    return folder


def parse(path: Path) -> ast.Module:
    with warnings.catch_warnings():  # the real docstrings have invalid escapes such as \s
        warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
        return ast.parse(path.read_text(encoding="utf-8"))


def real_class(folder: Path, name: str) -> tuple[ast.ClassDef, ast.Module]:
    """The class the real torch_npu.optim exports as `name`, found through its __init__ imports."""
    package = parse(folder / "__init__.py")
    module = next(
        node.module
        for node in package.body
        if isinstance(node, ast.ImportFrom) and any(alias.name == name for alias in node.names)
    )
    tree = parse(folder / f"{module}.py")
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), tree


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def real_parameters(function: ast.FunctionDef, module: ast.Module) -> list[tuple[str, str | None]]:
    """(name, repr of the default) of each parameter after self, module constants resolved."""
    constants = {
        target.id: ast.literal_eval(node.value)
        for node in module.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def value(node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            return repr(required if node.id == "required" else constants[node.id])
        return repr(ast.literal_eval(node))

    arguments = function.args
    assert not (arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs)
    names = [a.arg for a in arguments.args[1:]]
    defaults = [None] * (len(names) - len(arguments.defaults)) + [value(d) for d in arguments.defaults]
    return list(zip(names, defaults, strict=True))


def emulated_parameters(function: Callable[..., Any]) -> list[tuple[str, str | None]]:
    parameters = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, None if p.default is p.empty else repr(p.default)) for p in parameters]


def test_exports_the_real_classes(real_optim: Path) -> None:
    package = parse(real_optim / "__init__.py")
    real_all = next(
        ast.literal_eval(n.value)
        for n in package.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets)
    )
    assert sorted(fused.__all__) == sorted(real_all)
    assert all(issubclass(getattr(fused, name), torch.optim.Optimizer) for name in fused.__all__)


@pytest.mark.parametrize("name", fused.__all__)
def test_constructor_signature_is_the_real_one(real_optim: Path, name: str) -> None:
    cls, module = real_class(real_optim, name)
    assert emulated_parameters(getattr(fused, name).__init__) == real_parameters(
        method(cls, "__init__"), module
    )


def test_zero_grad_signature_and_error_are_the_real_ones(real_optim: Path) -> None:
    cls, module = real_class(real_optim, "NpuFusedOptimizerBase")
    zero_grad = method(cls, "zero_grad")
    assert emulated_parameters(fused.NpuFusedOptimizerBase.zero_grad) == real_parameters(zero_grad, module)
    messages = {
        n.value for n in ast.walk(zero_grad) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    assert "set_to_none is not supported in fused optimizers" in messages


INVALID_ARGUMENTS = [
    ("NpuFusedSGD", dict(lr=-1), "Invalid learning rate: -1"),
    ("NpuFusedSGD", dict(lr=0.1, momentum=-0.5), "Invalid momentum value: -0.5"),
    ("NpuFusedSGD", dict(lr=0.1, weight_decay=-1), "Invalid weight_decay value: -1"),
    ("NpuFusedSGD", dict(lr=0.1, nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    ("NpuFusedSGD", dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "Nesterov momentum requires"),
    ("NpuFusedAdam", dict(eps=-1e-8), "Invalid epsilon value: -1e-08"),
    ("NpuFusedAdam", dict(betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
    ("NpuFusedAdamW", dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    ("NpuFusedAdamW", dict(weight_decay=-0.01), "Invalid weight_decay value: -0.01"),
    ("NpuFusedAdadelta", dict(rho=1.5), "Invalid rho value: 1.5"),
    ("NpuFusedAdadelta", dict(lr=-1.0), "Invalid learning rate: -1.0"),
    ("NpuFusedRMSprop", dict(alpha=-0.9), "Invalid alpha value: -0.9"),
    ("NpuFusedRMSprop", dict(momentum=-1), "Invalid momentum value: -1"),
    ("NpuFusedRMSpropTF", dict(eps=-1), "Invalid epsilon value: -1"),
    ("NpuFusedLamb", dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    ("NpuFusedBertAdam", dict(lr=0.1, warmup=1.0), "Invalid warmup: 1.0"),
    ("NpuFusedBertAdam", dict(lr=0.1, schedule="cosine"), "Invalid schedule parameter: cosine"),
    ("NpuFusedBertAdam", dict(lr=0.1, b1=1.5), "Invalid b1 parameter: 1.5"),
    ("NpuFusedBertAdam", dict(lr=0.1, b2=-0.5), "Invalid b2 parameter: -0.5"),
    ("NpuFusedBertAdam", dict(lr=0.1, e=-1), "Invalid epsilon value: -1"),
]


@pytest.mark.parametrize(("name", "arguments", "message"), INVALID_ARGUMENTS)
def test_invalid_arguments_raise_the_real_value_errors(name: str, arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        getattr(fused, name)(make_model().parameters(), **arguments)


def test_invalid_argument_messages_are_in_the_real_sources(real_optim: Path) -> None:
    for name, _, message in INVALID_ARGUMENTS:
        _, module = real_class(real_optim, name)
        strings = {
            n.value for n in ast.walk(module) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert any(s.startswith(message.split(": ")[0]) for s in strings), (name, message)


@pytest.mark.parametrize("name", ["NpuFusedSGD", "NpuFusedBertAdam"])
def test_lr_is_required_where_the_real_one_requires_it(name: str) -> None:
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        getattr(fused, name)(make_model().parameters())


# ---------------------------------------------------------------- zero_grad and state_dict

FACTORIES: dict[str, Factory] = {
    "NpuFusedSGD": lambda ps: fused.NpuFusedSGD(ps, lr=0.1, momentum=0.9),
    "NpuFusedAdam": lambda ps: fused.NpuFusedAdam(ps, lr=0.01, amsgrad=True),
    "NpuFusedAdamW": lambda ps: fused.NpuFusedAdamW(ps, lr=0.01),
    "NpuFusedAdadelta": lambda ps: fused.NpuFusedAdadelta(ps),
    "NpuFusedRMSprop": lambda ps: fused.NpuFusedRMSprop(ps, momentum=0.5, centered=True),
    "NpuFusedRMSpropTF": lambda ps: fused.NpuFusedRMSpropTF(ps, momentum=0.5),
    "NpuFusedLamb": lambda ps: fused.NpuFusedLamb(ps, lr=0.01),
    "NpuFusedAdamP": lambda ps: fused.NpuFusedAdamP(ps, lr=0.01, weight_decay=0.1),
    "NpuFusedBertAdam": lambda ps: fused.NpuFusedBertAdam(ps, lr=0.01),
}


def test_every_class_is_covered() -> None:
    assert sorted(FACTORIES) == sorted(CLASSES)


@pytest.mark.parametrize("name", CLASSES)
def test_zero_grad_set_to_none_raises_and_the_default_zeroes_in_place(name: str) -> None:
    model = make_model()
    optimizer = FACTORIES[name](list(model.parameters()))
    with pytest.raises(ValueError, match=r"^set_to_none is not supported in fused optimizers$"):
        optimizer.zero_grad(set_to_none=True)
    optimizer.zero_grad()  # no gradient yet: nothing to pack, nothing to do
    train(model, optimizer, steps=2)
    grads = [p.grad for p in model.parameters()]
    optimizer.zero_grad()
    assert all(p.grad is g and not g.any() for p, g in zip(model.parameters(), grads, strict=True))
    with pytest.raises(ValueError, match="set_to_none is not supported"):
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("name", CLASSES)
def test_state_dict_round_trip(name: str) -> None:
    model = make_model()
    optimizer = FACTORIES[name](list(model.parameters()))
    train(model, optimizer, steps=3)
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    resumed = copy.deepcopy(model)
    resumed_optimizer = FACTORIES[name](list(resumed.parameters()))
    resumed_optimizer.load_state_dict(torch.load(buffer))
    assert resumed_optimizer.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
    train(model, optimizer, steps=2, seed=2)
    train(resumed, resumed_optimizer, steps=2, seed=2)
    assert_same_parameters(model, resumed, rtol=0, atol=0)


def test_bert_adam_keeps_per_parameter_steps_at_zero_so_a_resumed_schedule_restarts() -> None:
    model = make_model()
    optimizer = fused.NpuFusedBertAdam(model.parameters(), lr=0.01, warmup=0.1, t_total=10)
    train(model, optimizer, steps=3)
    assert all(state["step"] == 0 for state in optimizer.state_dict()["state"].values())


@pytest.mark.parametrize("name", CLASSES)
def test_load_state_dict_after_the_first_step_raises(name: str) -> None:
    model = make_model()
    optimizer = FACTORIES[name](list(model.parameters()))
    train(model, optimizer, steps=1)
    with pytest.raises(RuntimeError, match="would silently ignore the loaded one"):
        optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))


# ---------------------------------------------------------------- the traps of packing


@pytest.mark.parametrize(
    "reallocate",
    [
        lambda model: setattr(model[0].weight, "data", model[0].weight.data.clone()),
        lambda model: model.to(torch.float64),
    ],
    ids=["param.data", "model.to"],
)
def test_a_parameter_reallocated_after_the_first_step_is_detected(reallocate: Callable[[Any], Any]) -> None:
    model = make_model()
    optimizer = fused.NpuFusedAdamW(model.parameters(), lr=0.01)
    train(model, optimizer, steps=1)
    reallocate(model)
    optimizer.zero_grad()
    backward(model, (batches(1)[0][0].to(model[0].weight.dtype), batches(1)[0][1].to(model[0].weight.dtype)))
    with pytest.raises(
        RuntimeError, match=r"parameter 0 of param group 0 \(shape \(6, 4\)\) was re-allocated.*"
    ):
        optimizer.step()
    with pytest.raises(RuntimeError, match="would silently stop updating this parameter"):
        optimizer.step()


@pytest.mark.parametrize(
    "drop", [lambda model: model.zero_grad(), lambda model: setattr(model[2].bias, "grad", None)]
)
def test_a_gradient_dropped_after_packing_is_detected(drop: Callable[[Any], Any]) -> None:
    model = make_model()
    optimizer = fused.NpuFusedSGD(model.parameters(), lr=0.1)
    train(model, optimizer, steps=1)
    drop(model)
    backward(model, batches(1)[0])
    with pytest.raises(RuntimeError, match="silently apply a stale or zeroed gradient"):
        optimizer.step()


@pytest.mark.parametrize(("name", "consequence"), [("NpuFusedSGD", "silently"), ("NpuFusedAdam", "KeyError")])
def test_a_parameter_without_gradient_at_packing_is_never_packed(name: str, consequence: str) -> None:
    model = make_model()
    optimizer = FACTORIES[name](list(model.parameters()))
    model[2].requires_grad_(False)
    train(model, optimizer, steps=1)
    assert model[2].weight.grad is None and not optimizer.state[model[2].weight]
    model[2].requires_grad_(True)  # unfrozen later: the real optimizer never updates it
    backward(model, batches(1)[0])
    with pytest.raises(RuntimeError, match=f"param group 0 .* had no gradient when .*{consequence}"):
        optimizer.step()


def test_a_first_step_before_any_gradient_breaks_the_stateful_optimizers() -> None:
    model, plain = make_model(), make_model()
    optimizer, sgd = fused.NpuFusedAdam(model.parameters()), fused.NpuFusedSGD(plain.parameters(), lr=0.1)
    optimizer.step()  # e.g. to silence the lr-scheduler warning: nothing to pack yet
    sgd.step()
    train(plain, sgd, steps=2)  # no state needed: fine, as on torch_npu
    with pytest.raises(RuntimeError, match="first step\\(\\) ran before any parameter had a gradient"):
        train(model, optimizer, steps=1)


def test_add_param_group_after_packing_raises() -> None:
    model = make_model()
    optimizer = fused.NpuFusedAdam(model[0].parameters())
    optimizer.add_param_group({"params": [model[2].weight]})  # before packing: fine
    train(model, optimizer, steps=1)
    with pytest.raises(RuntimeError, match="IndexError"):
        optimizer.add_param_group({"params": [model[2].bias]})


def test_only_float32_and_float16_parameters_are_accepted() -> None:
    model = make_model().to(torch.bfloat16)
    optimizer = fused.NpuFusedAdam(model.parameters())
    model(torch.randn(2, 4, dtype=torch.bfloat16)).sum().backward()
    with pytest.raises(TypeError, match=r"must be either float32 or float16, but received torch\.bfloat16"):
        optimizer.step()


def test_non_contiguous_parameters_are_refused() -> None:
    weight = torch.nn.Parameter(torch.randn(4, 3).t())
    optimizer = fused.NpuFusedSGD([weight], lr=0.1)
    (weight * 2).sum().backward()
    with pytest.raises(RuntimeError, match=r"^Tensors to combine must be contiguous\.$"):
        optimizer.step()


def test_sparse_gradients_are_refused() -> None:
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    optimizer = fused.NpuFusedAdam(embedding.parameters())
    embedding(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="NpuFusedAdam does not support sparse gradients"):
        optimizer.step()


def test_the_closure_runs_without_gradients_as_in_torch_npu() -> None:
    model = make_model()
    optimizer = fused.NpuFusedAdam(model.parameters())
    with pytest.raises(RuntimeError, match="does not require grad"):
        optimizer.step(lambda: backward(model, batches(1)[0]))
    lamb = fused.NpuFusedLamb(model.parameters())  # packs first, then runs the closure with gradients
    backward(model, batches(1)[0])
    loss = lamb.step(lambda: backward(model, batches(1)[0]))
    assert loss.requires_grad


def test_lamb_global_grad_norm_fails_as_in_torch_npu() -> None:
    model = make_model()
    optimizer = fused.NpuFusedLamb(model.parameters(), use_global_grad_norm=True)
    backward(model, batches(1)[0])
    with pytest.raises(AttributeError, match="get_optimizer_combined_grads"):
        optimizer.step()


def test_bert_adam_cosine_schedule_fails_after_warmup_as_in_torch_npu() -> None:
    model = make_model()
    optimizer = fused.NpuFusedBertAdam(
        model.parameters(), lr=0.01, warmup=0.1, t_total=4, schedule="warmup_cosine"
    )
    train(model, optimizer, steps=1)  # x = 0 / 4: still warming up
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        train(model, optimizer, steps=1)
