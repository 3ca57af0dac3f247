"""Hostile input: what a tree, a rule file or the file system can do to a run must never cost the
user a file, hang the run, or take it down. Each case runs the real command line in a process
of its own (a crash or a hang shows as such), with a timeout."""

from __future__ import annotations

import csv
import json
import os
import resource
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from npu_migrate import pipeline
from npu_migrate.discover import discover
from npu_migrate.model import Applicability
from npu_migrate.pipeline import RuleSource, run_rules
from npu_migrate.prefilter import Prefilter
from npu_migrate.rules.files import RuleError
from npu_migrate.rules.load import load_rules
from npu_migrate.write import write_outcomes

from .test_cli import project as tree

CUDA = "import torch\nx.cuda()\ntorch.cuda.synchronize()\n"
MIGRATED = "import torch\nimport torch_npu\nx.npu()\ntorch.npu.synchronize()\n"


def cli(*args: str | Path, cwd: Path, limit_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    def file_size_limit() -> None:  # a full disk: writes past the limit fail (EFBIG) instead of killing
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))  # type: ignore[arg-type]

    env = {**os.environ, "COLUMNS": "200", "XDG_CACHE_HOME": str(cwd / ".cache")}
    return subprocess.run(
        [sys.executable, "-m", "npu_migrate", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,  # a guard against a hang, not a time limit
        check=False,
        preexec_fn=file_size_limit if limit_bytes is not None else None,
    )


def no_traceback(run: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert run.returncode in (0, 1, 2), run.returncode


# ------------------------------------------------------------------ what the tree holds


def test_a_fifo_named_like_python_is_not_read(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA})
    os.mkfifo(root / "pipe.py")
    run = cli("apply", root, cwd=tmp_path)
    no_traceback(run)
    assert "pipe.py: not a regular file" in run.stdout
    assert (root / "train.py").read_text() == MIGRATED


def test_a_link_stays_a_link_and_its_target_is_migrated_once(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pkg/model.py": CUDA})
    (root / "model.py").symlink_to("pkg/model.py")
    run = cli("apply", root, cwd=tmp_path)
    no_traceback(run)
    assert (root / "model.py").is_symlink()
    assert (root / "pkg" / "model.py").read_text() == MIGRATED
    assert "migrated there, not through the link" in run.stdout
    again = cli("apply", root, cwd=tmp_path)
    assert "rewrote 0 file(s)" in again.stdout
    copy = cli("apply", root, "--out", tmp_path / "copy", cwd=tmp_path)
    assert copy.returncode in (0, 1)
    assert (tmp_path / "copy" / "model.py").is_symlink()
    assert (tmp_path / "copy" / "model.py").read_text() == MIGRATED


def test_a_link_loop_is_reported(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA})
    (root / "a.py").symlink_to("b.py")
    (root / "b.py").symlink_to("a.py")
    run = cli("scan", root, cwd=tmp_path)
    no_traceback(run)
    assert "a loop of symbolic links" in run.stdout or "a link to" in run.stdout


def test_odd_file_names_are_printed_escaped(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA})
    (root / os.fsdecode(b"caf\xe9.py")).write_text(CUDA)
    (root / "line\nbreak.py").write_text(CUDA)
    (root / "esc\x1b[31m.py").write_text(CUDA)
    run = cli("scan", root, cwd=tmp_path)
    no_traceback(run)
    assert "caf\\udce9.py" in run.stdout or "caf\\xe9.py" in run.stdout
    assert "line\\nbreak.py" in run.stdout
    assert "\x1b[31m" not in run.stdout


# ------------------------------------------------------------------ what the code holds


@pytest.mark.parametrize(
    ("name", "code", "migrated"),
    [
        ("parens.py", "y = " + "(" * 1500 + "x" + ")" * 1500 + "\n", False),
        ("sum.py", "y = " + " + ".join(["a"] * 20000) + "\n", False),
        ("chain.py", "y = " + " + ".join(["a"] * 400) + "\n", True),
        ("elif.py", "if a: pass\n" + "".join(f"elif a{i}: pass\n" for i in range(500)), True),
    ],
)
def test_deep_nesting_neither_crashes_nor_hangs(tmp_path: Path, name: str, code: str, migrated: bool) -> None:
    root = tree(tmp_path, {name: CUDA + code, "other.py": CUDA})
    run = cli("apply", root, "--no-cache", cwd=tmp_path)
    no_traceback(run)
    assert (root / "other.py").read_text() == MIGRATED  # the rest of the run goes on
    assert ((root / name).read_text() == MIGRATED + code) is migrated
    if not migrated:  # what the tool cannot read fails the gate like a finding, not as a tool error
        assert run.returncode == 1 and f"not read {root / name}" in run.stdout


