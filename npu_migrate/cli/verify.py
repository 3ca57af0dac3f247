"""`npu-migrate verify`: the original and the migrated model side by side."""

from __future__ import annotations

import contextlib
import math
import shlex
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from npu_migrate import processes
from npu_migrate.cli import common, forecasting
from npu_migrate.cli.apply import enabled_fixes
from npu_migrate.discover import DEFAULT_MAX_BYTES
from npu_migrate.forecast import kernels
from npu_migrate.model import Applicability, FileOutcome, SourceFile
from npu_migrate.pipeline import RuleSource
from npu_migrate.write import write_outcomes


class Rule(str, Enum):
    auto = "auto"
    tight = "tight"
    msprobe = "msprobe"


def verify(
    tree: Annotated[
        Path | None, typer.Argument(help="A CUDA project to migrate into a temporary copy and verify.")
    ] = None,
    entry: Annotated[str, typer.Option(help="FILE:FUNC in each tree returning (model, inputs, ...).")] = "",
    original: Annotated[Path | None, typer.Option(help="The original project.")] = None,
    migrated: Annotated[Path | None, typer.Option(help="The migrated project.")] = None,
    unsafe: Annotated[bool, typer.Option(help="With TREE: apply the unsafe (fused) fixes too.")] = False,
    steps: Annotated[int, typer.Option(min=0, help="Training steps to compare (needs a loss_fn).")] = 0,
    device_original: Annotated[
        str | None, typer.Option(help="The original side's device (default: cuda if present, else cpu).")
    ] = None,
    device_migrated: Annotated[str, typer.Option(help="The NPU device the migrated side uses.")] = "npu",
    emulate: common.Emulate = None,
    max_memory_ratio: Annotated[
        float | None, typer.Option(help="Fail when migrated/original peak memory exceeds this.")
    ] = None,
    rule: Annotated[
        Rule,
        typer.Option(
            help="The verdict rule: tight (share of elements within the dtype's tolerance, --rtol, "
            "--within-share), msprobe (cosine and max-abs thresholds), or auto: tight where both "
            "sides compute on the same hardware (the emulation over the CPU against the CPU)."
        ),
    ] = Rule.auto,
    within_share: Annotated[
        float, typer.Option(min=0, max=1, help="Tight rule: the share of elements that must agree.")
    ] = 0.999,
    cosine_warn: Annotated[
        float, typer.Option(help="msprobe rule: a row fails below this cosine if max abs > --abs-warn.")
    ] = 0.99,
    abs_warn: Annotated[float, typer.Option(help="See --cosine-warn.")] = 0.001,
    cosine_fail: Annotated[
        float, typer.Option(help="A row fails below this cosine whatever its errors.")
    ] = 0.9,
    abs_fail: Annotated[float, typer.Option(help="A row fails above this max abs error.")] = 1.0,
    loss_rtol: Annotated[float, typer.Option(help="Relative tolerance of a training step's loss.")] = 1e-4,
    rtol: Annotated[
        list[str] | None,
        typer.Option(
            help="DTYPE=VALUE, a dtype's tolerance where both sides compute on the same backing "
            "(repeatable; defaults: float32=1e-4, float16=2^-8, bfloat16=2^-6)."
        ),
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every row as JSON here.")] = None,
    onnx: Annotated[
        bool, typer.Option("--onnx", help="Also export the original to ONNX, check and run it.")
    ] = False,
    html_path: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")
    ] = None,
    realistic_weights: Annotated[
        bool,
        typer.Option(
            "--realistic-weights",
            help="Redraw the original's weights at the scale that keeps activations near unit "
            "variance (a trained model's spread, where approximations of GELU and its kin part), the "
            "same on both sides.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=1, help="Seconds each side may run before it is stopped.")
    ] = 600.0,
    max_side_memory: Annotated[
        float | None, typer.Option(min=0.1, help="GiB of data each side may allocate (default: no cap).")
    ] = None,
    weights_map: Annotated[
        Path | None,
        typer.Option(
            help="YAML: for a migrated model whose module tree differs, each migrated weight's "
            "source in the original's (a name; a list, concatenated; or {from: [...], dim: N, "
            "transpose: true}). Fused weights whose parts add up are paired without it."
        ),
    ] = None,
    dump: Annotated[
        Path | None,
        typer.Option(
            help="Also write each side's forward pass as an msprobe dump (DIR/original, "
            "DIR/migrated), for `msprobe compare` and Ascend's precision tools."
        ),
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Run each side under torchrun with N ranks on this host and compare rank by rank. "
            "The entry runs in every rank: it initialises the process group and returns the model "
            "wrapped as the trainer wraps it (DDP, FSDP, fully_shard) with this rank's inputs.",
        ),
    ] = None,
    tests_device: Annotated[
        str | None,
        typer.Option(
            help="With --tests: torch's default device for the migrated copy's tests (`npu`), so a "
            "suite that builds its models on the default device (the CPU) runs them on the NPU; the "
            "original's run as they are. Set the suite's own device switch (an environment variable, "
            "a pytest option) in the --tests command too.",
        ),
    ] = None,
    stand_in: Annotated[
        list[str] | None,
        typer.Option(
            help="The CUDA-only libraries the original may import as npu-migrate's plain-torch "
            "stand-ins where it runs without CUDA, NAME[==RELEASE] each (repeat it; `none`: no "
            "stand-in). Default: flash_attn 2.8.3, flash_attn_interface 3.0.0b1, xformers "
            "0.0.29, apex, transformer_engine 2.4. The release decides APIs that changed.",
        ),
    ] = None,
    rules: common.RulesOption = None,
    bisect: Annotated[
        bool,
        typer.Option(
            help="With TREE, when the migration diverges: find the rule and file whose changes "
            "make the difference, migrating and verifying again without them."
        ),
    ] = True,
    tests: Annotated[
        str | None,
        typer.Option(
            help="With TREE: the project's own tests, a pytest command run in copies of the original "
            "and of the migrated tree (this under the NPU emulation where no NPU is), compared test "
            "by test; each test that passed before and fails after is bisected to the change that "
            "breaks it. --timeout limits each side; --json and --html write the comparison."
        ),
    ] = None,
    forecast: Annotated[
        bool,
        typer.Option(
            "--forecast",
            help="Also say what a real NPU will do with the migrated model (the emulated side's run: "
            "operators without an NPU kernel, dtypes, shapes, host syncs, memory, collectives); in "
            "the report, --json and --html.",
        ),
    ] = False,
    torch_npu: forecasting.TorchNpu = kernels.DEFAULT_VERSION,
    chip: forecasting.Chip = "910B",
    card_memory: forecasting.CardMemory = None,
) -> None:
    """Run the original and the migrated model side by side; diff numerics module by module, and memory."""
    common.report_path(json_path, "--json", (".json",))
    common.report_path(html_path, "--html", (".html", ".htm"))
    thresholds = {
        "--max-memory-ratio": max_memory_ratio, "--within-share": within_share,
        "--cosine-warn": cosine_warn, "--abs-warn": abs_warn, "--cosine-fail": cosine_fail,
        "--abs-fail": abs_fail, "--loss-rtol": loss_rtol,
    }  # fmt: skip
    for option, value in thresholds.items():
        _finite(option, value)
    _finite("--timeout", timeout, "a time limit")
    _finite("--max-side-memory", max_side_memory, "a memory cap")
    if tests is not None:
        _verify_tests(
            tree, tests, unsafe, rules, emulate, timeout, bisect, json_path, html_path, tests_device
        )
    if not entry:
        common.fail("--entry FILE:FUNC is required")
    if (tree is None) == (original is None or migrated is None):
        common.fail("give either TREE, or both --original and --migrated")
    _check_entry(entry, [t for t in (tree, original, migrated) if t is not None])
    if nproc and (dump is not None or onnx):
        common.fail("--nproc runs the model in several ranks; --dump and --onnx work on one process")
    wanted = forecasting.request(emulate, torch_npu, chip, card_memory) if forecast else None
    try:
        from npu_migrate.verify import orchestrate
        from npu_migrate.verify import report as verify_report
        from npu_migrate.verify.msprobe_dump import PATH_CHARACTERS
        from npu_migrate.verify.tensors import Thresholds
    except ImportError as exc:
        common.needs_torch("verify", exc)
    if dump is not None and not PATH_CHARACTERS.fullmatch(str(dump.resolve())):
        common.fail(f"--dump {dump}: msprobe reads only paths of letters, digits and _.:/-")
    chosen = _stand_ins(stand_in or [])
    with contextlib.ExitStack() as stack:
        stack.enter_context(processes.contained())
        copy = None
        if tree is not None:
            copy = _migrated_copy(tree, unsafe, rules, stack)
            original, migrated = tree, copy.folder
            common.err.print(f"verify: {copy.summary()}", highlight=False, soft_wrap=True)
        options = orchestrate.Options(
            original=original,  # type: ignore[arg-type]
            migrated=migrated,  # type: ignore[arg-type]
            entry=entry,
            steps=steps,
            device_original=device_original,
            device_migrated=device_migrated,
            emulate=emulate,
            onnx=onnx,
            realistic=realistic_weights,
            timeout=timeout,
            memory=int(max_side_memory * 2**30) if max_side_memory else None,
            weights_map=_weights_map(weights_map) if weights_map else {},
            dump=dump.resolve() if dump else None,
            nproc=nproc or 0,
            forecast=wanted is not None,
            stand_ins=chosen,
            limits=Thresholds(
                cosine_warn=cosine_warn,
                abs_warn=abs_warn,
                cosine_fail=cosine_fail,
                abs_fail=abs_fail,
                loss_rtol=loss_rtol,
                max_memory_ratio=max_memory_ratio,
                dtype_rtol=_dtype_tolerances(rtol or []),
                within_share=within_share,
                rule=rule.value,
            ),
        )
        runs = stack.enter_context(orchestrate.Runs(options))
        with common.err.status("verifying") as status:
            try:
                result = runs.against(options.migrated, _phase(status))
            except orchestrate.SideFailed as exc:
                status.stop()
                common.fail(str(exc))
        result.command = shlex.join(["npu-migrate", *sys.argv[1:]])
        if wanted is not None:
            from npu_migrate.forecast import analysis

            recordings = analysis.read_recordings(orchestrate.forecast_folder(runs.work))
            result.forecast = analysis.forecast(recordings, wanted.table, wanted.chip, wanted.card_gib)
        if copy is not None:
            result.trees = (
                str(tree),
                f"a copy of {tree} that verify migrated ({'--unsafe' if unsafe else 'safe'})",
            )
            result.changes = dict(copy.changes().most_common())
        if copy is not None and not result.comparison.passed and bisect:
            culprit = _bisect(copy, runs)
            result.comparison.culprit = culprit or "no single rule's changes make the difference"
    verify_report.print_result(common.out, result)
    if dump is not None:
        common.err.print(
            f"msprobe dumps in {dump}/original and {dump}/migrated; compare them with\n"
            f"  msprobe compare -tp {dump}/migrated/step0 -gp {dump}/original/step0 -o OUT -fm",
            highlight=False,
            soft_wrap=True,
        )
    if json_path is not None:
        verify_report.write_json(json_path, result)
    if html_path is not None:
        from npu_migrate.verify.html import write_html

        write_html(html_path, result)
    raise typer.Exit(0 if result.comparison.passed else 1)


