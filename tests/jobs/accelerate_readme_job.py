"""The README's Accelerate set-up, as a new user writes it, for the tests: ``Accelerator(cpu=True)`` with its
defaults and a ``DataLoader(..., shuffle=True)`` (``--generator`` adds ``generator=``), prepared, then wrapped.

``--phase full`` trains two epochs and saves the state after batch 1 of epoch 1; ``--phase resume`` is a fresh
launch that builds everything the same way, loads that state and trains the rest. One launch runs each set-up
``--configs`` names in turn (``shuffle``; ``generator``: ``shuffle=True, generator=``), each from a freshly seeded
start with its own Accelerator, model and loader, so that the tests start the ranks once per phase, not once per
set-up. Each rank writes ``{config}/{phase}_rank{r}.json`` to ``--out``: the sample ids of each batch after the
save, the final weights and the sbdata warnings seen.
"""

from __future__ import annotations

import argparse
import gc
import json
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata.integrations.accelerate import wrap
from tests.launch import arm_watchdog

N, BATCH, EPOCHS, SAVE_AT = 64, 8, 2, (1, 1)  # checkpoint after batch 1 of epoch 1
CONFIGS = ("shuffle", "generator")


def main() -> None:
    arm_watchdog()
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--phase", choices=["full", "resume"], required=True)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=["shuffle"], help="the set-ups, in turn")
    args = parser.parse_args()
    for i, config in enumerate(args.configs):
        run(Path(args.out) / config, args.phase, generator=config == "generator", last=i == len(args.configs) - 1)
    if dist.is_initialized():
        dist.destroy_process_group()


def run(out: Path, phase: str, *, generator: bool, last: bool) -> None:
    """One set-up's phase: the README's lines, then this rank's report in ``out``; the last one ends the training
    (``end_training`` destroys the process group, which the next set-up's Accelerator would reuse)."""
    out.mkdir(parents=True, exist_ok=True)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    x = torch.randn(N, 4)
    data = TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), torch.arange(N))
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    seeded = torch.Generator().manual_seed(0) if generator else None
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, generator=seeded)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    sb = wrap(accelerator, loader, model, F.cross_entropy, keep=0.5, split=lambda batch: (batch[0], batch[1]))
    start = (0, 0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if phase == "resume":
            accelerator.load_state(out / "ckpt")
            start = SAVE_AT
        after_save: list[list[int]] = []
        for epoch in range(start[0], EPOCHS):
            sb.set_epoch(epoch)
            for index, (inputs, targets, ids) in enumerate(sb, start=start[1] + 1 if epoch == start[0] else 0):
                accelerator.backward(F.cross_entropy(model(inputs), targets))
                opt.step()
                opt.zero_grad()
                if (epoch, index) > SAVE_AT:
                    after_save.append(sorted(ids.tolist()))
                if phase == "full" and (epoch, index) == SAVE_AT:
                    accelerator.save_state(out / "ckpt")
    weights = [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()]
    report = {
        "after_save": after_save,
        "weights": weights,
        "warnings": [str(w.message) for w in record if "SBLoader" in str(w.message) or "sbdata" in str(w.message)],
    }
    (out / f"{phase}_rank{accelerator.process_index}.json").write_text(json.dumps(report))
    accelerator.wait_for_everyone()
    if last:
        accelerator.end_training()
    del accelerator, model, opt, sb  # see accelerate_job.py: free the DDP model before the process group
    gc.collect()


if __name__ == "__main__":
    main()
