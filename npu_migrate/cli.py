"""The `npu-migrate` command line: scan, apply and rules. Exit codes: 0 nothing to report,
1 findings (scan) or findings left for a human (apply), 2 usage or tool error."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from npu_migrate import docs, report
from npu_migrate.api import FileOutcome, default_jobs, run_rules
from npu_migrate.files import DEFAULT_MAX_BYTES, SourceFile, copy_tree, discover, write_atomic
from npu_migrate.ruleset import Applicability, Rule, RuleError, json_schema, load_rules, rule_files
from npu_migrate.testing import check_rules

app = typer.Typer(
    help="Move PyTorch CUDA code to Ascend NPUs: scan it, rewrite it, and check the rules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rules_app = typer.Typer(help="List, explain and test the migration rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class Format(str, Enum):
    text = "text"
    json = "json"


RulesOption = Annotated[
    list[Path] | None,
    typer.Option("--rules", help="Extra rule file or folder of *.yaml (repeatable)."),
]
PathsArgument = Annotated[list[Path], typer.Argument(help="Files or folders to process.")]
MaxSize = Annotated[int, typer.Option(help="Skip files larger than this many bytes.")]
Emulate = Annotated[
    bool | None,
    typer.Option(
        "--emulate/--no-emulate",
        help="Force the NPU emulation on or off (default: emulate when no real torch_npu imports).",
    ),
]
Jobs = Annotated[
    int | None, typer.Option("--jobs", "-j", min=1, help="Worker processes (default: one per CPU).")
]


def fail(text: str) -> NoReturn:
    err.print(f"[red]error:[/] {escape(text)}")
    raise typer.Exit(2)


def needs_torch(command: str, missing: ImportError) -> NoReturn:
    fail(f"{command} needs torch ({missing.name} is missing): pip install 'npu-migrate[verify]'")


def _rules(extra: list[Path] | None) -> list[Rule]:
    try:
        return load_rules(extra or [])
    except RuleError as exc:
        fail(str(exc))


def _discover(paths: list[Path], max_size: int) -> list[SourceFile]:
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}")
    return discover(paths, max_size)


@contextmanager
def _progress(total: int, label: str) -> Iterator:
    """A progress bar on stderr for long runs in a terminal; silent otherwise."""
    if total < 20 or not err.is_terminal:
        yield lambda: None
        return
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


def _run(
    files: list[SourceFile], rules: list[Rule], enabled: frozenset[Applicability], jobs: int | None
) -> list[FileOutcome]:
    with _progress(len(files), "migrating" if enabled else "scanning") as advance:
        return run_rules(files, rules, enabled, advance, jobs or default_jobs())


@app.command()
def scan(
    paths: PathsArgument,
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.text,
    rules: RulesOption = None,
    max_size: MaxSize = DEFAULT_MAX_BYTES,
    jobs: Jobs = None,
) -> None:
    """Inventory every CUDA-specific construct: what migrates automatically, what needs a human."""
    outcomes = _run(_discover(paths, max_size), _rules(rules), frozenset(), jobs)
    summary = report.Summary.of(outcomes)
    if format is Format.json:
        findings = [report.finding_dict(d, f) for d, f in report.all_findings(outcomes)]
        sys.stdout.write(json.dumps({"findings": findings, "summary": summary.as_dict()}, indent=2) + "\n")
    else:
        report.print_findings(out, report.all_findings(outcomes))
        report.print_summary(out, summary)
    raise typer.Exit(2 if summary.errors else 1 if summary.findings else 0)


@app.command()
def apply(
    paths: PathsArgument,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Write a migrated copy of the (single) folder here instead of in place."),
    ] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff of every change.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write nothing.")] = False,
    unsafe: Annotated[
        bool, typer.Option("--unsafe", help="Also apply fixes that may change behaviour.")
    ] = False,
    rules: RulesOption = None,
    change_list: Annotated[
        Path,
        typer.Option(help="Where to write the change list (.csv, and .json beside it)."),
    ] = Path("npu-migrate-changes.csv"),
    max_size: MaxSize = DEFAULT_MAX_BYTES,
    jobs: Jobs = None,
) -> None:
    """Rewrite CUDA code for the NPU, in place or into a copy (--out), keeping every comment and format."""
    enabled = frozenset({Applicability.safe, *([Applicability.unsafe] if unsafe else [])})
    loaded = _rules(rules)
    if out_dir is not None:
        if len(paths) != 1 or not paths[0].is_dir():
            fail("--out takes exactly one folder to copy")
        if out_dir.exists() and not (out_dir.is_dir() and not any(out_dir.iterdir())):
            fail(f"--out {out_dir} already exists and is not empty")
        if out_dir.resolve().is_relative_to(paths[0].resolve()):
            fail("--out must lie outside the folder being migrated")
    outcomes = _run(_discover(paths, max_size), loaded, enabled, jobs)
    changed = [o for o in outcomes if o.changed]
    if diff:
        for outcome in changed:
            sys.stdout.write(report.unified_diff(outcome))
    if not dry_run:
        try:
            change_list.parent.mkdir(parents=True, exist_ok=True)  # fail before touching sources
            _write(outcomes, paths, out_dir)
            csv_path, json_path = report.write_change_list(change_list, outcomes)
        except OSError as exc:
            fail(f"cannot write {exc.filename}: {exc.strerror}")
    summary = report.Summary.of(outcomes)
    console = err if diff else out
    left = [(display, f) for display, f in report.all_findings(outcomes) if not f.applied]
    applied = sum(f.applied for o in outcomes for f in o.result.findings)
    verb = "would rewrite" if dry_run else "rewrote"
    console.print(
        f"{verb} {len(changed)} file(s), {applied} change(s)"
        + (f" into {out_dir}" if out_dir and not dry_run else "")
    )
    if left:
        console.print(f"Left for a human ({len(left)}):")
        report.print_findings(console, left)
    report.print_problems(console, summary)
    if not dry_run:
        console.print(f"change list: {csv_path} and {json_path}")
    raise typer.Exit(2 if summary.errors else 1 if left else 0)


def _write(outcomes: list[FileOutcome], paths: list[Path], out_dir: Path | None) -> None:
    if out_dir is None:
        for outcome in outcomes:
            if outcome.changed:
                write_atomic(outcome.file.path, outcome.result.new_source)  # type: ignore[arg-type]
        return
    root = paths[0]
    staging = copy_tree(root, out_dir)
    for outcome in outcomes:
        if outcome.changed:
            write_atomic(staging / outcome.file.path.relative_to(root), outcome.result.new_source)  # type: ignore[arg-type]
    if out_dir.exists():
        out_dir.rmdir()  # checked empty above
    staging.rename(out_dir)


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    }
)
def run(
    ctx: typer.Context,
    script: Annotated[Path, typer.Argument(help="The Python script to run; its arguments follow it.")],
    emulate: Emulate = None,
) -> None:
    """Run a migrated script as `python SCRIPT ARGS` would, on the NPU emulation where no NPU exists."""
    if not script.is_file():
        fail(f"no such script: {script}")
    try:
        from npu_migrate.emulation.runner import real_torch_npu_imports, run_script
    except ImportError as exc:
        needs_torch("run", exc)
    if emulate is None:
        emulate = not real_torch_npu_imports()
    raise typer.Exit(run_script(script, list(ctx.args), emulate))


@app.command()
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
    emulate: Emulate = None,
    max_memory_ratio: Annotated[
        float | None, typer.Option(help="Fail when migrated/original peak memory exceeds this.")
    ] = None,
    cosine_warn: Annotated[
        float, typer.Option(help="A row fails below this cosine if max abs > --abs-warn.")
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
            help="DTYPE=VALUE, a dtype's relative tolerance (repeatable) "
            "(defaults: float16=2^-10, bfloat16=2^-8, float32=2^-20)."
        ),
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write every row as JSON here.")] = None,
    onnx: Annotated[
        bool, typer.Option("--onnx", help="Also export the original to ONNX, check and run it.")
    ] = False,
    html_path: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")
    ] = None,
    rules: RulesOption = None,
) -> None:
    """Run the original and the migrated model side by side; diff numerics module by module, and memory."""
    if not entry:
        fail("--entry FILE:FUNC is required")
    if (tree is None) == (original is None or migrated is None):
        fail("give either TREE, or both --original and --migrated")
    try:
        from npu_migrate.verify import orchestrate
        from npu_migrate.verify import report as verify_report
        from npu_migrate.verify.compare import Thresholds
    except ImportError as exc:
        needs_torch("verify", exc)
    with contextlib.ExitStack() as stack:
        if tree is not None:
            original, migrated = tree, _migrated_copy(tree, unsafe, rules, stack)
        options = orchestrate.Options(
            original=original,  # type: ignore[arg-type]
            migrated=migrated,  # type: ignore[arg-type]
            entry=entry,
            steps=steps,
            device_original=device_original,
            device_migrated=device_migrated,
            emulate=emulate,
            onnx=onnx,
            limits=Thresholds(
                cosine_warn=cosine_warn,
                abs_warn=abs_warn,
                cosine_fail=cosine_fail,
                abs_fail=abs_fail,
                loss_rtol=loss_rtol,
                max_memory_ratio=max_memory_ratio,
                dtype_rtol=_dtype_tolerances(rtol or []),
            ),
        )
        with err.status("verifying") as status:
            try:
                result = orchestrate.run(options, lambda text: status.update(text))
            except orchestrate.SideFailed as exc:
                status.stop()
                fail(str(exc))
    verify_report.print_result(out, result)
    if json_path is not None:
        verify_report.write_json(json_path, result)
    if html_path is not None:
        from npu_migrate.verify.html import write_html

        write_html(html_path, result)
    raise typer.Exit(0 if result.comparison.passed else 1)


def _dtype_tolerances(given: list[str]) -> dict[str, float]:
    from npu_migrate.verify.compare import DTYPE_RTOL

    tolerances = dict(DTYPE_RTOL)
    for item in given:
        dtype, _, value = item.partition("=")
        try:
            tolerances[dtype.strip().removeprefix("torch.")] = float(value)
        except ValueError:
            fail(f"--rtol takes DTYPE=VALUE (e.g. bfloat16=0.004), got {item!r}")
    return tolerances


def _migrated_copy(tree: Path, unsafe: bool, rules: list[Path] | None, stack: contextlib.ExitStack) -> Path:
    """A temporary migrated copy of `tree`, made with apply's rules."""
    if not tree.is_dir():
        fail(f"no such folder: {tree}")
    enabled = frozenset({Applicability.safe, *([Applicability.unsafe] if unsafe else [])})
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="npu-migrate-copy-"))) / tree.name
    outcomes = _run(_discover([tree], DEFAULT_MAX_BYTES), _rules(rules), enabled, None)
    _write(outcomes, [tree], folder)
    return folder


