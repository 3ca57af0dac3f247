"""From the recordings a run's processes left (recorder.py) to findings ranked by expected harm.

No torch needed: a recording is data, so one run can be forecast for several torch_npu versions."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from npu_migrate.forecast import facts
from npu_migrate.forecast.kernels import KernelTable

MIB = 1 << 20
GROWTH_FLOOR = 64 * 1024  # bytes per step below which growth is noise (a kept loss scalar)


@dataclass
class Finding:
    kind: str  # fallback, dtype, shapes, sync, memory, collective
    harm: float  # the ranking: what costs most on the device first
    title: str
    detail: str
    sites: list[str] = field(default_factory=list)  # the user's `file:line`, busiest first


@dataclass
class Forecast:
    torch_npu: str
    chip: str
    card_gib: float
    processes: int
    steps: int
    step_kind: str
    npu_calls: int
    findings: list[Finding]
    memory: list[dict[str, float]]  # per step: peak and end MiB on the NPU, host MiB
    hot_modules: list[dict[str, Any]]
    total_flops: int
    shape_variety: list[dict[str, Any]]  # call sites by their new input shapes after the first step

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def read_recordings(folder: Path) -> list[dict[str, Any]]:
    """Every process's recording in the run's folder (a process cut off mid-write is skipped)."""
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found


def forecast(recordings: list[dict[str, Any]], table: KernelTable, chip: str, card_gib: float) -> Forecast:
    recordings = sorted(
        (r for r in recordings if r["ops"]), key=lambda r: r.get("rank") or 0
    )  # a launcher ran none
    ops = [op for recording in recordings for op in recording["ops"]]
    steps = max((_steps(r) for r in recordings), default=0)
    findings = [
        *_fallbacks(ops, table),
        *_dtypes(ops, chip),
        *_shapes(recordings),
        *_syncs(recordings),
        *_memory(recordings, card_gib),
        *_collectives(recordings),
        *_fused_chances(recordings),
    ]
    findings.sort(key=lambda f: -f.harm)
    main: dict[str, Any] = (
        recordings[0] if recordings else {"memory": [], "segment_steps": [], "step_kind": "none"}
    )
    return Forecast(
        torch_npu=table.version,
        chip=chip,
        card_gib=card_gib,
        processes=len(recordings),
        steps=steps,
        step_kind=main["step_kind"],
        npu_calls=sum(op["calls"] for op in ops),
        findings=findings,
        memory=_memory_per_step(main),
        hot_modules=_hot_modules(recordings),
        total_flops=sum(op["flops"] for op in ops),
        shape_variety=_shape_variety(recordings),
    )


# ---------------------------------------------------------------------------- steps


def _step_of(recording: dict[str, Any], segment: int) -> int:
    """The step a segment belongs to: optimizer steps before it, else module calls."""
    ends = recording["segment_steps"]
    if recording["step_kind"] != "optimizer":
        return segment
    return ends[segment - 1] if 0 < segment <= len(ends) else 0


def _steps(recording: dict[str, Any]) -> int:
    ends = recording["segment_steps"]
    return (ends[-1] if ends else 0) if recording["step_kind"] == "optimizer" else len(ends)


def _memory_per_step(recording: dict[str, Any]) -> list[dict[str, float]]:
    per_step: dict[int, dict[str, float]] = {}
    for segment, (peak, end, host) in enumerate(recording["memory"]):
        step = _step_of(recording, segment)
        if recording["step_kind"] == "optimizer" and step >= _steps(recording):
            continue  # after the last optimizer step: not a whole step
        entry = per_step.setdefault(step, {"step": step, "peak_mib": 0.0})
        entry["peak_mib"] = max(entry["peak_mib"], peak / MIB)
        entry["end_mib"], entry["host_mib"] = end / MIB, host / MIB
    return [per_step[s] for s in sorted(per_step)]


# ---------------------------------------------------------------------------- operators


def _namespace(op: str) -> tuple[str, str, str]:
    """(namespace, name, overload) of `aten::isin.Tensor_Tensor`."""
    namespace, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    return namespace, name, overload


def _covered(op: dict[str, Any], table: KernelTable) -> bool:
    namespace, name, overload = _namespace(op["op"])
    if op["op"].startswith(facts.COLLECTIVE_NAMESPACES + facts.IGNORED_NAMESPACES):
        return True
    if namespace in ("aten", "npu") and table.has(name, overload):
        return True
    out = "out" if overload in ("", "default") else f"{overload}_out"
    if op["composite"] == "structured" and table.has(name, out):
        return True  # its out= variant has the kernel
    if op["composite"] == "explicit" or any(mark in name for mark in facts.BACKING_ONLY_MARKS):
        return True
    return bool(op["region"]) and table.has_any(op["region"])


def _sites(counts: Counter[str], limit: int = 3) -> list[str]:
    return [site for site, _ in counts.most_common(limit)]


def _fallbacks(ops: list[dict[str, Any]], table: KernelTable) -> Iterable[Finding]:
    total = sum(op["calls"] for op in ops) or 1
    missing: dict[str, Counter[str]] = defaultdict(Counter)
    for op in ops:
        if not _covered(op, table):
            missing[op["op"]][op["site"]] += op["calls"]
    for op_name, sites in missing.items():
        name = op_name.removesuffix(".default")
        calls = sum(sites.values())
        share = calls / total
        yield Finding(
            "fallback",
            60 + 40 * share,
            f"{name} has no NPU kernel in torch_npu {table.version}: it falls back to the CPU",
            f"{calls} calls ({share:.1%} of the run's NPU operator calls), each copying its inputs "
            f"to the host and its outputs back (torch_npu warns: \"The operator '{name}' is not "
            'currently supported on the NPU backend and will fall back to run on the CPU"); '
            "read from the version's npu_native_functions yaml files",
            _sites(sites),
        )


def _dtypes(ops: list[dict[str, Any]], chip: str) -> Iterable[Finding]:
    wanted = {fact.dtype: fact for fact in facts.DTYPE_FACTS}
    if chip in facts.NO_BF16_CHIPS:
        wanted["bfloat16"] = facts.DtypeFact(
            "bfloat16",
            60,
            f"bfloat16 inputs: the {chip} has no bfloat16 (torch.npu.is_bf16_supported() is False there)",
            "Ascend 910A: float16 and float32 only",
        )
    hits: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for op in (op for op in ops if not op["view"]):  # a view of a float64 tensor computes nothing
        for dtype in {d for signature in op["dtypes"] for d in signature} & wanted.keys():
            hits[dtype][op["op"]][op["site"]] += op["calls"]
    for dtype, by_op in hits.items():
        fact = wanted[dtype]
        sites: Counter[str] = Counter()
        for counts in by_op.values():
            sites.update(counts)
        names = ", ".join(sorted(by_op, key=lambda n: -sum(by_op[n].values()))[:5])
        yield Finding(
            "dtype",
            fact.harm,
            f"{dtype} on the NPU in {len(by_op)} operator(s): {names}",
            f"{fact.what} ({sum(sites.values())} calls; source: {fact.source})",
            _sites(sites),
        )


def _shape_sites(recordings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per call site: input shapes its operators first met in a later step than their first
    (a shape met again is compiled already; many shapes in one step, such as a model's
    parameters moved one by one, are not variation), and the data-dependent operators. New
    shapes in at most a third of the calls are rare (a smaller last batch)."""
    by_site: dict[str, dict[str, Any]] = {}
    for recording in recordings:
        for op in recording["ops"]:
            if op["backward"]:
                continue  # backward follows the forward's shapes
            entry = by_site.setdefault(op["site"], {"new": 0, "ops": set(), "rare": True, "dynamic": set()})
            if op["data_dependent"]:
                entry["dynamic"].add(_namespace(op["op"])[1])
            firsts = [_step_of(recording, first) for _, first, _, _ in op["shapes"]]
            later = [
                calls
                for (_, _, _, calls), step in zip(op["shapes"], firsts, strict=True)
                if step > min(firsts)
            ]
            if not later:
                continue
            entry["new"] = max(entry["new"], len(later))
            if not any(mark in op["op"] for mark in facts.BACKING_ONLY_MARKS):
                entry["ops"].add(_namespace(op["op"])[1])
            entry["rare"] = entry["rare"] and sum(later) * 3 <= op["calls"]
    return by_site


