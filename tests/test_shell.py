"""Shell launch scripts through the command line: found in folders, parsed by a real shell
grammar, rewritten where the rules say and nowhere else (comments, quoting, heredocs kept), the
result accepted by bash -n, and a script that does not parse reported and left alone."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.fixture_cases import FIXTURES, run_cli

LAUNCH = FIXTURES / "launch" / "src"


def test_a_launch_script_is_scanned_by_its_syntax(tmp_path: Path) -> None:
    result = run_cli("scan", LAUNCH, "--format", "json", cwd=tmp_path)
    found = [(f["line"], f["code"], f["label"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [
        (5, "NPU751", "safe"),  # export CUDA_VISIBLE_DEVICES=...
        (6, "NPU752", "manual"),  # NCCL_DEBUG: no drop-in twin
        (7, "NPU751", "safe"),  # PYTORCH_CUDA_ALLOC_CONF
        (9, "NPU830", "safe"),  # a plain nvidia-smi
        (10, "NPU830", "held"),  # with flags: npu-smi's differ
        (12, "NPU751", "safe"),  # NCCL_SOCKET_IFNAME for one command
        (12, "NPU751", "safe"),  # $CUDA_VISIBLE_DEVICES inside $(...)
        (13, "NPU150", "unsafe"),  # --device cuda: a device, as far as the script can tell
        (16, "NPU751", "held"),  # in the heredoc's text: reported, left as it is
        (18, "NPU751", "held"),  # the single-quoted string is text: reported, left as it is
    ]
    assert json.loads(result.stdout)["summary"]["by_file_kind"] == {"shell": 10}


def test_apply_edits_only_the_matched_names_and_bash_accepts_the_result(tmp_path: Path) -> None:
    tree = tmp_path / "launch"
    shutil.copytree(LAUNCH, tree)
    result = run_cli("apply", tree, "--no-change-list", "--unsafe", cwd=tmp_path)
    assert result.returncode == 1, result.stdout  # NCCL_DEBUG and the nvidia-smi query stay a human's
    before = (LAUNCH / "train.sh").read_text().splitlines()
    after = (tree / "train.sh").read_text().splitlines()
    changed = [n for n, (a, b) in enumerate(zip(before, after, strict=True), start=1) if a != b]
    assert changed == [5, 7, 9, 12, 13]
    assert after[12] == "    train.py --device npu"
    assert after[8] == "npu-smi info" and after[4].endswith("  # which cards")
    assert (tree / "clean.sh").read_bytes() == (LAUNCH / "clean.sh").read_bytes()
    assert subprocess.run(["bash", "-n", tree / "train.sh"], check=False).returncode == 0


def test_a_script_bash_cannot_parse_is_reported_and_left_alone(tmp_path: Path) -> None:
    script = tmp_path / "broken.sh"
    script.write_text("export CUDA_VISIBLE_DEVICES=0\nif then fi (\n")
    result = run_cli("apply", script, "--no-change-list", cwd=tmp_path)
    assert result.returncode == 1 and "not a script bash can parse" in result.stdout
    assert script.read_text() == "export CUDA_VISIBLE_DEVICES=0\nif then fi (\n"


def test_a_users_rule_overrides_the_catalogs_in_a_script_and_is_counted(tmp_path: Path) -> None:
    (tmp_path / "house.yaml").write_text(
        "category: house\ncodes: ACME1xx\ndescription: Ours.\nrules:\n"
        "  - code: ACME101\n    name: our-devices\n    summary: Ours.\n"
        "    why: Our scheduler sets it.\n    message: '`{match}`: the scheduler sets it'\n"
        "    applicability: manual\n    severity: info\n    match: {shell_env: CUDA_VISIBLE_DEVICES}\n"
        "    examples: [{flagged: 'echo $CUDA_VISIBLE_DEVICES'}]\n"
    )
    (tmp_path / "run.sh").write_text("export CUDA_VISIBLE_DEVICES=0\n")
    result = run_cli("scan", "run.sh", "--rules", "house.yaml", "--format", "json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert [f["code"] for f in report["findings"]] == ["ACME101"]
    assert report["summary"]["overridden"] == {"NPU751": 1}


def test_a_last_line_ending_in_a_backslash_is_read_as_bash_reads_it(tmp_path: Path) -> None:
    """A launch script whose last line ends in `\\` with no newline (bash -n accepts it) was
    "not a script bash can parse": a tool error, its CUDA_VISIBLE_DEVICES left."""
    script = tmp_path / "launch.sh"
    script.write_bytes(b"export CUDA_VISIBLE_DEVICES=0\npython train.py --lr 1 \\")
    result = run_cli("apply", script.name, cwd=tmp_path)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert script.read_bytes() == b"export ASCEND_RT_VISIBLE_DEVICES=0\npython train.py --lr 1 \\"


def test_a_flag_list_the_command_line_expands_unquoted_is_read_word_by_word(tmp_path: Path) -> None:
    """bowdpr's fine-tuning scripts keep the trainer's flags in one quoted variable, expanded
    unquoted into torchrun's command line (the shell splits it into arguments): its words are
    arguments. A quoted value only echoed, one word touching an expansion and a one-word value
    (already a word site) are not read again."""
    script = tmp_path / "train_dpr.sh"
    script.write_text(
        "N=8\n"
        'TRAIN_ARGS=" --do_train \\\n'
        "--per_device_train_batch_size $N \\\n"
        "--optim adamw_apex_fused \\\n"
        '--device cuda:$N --eval-device cuda"\n'
        'SAID="--optim adamw_apex_fused"\n'
        'echo "$SAID"\n'
        'ONE="cuda"\n'
        "torchrun -m bowdpr.finetune.fit $TRAIN_ARGS --device ${ONE}\n"
    )
    result = run_cli("scan", script, "--format", "json", cwd=tmp_path)
    found = [(f["line"], f["code"], f["label"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [(4, "NPU956", "unsafe"), (5, "NPU150", "unsafe"), (8, "NPU150", "unsafe")]
    run_cli("apply", script, "--no-change-list", "--unsafe", cwd=tmp_path)
    lines = script.read_text().splitlines()
    assert lines[3] == "--optim adamw_torch_fused \\" and lines[5] == 'SAID="--optim adamw_apex_fused"'
    assert lines[4] == '--device cuda:$N --eval-device npu"' and lines[7] == 'ONE="npu"'
    assert subprocess.run(["bash", "-n", script], check=False).returncode == 0


def test_a_flag_list_expanded_into_a_command_string_that_is_evaluated_is_read_word_by_word(
    tmp_path: Path,
) -> None:
    """Megatron-LM's retro preprocessing script: the flags in ARGS, ARGS expanded into the
    command string CMD, and `eval $CMD`: the NCCL backend reaches the argparse whose choices the
    rewrite made hccl, so it is rewritten with them. A string only echoed is not."""
    script = tmp_path / "preprocess_data.sh"
    script.write_text(
        'ARGS=" \\\n    --tensor-model-parallel-size 1 \\\n    --distributed-backend nccl \\\n"\n'
        'CMD="\\\n    python -m torch.distributed.run \\\n    tools/retro/preprocess_data.py ${ARGS} \\\n"\n'
        'NOTE="--distributed-backend nccl"\n'
        "echo \"CMD = '$CMD'. $NOTE\"\n"
        "eval $CMD\n"
    )
    result = run_cli("scan", script, "--format", "json", cwd=tmp_path)
    found = [(f["line"], f["code"], f["label"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [(3, "NPU205", "safe")]
    run_cli("apply", script, "--no-change-list", cwd=tmp_path)
    lines = script.read_text().splitlines()
    assert lines[2] == "    --distributed-backend hccl \\" and lines[8] == 'NOTE="--distributed-backend nccl"'
    assert subprocess.run(["bash", "-n", script], check=False).returncode == 0


def test_a_read_of_what_a_sourced_file_may_set_is_held_where_that_file_is_not_read(tmp_path: Path) -> None:
    """`source cluster.env` then `devices=$CUDA_VISIBLE_DEVICES`: the read was renamed and the
    assignment in cluster.env (a file the run does not read) was not, so `devices=0,1` became
    `devices=` on the NPU. A sourced script the run reads is renamed with it; a variable the
    script sets itself is its own."""
    (tmp_path / "cluster.env").write_text("export CUDA_VISIBLE_DEVICES=0,1\n")
    (tmp_path / "env.sh").write_text("export CUDA_VISIBLE_DEVICES=0,1\n")
    (tmp_path / "run.sh").write_text("#!/bin/bash\nsource cluster.env\ndevices=$CUDA_VISIBLE_DEVICES\n")
    (tmp_path / "read.sh").write_text("#!/bin/bash\n. ./env.sh\ndevices=${CUDA_VISIBLE_DEVICES}\n")
    (tmp_path / "own.sh").write_text(
        "#!/bin/bash\nsource cluster.env\nCUDA_VISIBLE_DEVICES=3 && d=$CUDA_VISIBLE_DEVICES\n"
    )
    result = run_cli("apply", ".", "--no-change-list", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert (tmp_path / "run.sh").read_text().endswith("devices=$CUDA_VISIBLE_DEVICES\n")
    assert "which this script sources and npu-migrate does not read, may set it" in result.stdout
    env = {"PATH": "/usr/bin:/bin"}
    ran = subprocess.run(["bash", "-c", ". ./read.sh && echo $devices"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert ran.stdout == "0,1\n"  # env.sh and read.sh renamed together
    assert (
        (tmp_path / "own.sh")
        .read_text()
        .endswith("ASCEND_RT_VISIBLE_DEVICES=3 && d=$ASCEND_RT_VISIBLE_DEVICES\n")
    )