def _verify_tests(
    tree: Path | None,
    command: str,
    unsafe: bool,
    rules: list[Path] | None,
    emulate: bool | None,
    timeout: float,
    bisect: bool,
    json_path: Path | None,
    html_path: Path | None,
    device: str | None,
) -> None:
    """verify TREE --tests: the comparison, its reports and its exit code."""
    import json

    from npu_migrate.cli.verify_tests import print_comparison, verify_tests
    from npu_migrate.verify.tests import html_report

    if tree is None:
        common.fail("--tests needs TREE: the project to migrate into a copy and test")
    with contextlib.ExitStack() as stack:
        stack.enter_context(processes.contained())
        copy = _migrated_copy(tree, unsafe, rules, stack)
        common.err.print(f"verify: {copy.summary()}", highlight=False, soft_wrap=True)
        comparison = verify_tests(copy, command, emulate, timeout, bisect, device)
    print_comparison(comparison)
    if json_path is not None:
        json_path.write_text(json.dumps(comparison.as_dict(), indent=2) + "\n", encoding="utf-8")
    if html_path is not None:
        html_path.write_text(html_report(comparison), encoding="utf-8")
    raise typer.Exit(0 if comparison.passed else 1)


def _stand_ins(asked: list[str]) -> dict[str, str]:
    from npu_migrate.verify import stand_ins

    try:
        return stand_ins.choose(asked)
    except stand_ins.StandInError as exc:
        common.fail(str(exc))


