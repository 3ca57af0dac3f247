"""Adding the imports a rewritten file needs: each module once, right after the file's torch
import (else after its last top-level import, else after the docstring and __future__ lines)."""

from __future__ import annotations

import libcst as cst

from npu_migrate.names import ImportTable, module_name


def _imported_modules(statement: cst.BaseStatement) -> list[str]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    found = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            found.extend(module_name(alias.name) for alias in small.names)
        elif isinstance(small, cst.ImportFrom) and not small.relative:
            found.append(module_name(small.module))
    return found


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def insertion_index(body: list[cst.BaseStatement]) -> int:
    last_torch = last_import = -1
    header = 0
    for i, statement in enumerate(body):
        modules = _imported_modules(statement)
        if any(m == "torch" or m.startswith("torch.") for m in modules):
            last_torch = i
        if modules:
            last_import = i
        if (i == header and _is_docstring(statement)) or modules == ["__future__"]:
            header = i + 1
    if last_torch >= 0:
        return last_torch + 1
    return last_import + 1 if last_import >= 0 else header


def add_imports(
    module: cst.Module, wanted: list[str], table: ImportTable
) -> tuple[cst.Module, list[tuple[int, str]]]:
    """The module with `import X` added for each wanted module it does not bind yet, and
    (line, module) for each line added."""
    missing = [m for m in dict.fromkeys(wanted) if not table.binds_module(m)]
    if not missing:
        return module, []
    missing.sort(key=lambda m: m != "torch")  # torch must come before torch_npu
    body = list(module.body)
    at = insertion_index(body)
    first_line = module.with_changes(body=body[:at]).code.count("\n") + 1
    new = [cst.parse_statement(f"import {m}\n", config=module.config_for_parsing) for m in missing]
    added = [(first_line + i, m) for i, m in enumerate(missing)]
    return module.with_changes(body=[*body[:at], *new, *body[at:]]), added
