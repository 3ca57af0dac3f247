"""YAML and JSON configs, the shell in Dockerfiles and Makefiles, and C++/CUDA sources: each read
by a real grammar (YAML's parser, bash's on a view of the file, the registration macros), every
finding where it is in the file, fixes that edit one value or name and nothing else."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from npu_migrate.handlers.embedded_shell import dockerfile_view, makefile_view
from npu_migrate.handlers.native import registrations
from tests.fixture_cases import run_cli
from tests.test_dependencies import found, migrate


def test_yaml_values_are_edited_in_place_with_quotes_comments_and_documents_kept() -> None:
    text = "# run\ndist:\n  backend: 'nccl'   # keep\n---\nmodel: {device: \"cuda:1\"}\nnotes: 'it''s nccl'\n"
    result = migrate("config", text)
    assert found(result) == [(3, 13, "NPU771", "nccl"), (5, 18, "NPU773", "cuda:1")]
    assert result.new_source is not None
    assert result.new_source.decode() == text.replace("'nccl'", "'hccl'").replace('"cuda:1"', '"npu:1"')


def test_json_with_tabs_and_escaped_values() -> None:
    text = '{\n\t"backend": "nccl",\n\t"device": "cu\\u0064a"\n}\n'
    result = migrate("config", text)
    assert found(result) == [(2, 14, "NPU771", "nccl"), (3, 13, "NPU773", "cuda")]
    escaped = result.findings[1]
    assert escaped.held is not None and "escapes" in escaped.held.why and not escaped.applied
    assert result.new_source == text.replace('"nccl"', '"hccl"').encode()


def test_json_data_with_control_characters_is_read_and_ci_workflows_are_not_configs(tmp_path: Path) -> None:
    (tmp_path / "chat.json").write_text(json.dumps([{"text": "gpu \x80 text", "device": "cuda"}]))
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "docker.yml").write_text("matrix:\n  - device: cuda\n")
    report = json.loads(run_cli("scan", ".", "--format", "json", cwd=tmp_path).stdout)
    assert report["summary"]["errors"] == [] and report["summary"]["files"] == 1
    assert [(f["file"], f["code"]) for f in report["findings"]] == [("chat.json", "NPU773")]


def test_a_config_without_a_rule_key_is_not_parsed_and_a_broken_one_is_named() -> None:
    assert migrate("config", '{"vocab": {"cuda": 1, "nccl": 2}, "broken": ').error is None
    broken = migrate("config", "backend: nccl\n  - oops: [\n")
    assert broken.error is not None and broken.error.startswith("not YAML or JSON")


def test_a_dockerfile_view_keeps_offsets_and_reads_only_the_shell() -> None:
    text = (
        b"FROM nvidia/cuda:12.1.0-runtime-ubuntu22.04\nARG X=1\nENV CUDA_LAUNCH_BLOCKING 1\n"
        b'COPY a b\nRUN echo "$CUDA_VISIBLE_DEVICES" && \\\n    nvidia-smi\nCMD ["python", "x.py"]\n'
    )
    view = dockerfile_view(text)
    assert len(view) == len(text) and view.count(b"\n") == text.count(b"\n")
    assert view.splitlines()[1:4] == [b"    X=1", b"    CUDA_LAUNCH_BLOCKING= ", b"        "]
    result = migrate("dockerfile", text.decode())
    assert found(result) == [
        (1, 6, "NPU831", "nvidia/cuda:12.1.0-runtime-ubuntu22.04"),
        (3, 5, "NPU751", "CUDA_LAUNCH_BLOCKING"),
        (5, 12, "NPU751", "CUDA_VISIBLE_DEVICES"),
        (6, 5, "NPU830", "nvidia-smi"),
    ]
    assert result.new_source is not None
    assert result.new_source.decode().splitlines()[2] == "ENV ASCEND_LAUNCH_BLOCKING 1"


def test_a_shell_script_a_dockerfile_writes_with_a_copy_heredoc_is_read() -> None:
    """`COPY <<EOF /entry.sh` (BuildKit) writes a script into the image; its text was never read.
    A heredoc that writes a script (a `.sh` target, or a shell's `#!`) is shell; one that writes
    data or another language is not."""
    text = (
        "FROM ubuntu\nCOPY <<EOF /opt/entry.sh\nexport CUDA_VISIBLE_DEVICES=0,1\nnvidia-smi\nEOF\n"
        "COPY <<launch <<notes.txt /opt/\n#!/bin/bash\nnvidia-smi -L\nlaunch\nnvidia-smi is read\nnotes.txt\n"
        "ADD <<-'END' /opt/run\n#!/usr/bin/env bash\nnvidia-smi\nEND\nRUN true\n"
    )
    result = migrate("dockerfile", text)
    assert [(line, code) for line, _, code, _ in found(result)] == [
        (3, "NPU751"),
        (4, "NPU830"),
        (8, "NPU830"),
        (14, "NPU830"),
    ]
    assert result.new_source is not None
    rewritten = result.new_source.decode().splitlines()
    assert rewritten[2:4] == ["export ASCEND_RT_VISIBLE_DEVICES=0,1", "npu-smi info"]
    assert rewritten[9] == "nvidia-smi is read"  # notes.txt: data, left as it is


def test_a_makefile_renames_a_variable_where_it_is_set_and_read() -> None:
    text = "NP ?= 2\nCUDA_VISIBLE_DEVICES := 0,1\nrun: deps\n\t@echo $(CUDA_VISIBLE_DEVICES) $$NCCL_DEBUG\n"
    view = makefile_view(text.encode())
    assert view.splitlines()[3] == b"  echo ${CUDA_VISIBLE_DEVICES}  $NCCL_DEBUG"
    result = migrate("makefile", text)
    assert [(line, code) for line, _, code, _ in found(result)] == [
        (2, "NPU751"),
        (4, "NPU751"),
        (4, "NPU752"),
    ]
    assert result.new_source is not None
    assert result.new_source.decode() == text.replace("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")


def test_registrations_skip_comments_and_name_torch_library_operators() -> None:
    source = (
        b'// m.def("old", &old);\nTORCH_LIBRARY(myops, m) {\n  m.def("rms(Tensor x) -> Tensor");\n}\n'
        b'TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("rms", &rms_cuda); }\n'
        b'/* PYBIND11_MODULE(x, m) { m.def("gone", &g); } */\n'
    )
    assert [(r.name, r.how) for r in registrations(source)] == [
        ("myops::rms", "library"),
        ("myops::rms", "CUDA implementation"),
    ]


def test_torch_library_operators_are_linked_to_torch_ops_calls(tmp_path: Path) -> None:
    (tmp_path / "ops.cu").write_text(
        'TORCH_LIBRARY(myops, m) { m.def("rms(Tensor x) -> Tensor"); }\n__global__ void k(float* x) {}\n'
    )
    (tmp_path / "use.py").write_text(
        "import torch\nops = torch.ops\ny = torch.ops.myops.rms.default(torch.ones(2))\n"
        "z = torch.ops.myops.rms\n"
    )
    report = json.loads(run_cli("scan", ".", "--format", "json", cwd=tmp_path).stdout)
    messages = {(f["file"], f["line"], f["code"]): f["message"] for f in report["findings"]}
    assert messages[("ops.cu", 1, "NPU841")].endswith("in torch.ops.myops; called from use.py:3")
    assert messages[("use.py", 3, "NPU841")].endswith("registered in ops.cu:1")
    assert ("ops.cu", 2, "NPU842") in messages and ("use.py", 4, "NPU841") not in messages, (
        "a call, not a mention"
    )


def test_sources_and_scripts_without_findings_stay_byte_identical(tmp_path: Path) -> None:
    files = {
        "Dockerfile": "FROM python:3.11-slim\r\nRUN pip install numpy\r\n",
        "Makefile": "test:\n\tpytest -q\n",
        "kernel.cpp": "int add(int a, int b) { return a + b; }\n",
        "scale.cu": "__global__ void scale(float* x) { x[threadIdx.x] *= 2; }\n",  # a finding, no fix
        "settings.yaml": "backend: gloo  # CPU\n",
        "data.json": '{"device": "cpu"}',
    }
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode())
    result = run_cli("apply", ".", "--unsafe", "--no-change-list", cwd=tmp_path)
    assert "Traceback" not in result.stderr and "rewrote 0 file(s)" in result.stdout, result.stdout
    assert {name: (tmp_path / name).read_bytes().decode() for name in files} == files


def test_a_rewritten_dockerfile_still_parses_as_shell(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu\nRUN export NCCL_SOCKET_IFNAME=eth0 && nvidia-smi\n")
    run_cli("apply", ".", "--no-change-list", cwd=tmp_path)
    rewritten = dockerfile.read_bytes()
    assert rewritten == b"FROM ubuntu\nRUN export HCCL_SOCKET_IFNAME=eth0 && npu-smi info\n"
    assert subprocess.run(["bash", "-n"], input=dockerfile_view(rewritten), check=False).returncode == 0


def test_json_with_comments_is_read_and_its_comments_kept(tmp_path: Path) -> None:
    """A devcontainer.json is JSON with comments (JSONC, as VS Code and tsconfig read it): it was
    "not YAML or JSON", a tool error. A `//` inside a string is no comment."""
    config = tmp_path / ".devcontainer" / "devcontainer.json"
    config.parent.mkdir()
    text = (
        '{\n  // the GPU image\n  "name": "train", /* see https://aka.ms/devcontainer */\n'
        '  "containerEnv": {"URL": "http://x//y"},\n  "settings": {"device": "cuda"},\n}\n'
    )
    config.write_text(text)
    result = run_cli("apply", "--unsafe", str(config), cwd=tmp_path)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert config.read_text() == text.replace('"device": "cuda"', '"device": "npu"')


def test_json_with_comments_may_open_with_a_comment(tmp_path: Path) -> None:
    """litgpt's devcontainer.json opens with `//` lines before its `{` (and comments out list
    items, leaving a trailing comma): read as YAML, it was "not YAML or JSON"."""
    config = tmp_path / ".devcontainer" / "devcontainer.json"
    config.parent.mkdir()
    text = (
        "// For format details, see https://aka.ms/devcontainer.json.\n"
        '{\n  "runArgs": [\n    "--ipc=host",\n    //"--gpus=all",\n  ],\n'
        '  "settings": {"device": "cuda"}\n}\n'
    )
    config.write_text(text)
    result = run_cli("apply", "--unsafe", str(config), cwd=tmp_path)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "not YAML or JSON" not in result.stdout + result.stderr
    assert config.read_text() == text.replace('"device": "cuda"', '"device": "npu"')