def test_a_mapping_nested_150_deep_is_decided_once_per_level(tmp_path: Path) -> None:
    """Each level of nested dicts asks whether its entries name the NPU (fuzz case 258 of seed 7
    took 13 s when every level walked its whole subtree again): an NPU key at the bottom holds
    the CUDA code beside it, and the same nest without one is rewritten."""
    nest = '{"a": ' * 149 + "{KEY: x.cuda()}" + "}" * 149
    npu = "cfg = " + nest.replace("KEY", '"npu"') + "\n"
    plain = "cfg = " + nest.replace("KEY", '"gpu"') + "\n"
    root = tree(tmp_path, {"npu.py": CUDA + npu, "plain.py": CUDA + plain})
    run = cli("apply", root, "--no-cache", cwd=tmp_path)
    no_traceback(run)
    assert (root / "npu.py").read_text() == MIGRATED + npu
    assert (root / "plain.py").read_text() == MIGRATED + plain.replace("x.cuda()", "x.npu()")


def test_edge_bytes_are_kept(tmp_path: Path) -> None:
    root = tree(tmp_path, {"cr.py": CUDA.replace("\n", "\r"), "ff.py": "\x0c" + CUDA})
    cli("apply", root, cwd=tmp_path)
    assert (root / "cr.py").read_bytes() == MIGRATED.replace("\n", "\r").encode()
    assert (root / "ff.py").read_bytes() == ("\x0c" + MIGRATED).encode()


# ------------------------------------------------------------------ what the rules hold


def rule_file(tmp_path: Path, **fix: object) -> Path:
    rule = {
        "code": "HOU101",
        "name": "house",
        "summary": "s",
        "why": "w",
        "message": "m",
        "applicability": "safe",
        "severity": "warning",
        "match": {"string": "cuda", "where": [{"assign": ["device"]}]},
        "fix": fix,
        "examples": [{"before": "device = 'cuda'\n", "after": "device = 'npu'\n"}],
    }
    path = tmp_path / "house.yaml"
    path.write_text(
        yaml.safe_dump({"category": "house", "codes": "HOU1xx", "description": "d", "rules": [rule]})
    )
    return path


def test_a_fix_may_not_name_a_statement_as_an_import(tmp_path: Path) -> None:
    rules = rule_file(
        tmp_path, substitute=[{"pattern": "cuda", "with": "npu"}], add_import=["os; import shutil"]
    )
    with pytest.raises(RuleError, match="add_import"):
        load_rules([rules])


def test_a_fix_that_breaks_the_code_is_never_written(tmp_path: Path) -> None:
    rules = rule_file(tmp_path, substitute=[{"pattern": "cuda", "with": "'"}], add_import=[])
    root = tree(tmp_path, {"train.py": "device = 'cuda'\n"})
    run = cli("apply", root, "--rules", rules, cwd=tmp_path)
    no_traceback(run)
    assert run.returncode == 2
    assert "HOU101" in run.stdout and "does not parse" in run.stdout
    assert (root / "train.py").read_text() == "device = 'cuda'\n"


# ------------------------------------------------------------------ what the file system does


def test_a_file_changed_during_the_run_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA, "other.py": CUDA})
    files = discover([root])
    outcomes = run_rules(files, RuleSource(), frozenset({Applicability.safe}))
    (root / "train.py").write_text(CUDA + "# the user's edit\n")
    written = write_outcomes(outcomes, None, None)
    assert "changed while npu-migrate ran" in written.not_written[str(root / "train.py")]
    assert (root / "train.py").read_text() == CUDA + "# the user's edit\n"
    assert (root / "other.py").read_text() == MIGRATED


