"""The ONNX view of the original model: export it, check it, list its opset and operator types
(the inventory needed before converting it to an Ascend offline model), and run it with onnx's
reference evaluator so its final outputs join the comparison as a third column."""

from __future__ import annotations

import copy
import io
import warnings
from collections import Counter
from typing import Any

import torch

from npu_migrate.verify.capture import flatten, map_tensors


def onnx_report(model: torch.nn.Module, inputs: Any) -> dict[str, Any]:
    """Opset, operator counts and reference outputs; or the reason the export failed."""
    import onnx
    import onnx.reference

    cpu_model = copy.deepcopy(model).to("cpu").eval()
    cpu_inputs = [(p, t.detach().cpu()) for p, t in flatten(inputs)]
    on_cpu = map_tensors(inputs, lambda tensor: tensor.detach().cpu())
    args, kwargs = ((), on_cpu) if isinstance(inputs, dict) else (tuple(on_cpu), None)
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the TorchScript exporter (dynamo=False) writes to file objects; torch's annotation omits them
            torch.onnx.export(cpu_model, args, buffer, kwargs=kwargs, dynamo=False)  # type: ignore[arg-type]
        graph = onnx.load_from_string(buffer.getvalue())
        onnx.checker.check_model(graph)
        feeds = {i.name: t.numpy() for i, (_, t) in zip(graph.graph.input, cpu_inputs, strict=False)}
        outputs = onnx.reference.ReferenceEvaluator(graph).run(None, feeds)
    except Exception as exc:  # an export failure is a finding, not a crash
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    assert isinstance(outputs, list)  # run() returns a dict only for intermediate=True
    return {
        "opset": max((o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "operators": dict(sorted(Counter(node.op_type for node in graph.graph.node).items())),
        "outputs": [torch.from_numpy(o.copy()) for o in outputs],
    }
