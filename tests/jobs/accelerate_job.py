"""An Accelerate training job for the tests: run directly (one process) or under torchrun (several).

It trains two epochs with ``wrap`` (prepare, then wrap), saves the state mid-way through epoch 1, then builds
everything afresh, loads that state and finishes the epoch. Each rank writes ``rank{r}.json`` to ``--out``: the
sample ids kept per batch, the samples seen per epoch, and whether the wrong order (wrap, then prepare) was refused.
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator, DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader
from sbdata.integrations.accelerate import wrap
from tests.launch import arm_watchdog

N, BATCH, EPOCHS, SAVE_AT = 64, 8, 2, (1, 1)  # checkpoint after batch 1 of epoch 1


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), torch.arange(N))


def build(stateful: bool):
    accelerator = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, use_stateful_dataloader=stateful)
    )
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(dataset(), batch_size=BATCH, shuffle=True))

    def split(batch):
        return batch[0], batch[1]

    sb = wrap(accelerator, loader, model, F.cross_entropy, keep=0.5, split=split)
    return accelerator, model, opt, sb


def train(accelerator, model, opt, sb, epochs, log, save_dir=None) -> None:
    for epoch in epochs:
        sb.set_epoch(epoch)
        seen_before = sb.stats.samples_seen
        for batch_index, (x, y, ids) in enumerate(sb):
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            log["batches"].append([epoch, sorted(ids.tolist())])
            if save_dir is not None and (epoch, batch_index) == SAVE_AT:
                accelerator.save_state(save_dir)
                log["saved_after"] = len(log["batches"])
        log["seen"].append(sb.stats.samples_seen - seen_before)


def main() -> None:
    arm_watchdog()
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--stateful", action="store_true", help="use_stateful_dataloader=True")
    args = parser.parse_args()
    out = Path(args.out)
    full = {"batches": [], "seen": []}
    accelerator, model, opt, sb = build(args.stateful)
    train(accelerator, model, opt, sb, range(EPOCHS), full, save_dir=out / "ckpt")
    resumed = {"batches": [], "seen": []}
    accelerator, model, opt, sb = build(args.stateful)
    accelerator.load_state(out / "ckpt")
    train(accelerator, model, opt, sb, range(SAVE_AT[0], EPOCHS), resumed)
    try:  # the wrong order: wrap an unprepared loader (to prepare the SBLoader after): refused, naming the fix
        SBLoader(DataLoader(dataset(), batch_size=BATCH), model, F.cross_entropy, keep=0.5)
        refused = ""
    except RuntimeError as error:
        refused = str(error)
    report = {
        "rank": accelerator.process_index,
        "world": accelerator.num_processes,
        "full": full,
        "resumed": resumed,
        "wrong_order_refused": refused,
        "state_files": sorted(p.name for p in (out / "ckpt").glob("sbdata_rank*.pt")),
    }
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(report))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    # torch 2.13 with gloo on CPU can abort at exit ("terminate called without an active exception") while a DDP
    # model is still alive: free everything, then destroy the process group ourselves
    del accelerator, model, opt, sb
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
