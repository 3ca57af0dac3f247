"""Imported by every Python process a real-trainer test starts (its folder is on PYTHONPATH):
where LOSS_LOG is set, each scalar `backward()` called from a file named LOSS_SCRIPT appends
that call's line and loss, as JSON, to LOSS_LOG.rank<RANK>: the trainer's losses step by step,
read without changing its code. LOSS_SEED seeds torch first, for trainers that draw their data
unseeded (pytorch/examples' ddp-tutorial-series). Every process, the originals on the CPU too,
waits at exit for its threads to settle as the emulation's do (npu_migrate.emulation.settle):
torch 2.13's gloo otherwise aborts a CPU trainer at exit now and then on a busy machine."""

import os

from npu_migrate.emulation import settle

settle.at_exit()

if os.environ.get("LOSS_LOG"):
    import json
    import sys

    import torch

    if os.environ.get("LOSS_SEED"):
        torch.manual_seed(int(os.environ["LOSS_SEED"]))
    _backward = torch.Tensor.backward
    _script = os.environ["LOSS_SCRIPT"]

    _inside = []  # a torch function mode (the emulation's) calls Tensor.backward again: once each

    def _recorded(self, *args, **kwargs):
        if self.numel() == 1 and not _inside:
            frame = sys._getframe(1)
            while frame is not None and os.path.basename(frame.f_code.co_filename) != _script:
                frame = frame.f_back
            if frame is not None:
                line = json.dumps({"line": frame.f_lineno, "loss": self.item()})
                with open(f"{os.environ['LOSS_LOG']}.rank{os.environ.get('RANK', '0')}", "a") as log:
                    log.write(line + "\n")
        _inside.append(self)
        try:
            return _backward(self, *args, **kwargs)
        finally:
            _inside.pop()

    torch.Tensor.backward = _recorded
