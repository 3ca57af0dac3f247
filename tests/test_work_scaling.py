"""How much work a file costs grows with the file, not with its square: counted in nodes the
engine's own walks visit (work, not time, so that a loaded machine cannot fail it). A script's
top level is one scope, and each call a rule may move asked the whole scope again: 750 lines of
module-level code took 11.5 CPU-seconds to apply, 1,500 took 45, and a 1,500-cell notebook hit
the per-file limit and was left unmigrated."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from npu_migrate.engine import holds

from .test_engine import migrate


def _device_uses(n: int) -> str:
    return "import torch\ndevice = 'cuda'\n" + "".join(
        f"t{i} = torch.ones(2, device=device)\n" for i in range(n)
    )


def _moved_later(n: int) -> str:
    return "import torch\n" + "".join(f"x{i} = torch.ones(3)\nx{i} = x{i}.cuda()\n" for i in range(n))


def _one_name_moved_again_and_again(n: int) -> str:
    return "import torch\n" + "x = torch.ones(3)\ny = x.cuda()\n" * n


def _nodes_walked(code: str, monkeypatch: pytest.MonkeyPatch) -> int:
    count = 0
    children = holds.children

    def counted(node: object) -> tuple:
        nonlocal count
        count += 1
        return children(node)  # type: ignore[arg-type]

    monkeypatch.setattr(holds, "children", counted)
    migrate(code)
    monkeypatch.setattr(holds, "children", children)
    return count


@pytest.mark.parametrize("form", [_device_uses, _moved_later, _one_name_moved_again_and_again])
def test_twice_the_module_level_code_is_about_twice_the_work(
    form: Callable[[int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    small, large = (_nodes_walked(form(n), monkeypatch) for n in (100, 200))
    assert large < 2.5 * small, (small, large)