def _shape_variety(recordings: list[dict[str, Any]], limit: int = 15) -> list[dict[str, Any]]:
    """The call sites with the most new shapes after the first step (the HTML report plots them)."""
    sites = sorted(_shape_sites(recordings).items(), key=lambda item: -item[1]["new"])
    return [{"site": site, "new_shapes": entry["new"]} for site, entry in sites[:limit] if entry["new"]]


def _shapes(recordings: list[dict[str, Any]]) -> Iterable[Finding]:
    """Findings of shapes that vary and of data-dependent operators (_shape_sites)."""
    by_site = _shape_sites(recordings)
    varying: dict[bool, list[tuple[str, dict[str, Any]]]] = {True: [], False: []}
    for site, entry in by_site.items():
        if entry["dynamic"]:
            names = ", ".join(sorted(entry["dynamic"]))
            yield Finding(
                "shapes",
                35,
                f"data-dependent operator ({names})",
                "its output's size or its work depends on the values (nonzero's count, a boolean "
                "mask's), so the host waits for the device and later operators meet new shapes; "
                "masked arithmetic (torch.where, multiplying by the mask) or a fixed-size form "
                "(nonzero_static, padding) keeps shapes static",
                [site],
            )
        if entry["new"]:
            varying[entry["rare"]].append((site, entry))
    for rare, sites in varying.items():
        if not sites:
            continue
        sites.sort(key=lambda item: -item[1]["new"])
        most = sites[0][1]["new"]
        hint = (
            "the new shapes are rare, as a smaller last batch of an epoch is (drop_last=True, or pad it)"
            if rare
            else "pad or bucket the varying dimension (sequence lengths to a few fixed sizes)"
        )
        yield Finding(
            "shapes",
            20 + min(most * len(sites), 30),
            f"input shapes change after the first step at {len(sites)} call site(s), up to {most} new "
            f"shape(s) at one ({', '.join(sorted(sites[0][1]['ops'])[:4])})",
            f"the NPU compiles an operator again for each new input shape (unless its binary "
            f"kernels cover it): {hint}",
            [site for site, _ in sites],
        )