def test_a_full_disk_leaves_every_file_whole_and_says_what_was_written(tmp_path: Path) -> None:
    big = CUDA + "# " + "x" * 3000 + "\n"
    root = tree(tmp_path, {"a.py": CUDA, "big.py": big})
    run = cli("apply", root, cwd=tmp_path, limit_bytes=2000)
    no_traceback(run)
    assert run.returncode == 2
    assert "not written" in run.stdout and "big.py" in run.stdout
    assert (root / "a.py").read_text() == MIGRATED
    assert (root / "big.py").read_text() == big  # old, not half-written
    assert "not written" in (tmp_path / "proj-npu-migrate-changes.csv").read_text()


def test_an_unwritable_change_list_fails_before_any_source_is_touched(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": CUDA})
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "npu-migrate-changes.csv").mkdir()  # a folder where the file must go
    run = cli("apply", root, "--change-list", locked / "npu-migrate-changes.csv", cwd=tmp_path)
    no_traceback(run)
    assert run.returncode == 2 and "change list" in run.stderr
    assert (root / "a.py").read_text() == CUDA


def test_a_hard_link_is_reported(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": CUDA})
    os.link(root / "a.py", tmp_path / "elsewhere.py")
    run = cli("apply", root, cwd=tmp_path)
    assert "other hard link(s)" in run.stdout
    assert (root / "a.py").read_text() == MIGRATED


def test_extended_attributes_and_acls_are_kept(tmp_path: Path) -> None:
    """A rewrite is a new file: what the old one carried besides its bytes goes onto it (a POSIX
    ACL is the `system.posix_acl_access` attribute)."""
    root = tree(tmp_path, {"a.py": CUDA})
    try:
        os.setxattr(root / "a.py", "user.origin", b"customer-drop-3")
    except OSError:
        pytest.skip("this file system keeps no extended attributes")
    # `setfacl -m u:nobody:r`, in the kernel's format: version 2, then (tag, permissions, id)
    entries = [(0x01, 6, -1), (0x02, 4, 65534), (0x04, 4, -1), (0x10, 4, -1), (0x20, 4, -1)]
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHi", *entry) for entry in entries)
    os.setxattr(root / "a.py", "system.posix_acl_access", acl)
    cli("apply", root, cwd=tmp_path)
    assert (root / "a.py").read_text() == MIGRATED
    assert os.getxattr(root / "a.py", "user.origin") == b"customer-drop-3"
    assert os.getxattr(root / "a.py", "system.posix_acl_access") == acl


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"string": "(?=cuda)cuda", "where": [{"assign": ["device"]}]}, "not a valid regex"),
        ({"string": "(cuda)\\1", "where": [{"assign": ["device"]}]}, "not a valid regex"),
        ({"string": "(?P<dev>cuda)", "where": [{"assign": ["device"]}]}, "named groups are not allowed"),
        ({"name": ["*"]}, "match.name.0"),
        ({"call": ["torch.load("]}, "match.call.0"),
        ({"method": ["cuda()"]}, "match.method.0"),
    ],
)
def test_rules_that_would_crash_the_engine_do_not_load(tmp_path: Path, match: dict, expected: str) -> None:
    rules = rule_file(tmp_path, substitute=[{"pattern": "cuda", "with": "npu"}])
    data = yaml.safe_load(rules.read_text())
    data["rules"][0].update(match=match, applicability="manual", examples=[{"flagged": "x = 1\n"}])
    data["rules"][0].pop("fix")
    rules.write_text(yaml.safe_dump(data))
    root = tree(tmp_path, {"a.py": CUDA})
    run = cli("scan", root, "--rules", rules, cwd=tmp_path)
    no_traceback(run)
    assert run.returncode == 2 and expected in run.stderr


def test_a_backtracking_regex_runs_in_linear_time(tmp_path: Path) -> None:
    """`(a+)+b` on 'aaa...c' takes Python's re 2**n steps; RE2 takes n."""
    rules = rule_file(tmp_path, substitute=[{"pattern": "(a+)+b", "with": "npu"}])
    data = yaml.safe_load(rules.read_text())
    data["rules"][0]["match"] = {"string": "(a+)+b", "where": [{"assign": ["device"]}]}
    data["rules"][0]["examples"] = [{"before": 'device = "aab"\n', "after": 'device = "npu"\n'}]
    rules.write_text(yaml.safe_dump(data))
    root = tree(tmp_path, {"a.py": f'device = "{"a" * 5000}c"\ndevice = "aaab"\n'})
    run = cli("apply", root, "--rules", rules, cwd=tmp_path)
    no_traceback(run)
    assert run.returncode == 0, run.stdout + run.stderr
    migrated = (root / "a.py").read_text().splitlines()
    assert migrated[-2:] == [f'device = "{"a" * 5000}c"', 'device = "npu"']