def _weights_map(path: Path) -> dict[str, Any]:
    """--weights-map read and checked: {migrated name: WeightSource}."""
    import yaml

    from npu_migrate.verify.protocol import WeightSource

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        common.fail(f"--weights-map {path}: {str(exc).splitlines()[0]}")
    if not isinstance(data, dict):
        common.fail(f"--weights-map {path}: expected a mapping of migrated weight names")
    sources = {}
    for name, given in data.items():
        if isinstance(given, str | list):
            given = {"from": given}
        names = given.get("from") if isinstance(given, dict) else None
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            common.fail(f"--weights-map {path}: {name}: give a name, a list of names, or {{from: ...}}")
        extra = set(given) - {"from", "dim", "transpose"}
        if extra:
            common.fail(f"--weights-map {path}: {name}: unknown key {sorted(extra)[0]!r}")
        sources[str(name)] = WeightSource(
            names, int(given.get("dim", 0)), bool(given.get("transpose", False))
        )
    return sources


def _check_entry(entry: str, trees: list[Path]) -> None:
    """--entry is FILE:FUNC and FILE is in every tree given: said before torch starts."""
    file, _, func = entry.partition(":")
    if not file or not func.isidentifier():
        common.fail(f"--entry must be FILE:FUNC (e.g. entry.py:build), got {entry!r}")
    for tree in trees:
        if tree.is_dir() and not (tree / file).is_file():
            common.fail(f"no entry file {file} in {tree}")