def _syncs(recordings: list[dict[str, Any]]) -> Iterable[Finding]:
    steps = max(1, max((_steps(r) for r in recordings), default=1))
    for recording in recordings[:1]:  # the ranks do the same
        for kind, site, calls in recording["syncs"]:
            if kind.endswith("(data-dependent shape)"):
                continue  # reported with the shapes
            per_step = calls / steps
            yield Finding(
                "sync",
                15 + min(per_step, 20),
                f"host sync: {_sync_name(kind)} ({per_step:.3g} per step)",
                "the host waits until the NPU's queue has run up to this value; in a training loop "
                "keep values on the device and read them every N steps",
                [site],
            )


def _sync_name(kind: str) -> str:
    return {
        "__bool__": "a tensor used as a condition",
        "__repr__": "printing a tensor",
        "__format__": "formatting a tensor",
        "to": ".to() the host",
        "cpu": ".cpu()",
    }.get(kind, f".{kind}()")


def _memory(recordings: list[dict[str, Any]], card_gib: float) -> Iterable[Finding]:
    for recording in recordings[:1]:
        per_step = _memory_per_step(recording)
        peak = max((m["peak_mib"] for m in per_step), default=0.0)
        if peak > 0.9 * card_gib * 1024:
            yield Finding(
                "memory",
                90,
                f"peak NPU memory {peak:,.1f} MiB against the card's {card_gib:g} GiB",
                "the run's tensors alone come near the card's memory; the NPU also keeps its "
                "workspace and the caching allocator's fragments",
            )
        growth = _growth(per_step)
        if growth is None:
            continue
        held = Counter[str]()
        since: dict[str, set[int]] = defaultdict(set)
        for size, site, segment in recording["held"]:
            step = _step_of(recording, segment)
            if step >= 1:
                held[site] += size
                since[site].add(step)
        growing = [site for site, _ in held.most_common() if len(since[site]) > 1][:3]
        yield Finding(
            "memory",
            50 + min(growth / MIB, 40),
            f"NPU memory grows {growth / MIB:,.2f} MiB every step",
            "tensors made in one step are still held in later ones (a list of losses with their "
            "graphs, a cache of batches); held at the last step's end: "
            + "; ".join(
                f"{site} {held[site] / MIB:,.2f} MiB from {len(since[site])} steps" for site in growing
            ),
            growing,
        )


def _growth(per_step: list[dict[str, float]]) -> float | None:
    """Bytes per step the NPU's live memory grows, where it grows steadily after the first step."""
    ends = [m["end_mib"] * MIB for m in per_step[1:]]
    if len(ends) < 3:
        return None
    rises = sum(b > a for a, b in itertools.pairwise(ends))
    per_step_growth = (ends[-1] - ends[0]) / (len(ends) - 1)
    if rises * 4 < (len(ends) - 1) * 3 or per_step_growth < GROWTH_FLOOR:
        return None
    return per_step_growth