def test_inline_flags_stay_inside_their_rule(tmp_path: Path) -> None:
    """The engine searches all string regexes as one; `(?i)` in one must not reach the others."""
    prefilter = Prefilter()
    prefilter.need_regex("(?i)cuda")
    prefilter.need_regex("nccl")
    assert prefilter.may_match('x = "CUDA"\n') and prefilter.may_match('x = "nccl"\n')
    assert not prefilter.may_match('x = "NCCL"\n')


def test_a_run_that_read_nothing_says_so_and_fails(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": b"\0\0binary"})
    run = cli("scan", root, cwd=tmp_path)
    assert run.returncode == 2
    assert "Nothing was read: all 1 file(s) were skipped" in run.stdout


def test_terminal_escapes_in_scanned_code_do_not_reach_the_terminal(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": 'import torch\nm = torch.load("\x1b[2J\x1b[31mmodel.pt")\n'})
    run = cli("scan", root, cwd=tmp_path)
    assert "NPU107" in run.stdout
    assert "\x1b" not in run.stdout and "\\x1b[2J" in run.stdout


def test_the_change_list_gets_the_usual_file_mode(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": CUDA})
    cli("apply", root, cwd=tmp_path)
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "proj-npu-migrate-changes.csv").stat().st_mode & 0o777 == 0o666 & ~umask


def test_git_ignore_rules_apply_as_git_applies_them(tmp_path: Path) -> None:
    """Nested .gitignore files (a deeper `!` re-includes), .git/info/exclude, and the root's
    .gitignore when only a subfolder is scanned."""
    root = tree(
        tmp_path,
        {
            ".gitignore": "gen/\n*_pb2.py\n",
            ".git/info/exclude": "scratch.py\n",
            "src/.gitignore": "!keep_pb2.py\nlocal/\n",
            "src/model.py": CUDA,
            "src/model_pb2.py": CUDA,
            "src/keep_pb2.py": CUDA,
            "src/local/x.py": CUDA,
            "src/scratch.py": CUDA,
            "gen/out.py": CUDA,
        },
    )
    names = sorted(Path(f.display).name for f in discover([root]) if not f.skipped)
    assert names == ["keep_pb2.py", "model.py"]
    assert sorted(Path(f.display).name for f in discover([root / "src"]) if not f.skipped) == names


def test_out_copies_skip_fifos_and_refuse_a_linked_destination(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": CUDA})
    os.mkfifo(root / "pipe")
    run = cli("apply", root, "--out", tmp_path / "copy", cwd=tmp_path)
    no_traceback(run)
    assert (tmp_path / "copy" / "a.py").read_text() == MIGRATED
    assert not (tmp_path / "copy" / "pipe").exists()
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    linked = cli("apply", root, "--out", tmp_path / "linked", cwd=tmp_path)
    assert linked.returncode == 2 and "symbolic link" in linked.stderr
    assert not list(tmp_path.glob(".linked.*.partial"))


def test_an_undecodable_file_is_reported_with_its_line(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": b'import torch\nx = 1\ny = "\xff"\nx.cuda()\n'})
    run = cli("apply", root, cwd=tmp_path)
    assert run.returncode == 1
    assert "a.py: line 3: cannot decode as utf-8" in run.stdout


def test_a_file_that_crashes_or_stalls_its_worker_is_named_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers are forked: an engine patched here crashes (abort, as a parser's segfault would)
    or stalls on marked files, in the workers."""
    import npu_migrate.engine.source as source

    real = source.migrate_source

    def hostile(data: bytes, *args: object, **kwargs: object) -> object:
        if b"CRASH" in data:
            os.abort()
        if b"STALL" in data:
            import time

            time.sleep(600)
        return real(data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(source, "migrate_source", hostile)
    monkeypatch.setattr(pipeline, "FILE_SECONDS", 3)
    root = tree(
        tmp_path,
        {f"f{i}.py": CUDA for i in range(6)}
        | {"crash.py": CUDA + "# CRASH\n", "stall.py": CUDA + "# STALL\n"},
    )
    outcomes = run_rules(discover([root]), RuleSource(), frozenset({Applicability.safe}), jobs=2)
    errors = {Path(o.file.display).name: o.result.error for o in outcomes if o.result.error}
    assert errors.keys() == {"crash.py", "stall.py"}
    assert "crashed" in (errors["crash.py"] or "") and "stopped after 3 s" in (errors["stall.py"] or "")
    assert all(o.result.new_source for o in outcomes if Path(o.file.display).name.startswith("f"))


def test_a_file_too_big_for_its_memory_cap_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's memory is capped at its share of the machine's on top of what it holds: here
    250 MiB, so that libcst's parse of a 0.5 MB one-statement file (about 550 MiB) fails and
    names the file, while a small file beside it is migrated."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    monkeypatch.setattr(pipeline, "MEMORY_SHARE", 250 * 2**20 / machine)
    huge = "import torch\nx = [" + "torch.cuda.synchronize(), " * 20_000 + "]\n"
    root = tree(tmp_path, {"small.py": CUDA, "huge.py": huge})
    outcomes = run_rules(discover([root]), RuleSource(), frozenset({Applicability.safe}), jobs=1)
    by_name = {Path(o.file.display).name: o.result for o in outcomes}
    assert by_name["small.py"].new_source is not None and by_name["small.py"].error is None
    error = by_name["huge.py"].error or ""
    assert "MemoryError" in error or "crashed" in error, error
    assert by_name["huge.py"].new_source is None


def test_an_absolute_link_into_the_tree_leads_into_the_copy(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pkg/model.py": CUDA})
    (root / "model.py").symlink_to((root / "pkg" / "model.py").resolve())
    run = cli("apply", root, "--out", tmp_path / "copy", cwd=tmp_path)
    no_traceback(run)
    link = tmp_path / "copy" / "model.py"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.read_text() == MIGRATED
    assert (root / "pkg" / "model.py").read_text() == CUDA


def test_a_folder_that_cannot_be_listed_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permissions do not bind root (the test user here), so the folder's listing fails by hand."""
    root = tree(tmp_path, {"a.py": CUDA, "locked/b.py": CUDA})
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    found = {Path(f.display).name: f.skipped for f in discover([root])}
    assert found == {"a.py": None, "locked": "cannot read: Permission denied"}


def test_a_comment_banner_does_not_make_a_regex_backtrack(tmp_path: Path) -> None:
    """Issue 20's repro: comment banners of `#`s between `import torch` and a CUDA call made the
    engine's gap regex backtrack exponentially (78 characters took the whole 120 s per file)."""
    banner = "#" * 400
    code = f"import torch\n{banner}\n# Settings\n{banner}\nmodel = torch.nn.Linear(2, 2).cuda()\n"
    (tmp_path / "settings.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "scan", "settings.py", "--no-cache", "-j", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "settings.py:5:" in done.stdout and "NPU" in done.stdout


def test_a_file_named_like_a_formula_is_text_in_the_change_list(tmp_path: Path) -> None:
    """The CSV change list is opened in Excel: a file named `=HYPERLINK(...).py` was written as
    it is, a formula. The JSON list keeps the name exactly."""
    name = '=HYPERLINK("x").py'
    root = tree(tmp_path, {name: CUDA})
    result = cli("apply", ".", "--change-list", tmp_path / "changes.csv", cwd=root)
    assert result.returncode in (0, 1), result.stderr
    rows = list(csv.DictReader((tmp_path / "changes.csv").open()))
    cells = [cell for row in rows for cell in row.values() if cell]
    assert rows and not any(cell.startswith(("=", "+", "-", "@")) for cell in cells)
    assert any(row["File"].startswith("'=HYPERLINK") for row in rows)
    assert any(r.get("File", "").endswith(name) for r in json.loads((tmp_path / "changes.json").read_text()))


def test_no_more_workers_than_cpus_or_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "default_jobs", lambda: 2)
    assert pipeline.workers(400, 1000) == 2  # `-j 400` on 2 cores
    assert pipeline.workers(400, 1) == 1
    assert pipeline.workers(1, 1000) == 1