def _dtype_tolerances(given: list[str]) -> dict[str, float]:
    from npu_migrate.verify.tensors import DTYPE_RTOL

    tolerances = dict(DTYPE_RTOL)
    for item in given:
        dtype, _, value = item.partition("=")
        try:
            tolerance = float(value)
        except ValueError:
            common.fail(f"--rtol takes DTYPE=VALUE (e.g. bfloat16=0.004), got {item!r}")
        _finite("--rtol", tolerance)
        tolerances[dtype.strip().removeprefix("torch.")] = tolerance
    return tolerances


def _finite(option: str, value: float | None, what: str = "a threshold") -> None:
    """A number the run goes by: NaN passes the options' range checks and compares false with
    everything (a shifted output would pass a threshold), an infinite one lets anything through
    (and neither is a number of seconds or bytes)."""
    if value is not None and not math.isfinite(value):
        common.fail(f"{option} {value}: {what} must be a finite number")


@dataclass
class _Copy:
    """verify TREE's migrated copy, and how to make others (for the bisection)."""

    tree: Path
    folder: Path
    files: list[SourceFile]
    rules: RuleSource
    enabled: frozenset[Applicability]
    outcomes: list[FileOutcome]

    def migrate(self, rules: RuleSource) -> list[FileOutcome]:
        return common.run(self.files, rules, self.enabled, None)

    def write(self, outcomes: list[FileOutcome], folder: Path) -> None:
        write_outcomes(outcomes, self.tree, folder)

    def changes(self) -> Counter[str]:
        """The copy's changes, by rule."""
        return Counter(
            finding.rule.code
            for outcome in self.outcomes
            for finding in outcome.result.findings
            if finding.applied
        )

    def summary(self) -> str:
        """What the migration changed, so a pass is known to have verified something."""
        codes = self.changes()
        changed = sum(outcome.changed for outcome in self.outcomes)
        rules = ", ".join(f"{code} x{count}" for code, count in codes.most_common())
        return (
            f"migrated a copy of {self.tree}: {codes.total()} change(s) in {changed} of "
            f"{len(self.outcomes)} file(s)" + (f" ({rules})" if rules else "")
        )


def _migrated_copy(tree: Path, unsafe: bool, rules: list[Path] | None, stack: contextlib.ExitStack) -> _Copy:
    """A temporary migrated copy of `tree`, made with apply's rules."""
    if not tree.is_dir():
        common.fail(f"no such folder: {tree}")
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="npu-migrate-copy-"))) / tree.name
    files = common.find_files([tree], DEFAULT_MAX_BYTES)
    source, enabled = RuleSource(rules or []), enabled_fixes(unsafe)
    copy = _Copy(tree, folder, files, source, enabled, common.run(files, source, enabled, None))
    copy.write(copy.outcomes, folder)
    return copy


def _phase(status: Any) -> Callable[[str], None]:
    """What verify is doing, as a spinner's text on a terminal, a line each where piped."""

    def phase(text: str) -> None:
        status.update(text)
        if not common.err.is_terminal:
            common.err.print(f"verify: {text}", highlight=False, soft_wrap=True)

    return phase


def _bisect(copy: _Copy, runs: Any) -> str | None:
    """The change of the migration that makes it diverge, in words (verify/bisect.py): each
    copy is compared with the original's run, which is not repeated."""
    from npu_migrate.verify import orchestrate
    from npu_migrate.verify.bisect import find_culprit

    def passes(folder: Path) -> bool:
        try:
            return bool(runs.against(folder, dump=False).comparison.passed)
        except orchestrate.SideFailed:
            return False

    with common.err.status("finding the change that makes the difference") as status:
        culprit = find_culprit(copy.outcomes, copy.rules, copy.migrate, copy.write, passes, _phase(status))
    return culprit.describe() if culprit else None