def _collectives(recordings: list[dict[str, Any]]) -> Iterable[Finding]:
    yield from _shared_devices(recordings)
    seen: set[tuple[str, str, str]] = set()
    for recording in recordings:
        for name, dtypes, size, site, calls in recording["collectives"]:
            wanted = facts.HCCL_REDUCE_DTYPES if name in facts.REDUCING_COLLECTIVES else facts.HCCL_DTYPES
            refused = sorted(set(filter(None, dtypes.split(","))) - wanted)
            if not refused or (name, dtypes, site) in seen:
                continue
            seen.add((name, dtypes, site))
            yield Finding(
                "collective",
                100,
                f"HCCL refuses {name} on {', '.join(refused)}",
                f'torch_npu\'s ProcessGroupHCCL raises "Unsupported data type" for {", ".join(refused)} '
                f"in {name} (group of {size}, {calls} calls); cast to a type it takes "
                f"({', '.join(sorted(wanted))})",
                [site],
            )


def _shared_devices(recordings: list[dict[str, Any]]) -> Iterable[Finding]:
    """Ranks of one host that run on another rank's NPU: HCCL makes each rank's communicator on
    its current NPU, NPU 0 until `torch.npu.set_device(local_rank)`, so ranks that never set it
    share NPU 0 (HCCL refuses two ranks on one device)."""
    wrong = {
        recording["local_rank"]: sorted(recording["devices"].items())[0]
        for recording in recordings
        if recording.get("world_size", 1) > 1
        and recording.get("local_rank") is not None
        and str(recording["local_rank"]) not in recording["devices"]
        and recording["devices"]
    }
    if wrong:
        ranks = ", ".join(f"local rank {rank} on npu:{device}" for rank, (device, _) in sorted(wrong.items()))
        yield Finding(
            "collective",
            100,
            f"ranks run on another rank's NPU ({ranks})",
            "each rank's HCCL communicator lives on its current NPU: call "
            "torch.npu.set_device(local_rank) before init_process_group and before moving tensors "
            'to "npu"',
            sorted({site for _, site in wrong.values()}),
        )


def _fused_chances(recordings: list[dict[str, Any]]) -> Iterable[Finding]:
    """Module classes whose own operators form what a torch_npu fused operator does, by their
    share of the run's operator calls."""
    for recording in recordings[:1]:
        total = sum(sum(ops.values()) for ops in recording["module_ops"].values()) or 1
        by_class: dict[str, Counter[str]] = defaultdict(Counter)
        pairs: dict[str, set[str]] = defaultdict(set)
        count: Counter[str] = Counter()
        for path, ops in recording["module_ops"].items():
            kind = recording["modules"].get(path, ["(no module)"])[0] or "(no module)"
            by_class[kind].update(ops)
            pairs[kind].update(recording["module_pairs"].get(path, ()))
            count[kind] += 1
        for kind, ops in by_class.items():
            for pattern in facts.FUSED_PATTERNS:
                if kind == "(no module)" or not (
                    pattern.operators <= ops.keys() and pattern.pairs <= pairs[kind]
                ):
                    continue
                share = sum(ops.values()) / total
                yield Finding(
                    "fused",
                    10 + 20 * share,
                    f"{kind} computes {pattern.what} unfused ({share:.0%} of the operator calls): "
                    f"{pattern.fused}",
                    f"{count[kind]} module(s) of this class run {', '.join(sorted(pattern.operators))} "
                    f"themselves; {pattern.fused} does it in one kernel (`npu-migrate apply --unsafe` "
                    "swaps the forms the scan recognises and names those it leaves to a human)",
                )


def _hot_modules(recordings: list[dict[str, Any]], limit: int = 8) -> list[dict[str, Any]]:
    """Modules by their FLOPs, the modules inside them included."""
    own: Counter[str] = Counter()
    kinds: dict[str, str] = {}
    for recording in recordings[:1]:
        for name, (kind, flops, _calls) in recording["modules"].items():
            own[name] += flops
            kinds[name] = kind
    total = sum(own.values()) or 1
    inclusive = Counter(
        {name: sum(f for n, f in own.items() if n == name or n.startswith(name + ".")) for name in own}
    )
    top = [name for name, _ in inclusive.most_common() if "." in name][:limit]
    return [
        {
            "module": name,
            "class": kinds.get(name, ""),
            "flops": inclusive[name],
            "share": inclusive[name] / total,
        }
        for name in top
    ]
