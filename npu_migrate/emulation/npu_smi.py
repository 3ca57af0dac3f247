"""The emulated host's `npu-smi` (emulation/bin/npu-smi runs this): launch scripts count an Ascend
host's devices with `npu-smi info -l` (`grep -c "NPU ID"`, the `Total Count` line, or the sum
of its `Chip Count` lines that apply writes for `nvidia-smi -L | wc -l`, NPU835). It lists the
emulated host's NPUs (`run --emulate --npus N`), in the `key : value` lines those scripts read;
anything else it refuses in one line. Needs no torch."""

from __future__ import annotations

import sys

from npu_migrate.emulation import host_npus

_KEY_WIDTH = 31  # npu-smi pads each key so that the colons line up


def _line(key: str, value: object) -> str:
    return f"        {key:<{_KEY_WIDTH}}: {value}"


def listing(npus: int) -> str:
    """What `npu-smi info -l` prints for `npus` devices of one chip each."""
    lines = [_line("Total Count", npus), ""]
    for npu in range(npus):
        lines += [
            _line("NPU ID", npu),
            _line("Product Name", "npu-migrate emulation"),
            _line("Chip Count", 1),
            "",
        ]
    return "\n".join(lines)


def overview(npus: int) -> str:
    """What `npu-smi info` prints here: one row per NPU (the real tool's table holds health,
    power, temperature and memory, which an emulation does not have)."""
    rule = "+-------+---------------------------+--------+"
    rows = [f"| {npu:<5} | {'npu-migrate emulation':<25} | {'OK':<6} |" for npu in range(npus)]
    return "\n".join([rule, "| NPU   | Name                      | Health |", rule, *rows, rule])


def main(argv: list[str]) -> int:
    npus = host_npus()
    if argv == ["info", "-l"]:
        print(listing(npus))
        return 0
    if argv == ["info"]:
        print(overview(npus))
        return 0
    print(
        f"npu-smi {' '.join(argv)}: the emulated host's npu-smi answers `npu-smi info` and "
        "`npu-smi info -l` only (npu-migrate run --emulate)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
