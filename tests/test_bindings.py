"""Which assignments of a name reach a statement (engine.bindings): what `moved_by` follows from a
call's result to the line that moves it to a device."""

from __future__ import annotations

import libcst as cst

from npu_migrate.engine.bindings import Bindings, module_scope

CODE = """
def f(device, flag):
    acc = torch.zeros(3)
    other = acc
    if flag:
        acc = acc.double()
    acc.to(device)
    acc = torch.ones(3)
    acc.to(device)
"""


def _function() -> cst.FunctionDef:
    function = cst.parse_module(CODE).body[0]  # the code's one function
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    return function


def _values(bindings: Bindings, name: str) -> list[str]:
    reaching = bindings.reaching(name)
    return [cst.Module([]).code_for_node(b.value) if b.value is not None else "?" for b in reaching]


def test_the_last_binding_that_always_runs_and_the_branches_after_it_reach() -> None:
    function = _function()
    body = function.body.body  # type: ignore[union-attr]
    first_move, second_move = body[3], body[5]
    assert _values(Bindings(function, first_move), "acc") == ["torch.zeros(3)", "acc.double()"]
    assert _values(Bindings(function, second_move), "acc") == ["torch.ones(3)"]


def test_a_name_bound_only_in_a_branch_has_no_sure_binding() -> None:
    code = "def f(flag):\n    if flag:\n        x = torch.zeros(1)\n    x.cuda()\n"
    function = cst.parse_module(code).body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    assert Bindings(function, function.body.body[1]).reaching("x") == []


def test_a_script_is_read_as_a_function() -> None:
    module = cst.parse_module("x = torch.zeros(1)\ny = x\nx.cuda()\n")
    scope = module_scope(module)
    move = module.body[2]
    assert module_scope(module) is scope  # one scope per module: what is found in it is found once
    assert _values(Bindings(scope, move), "x") == ["torch.zeros(1)"]