@rules_app.command("list")
def rules_list(rules: RulesOption = None) -> None:
    """Every rule: code, name, category, fix safety and summary."""
    table = Table("code", "name", "category", "fix", "summary")
    for rule in _rules(rules):
        table.add_row(rule.code, rule.name, rule.category, rule.applicability.value, rule.summary)
    out.print(table)


@rules_app.command("show")
def rules_show(code: str, rules: RulesOption = None) -> None:
    """One rule's page: what it does, why, its fix safety and an example."""
    rule = next((r for r in _rules(rules) if r.code == code.upper()), None)
    if rule is None:
        fail(f"no rule {code}; see `npu-migrate rules list`")
    out.print(Markdown(docs.rule_page(rule)))


@rules_app.command("docs")
def rules_docs(rules: RulesOption = None) -> None:
    """Print the rule catalog as Markdown (docs/rules.md is generated with this)."""
    sys.stdout.write(docs.catalog(_rules(rules)))


@rules_app.command("test")
def rules_test(files: Annotated[list[Path], typer.Argument(help="Rule files or folders.")]) -> None:
    """Run the examples of the given rule files; exit 1 on any failure."""
    try:
        rules = [r for path in rule_files(files) for r in load_rules([path], builtin=False)]
    except RuleError as exc:
        fail(str(exc))
    failures = check_rules(rules)
    for failure in failures:
        out.print(f"[red]FAIL[/] {escape(str(failure))}")
    examples = sum(len(r.examples) for r in rules)
    out.print(f"{examples - len(failures)} passed, {len(failures)} failed")
    raise typer.Exit(1 if failures else 0)


@rules_app.command("schema")
def rules_schema() -> None:
    """Print the JSON Schema of rule files (for editors)."""
    sys.stdout.write(json_schema())


def main() -> None:
    """The console entry point: an interrupted run ends quietly with the shell's code."""
    try:
        app(prog_name="npu-migrate")
    except KeyboardInterrupt:
        err.print("interrupted; every file is either untouched or completely rewritten")
        raise SystemExit(130) from None
