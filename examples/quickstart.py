"""Quickstart: train a small CNN on MNIST-1D with and without SBLoader, side by side.

    python examples/quickstart.py            # about a minute on 2 CPU cores
    python examples/quickstart.py --small    # a few seconds (what the tests run)

Every arm starts from the same weights and sees the samples in the same order. The SB arm trains only on the hardest
``keep`` share of each batch, chosen by one no-grad scoring forward; "SB + LossCache(2)" does the same but reuses a
sample's loss for up to two epochs (refreshed for free by the training step's own losses, ``observe``) instead of
rescoring it. The controls train without selection for fewer epochs, at about the seconds an SB arm took: the
baseline, which says whether selection beat simply training less, and the baseline at the batch size SB trains on
(``keep * B``), which takes as many optimizer steps per trained sample as SB and so says how much of SB's gain is
merely "more, smaller steps" (``benchmarks/time_to_accuracy/README.md`` finds that this explains most of fresh
scoring's gain for this model). Their epochs come from a calibrated cost model (``costmodel.py``): a few seconds at
the start time a training step and a scoring forward at each batch size on this machine, which predict each arm's
seconds. The table compares the arms on test accuracy, the share of samples that reached the backward pass, the
predicted and the measured seconds, and, machine-free, forward-equivalents (a scoring forward counts 1 per sample, a
training step 3 per sample).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import torch
import torch.nn.functional as F
from costmodel import Costs, calibrate, sb_step_seconds
from torch.utils.data import DataLoader, TensorDataset

from sbdata import LossCache, SBLoader, keep_count, with_index

# examples/common.py and examples/costmodel.py, beside this script (a script's own directory is importable)
from common import ConvNet, accuracy, load_mnist1d


def train(
    split, *, epochs: int, batch_size: int, keep: float | None, seed: int, progress: bool, cache: bool = False, costs
) -> dict:
    """Train one arm; ``keep=None`` is the plain baseline (at ``batch_size``); ``cache`` adds a LossCache."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    model = ConvNet()
    order = torch.Generator().manual_seed(seed)
    dataset = TensorDataset(split.x_train, split.y_train)
    if cache:  # each sample carries its index, the cache's id: batches are (x, y, index)
        dataset = with_index(dataset)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=order)
    options = {"cache": LossCache(staleness=2, size=len(dataset)), "id_key": -1} if cache else {}
    batches = loader if keep is None else SBLoader(loader, model, F.cross_entropy, keep=keep, **options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    scoring: Counter[int] = Counter()  # scoring forwards (no grad) by batch size, for the cost model's prediction

    def count_scoring(_, args) -> None:
        if not torch.is_grad_enabled():
            scoring[len(args[0])] += 1

    model.register_forward_pre_hook(count_scoring)
    lr_schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=epochs * len(loader))
    trained = 0
    started = time.perf_counter()
    for epoch in range(epochs):
        bar = tqdm(batches, desc=f"{'baseline' if keep is None else 'SB'} epoch {epoch + 1}", disable=not progress)
        for batch in bar:
            x, y = batch[0], batch[1]
            model.train()
            losses = F.cross_entropy(model(x), y, reduction="none")
            if cache:
                batches.observe(batch, losses)  # the training step's losses refresh the cache for free
            loss = losses.mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            lr_schedule.step()  # one LR step per loader batch in both arms: the same recipe
            trained += len(y)
            if keep is not None:
                bar.set_postfix(batches.stats.postfix(), refresh=False)
    seconds = time.perf_counter() - started
    scored = batches.stats.samples_scored if keep is not None else 0
    seen = epochs * len(loader.dataset)
    steps = epochs * len(loader)
    if keep is None:
        predicted = steps * costs.plain_step(batch_size)
    else:
        mix = {size: count / steps for size, count in scoring.items()}
        predicted = steps * sb_step_seconds(costs, batch_size, keep_count(keep, batch_size), overhead="sb", scored=mix)
    return {
        "predicted_seconds": predicted,
        "accuracy": accuracy(model, split.x_test, split.y_test),
        "backprop_fraction": trained / seen,
        "forward_equivalents": scored + 3 * trained,
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000, help="MNIST-1D samples, 80%% train (default 20000)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs per arm (default 8)")
    parser.add_argument("--batch-size", type=int, default=256, help="loader batch size (default 256)")
    parser.add_argument("--keep", type=float, default=0.33, help="share of each batch SB trains on (default 0.33)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="a seconds-long run: 2000 samples, 1 epoch")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument("--json", metavar="PATH", help="also write the results, per arm, to this JSON file")
    parser.add_argument(
        "--costs", metavar="PATH", help="price the arms with this cost table (JSON, as --json's 'costs') instead of "
        "calibrating: the control rows are then the same on any machine (what the tests do)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.small:
        args.samples, args.epochs = 2000, 1
    torch.set_num_threads(1)  # fair, repeatable timings on a shared machine

    split = load_mnist1d(args.samples)
    small = keep_count(args.keep, args.batch_size)
    if args.costs:
        with open(args.costs) as file:
            costs = Costs.from_dict(json.load(file))
    else:
        costs = calibrate_here(split, args.batch_size, args.keep, small)
    common = {"epochs": args.epochs, "batch_size": args.batch_size, "seed": args.seed, "progress": not args.no_progress}
    common["costs"] = costs
    results = {"baseline": train(split, keep=None, **common)}
    sb_name = f"SB top-k keep={args.keep}"
    results[sb_name] = train(split, keep=args.keep, **common)
    results["SB + LossCache(2)"] = train(split, keep=args.keep, cache=True, **common)
    base = results["baseline"]
    # Controls at about the seconds each SB arm takes as the cost model prices it (fewer epochs; the priced seconds,
    # not the measured ones, so that a noisy clock does not choose the rows): the baseline as it
    # is, which says whether selection beat simply training less, and the baseline at the batch size SB trains on,
    # which takes as many optimizer steps per trained sample as SB and so says how much of SB's gain is merely
    # "more, smaller steps".
    per_epoch = {size: -(-len(split.x_train) // size) * costs.plain_step(size) for size in (args.batch_size, small)}
    for arm, controls in ((sb_name, ("baseline", "small")), ("SB + LossCache(2)", ("small",))):
        seconds = results[arm]["predicted_seconds"]
        epochs = max(1, round(seconds / per_epoch[args.batch_size]))
        if "baseline" in controls and epochs < args.epochs:  # else SB saved no time: the baseline is its control
            results[f"baseline {epochs} epochs"] = train(split, keep=None, **{**common, "epochs": epochs})
        epochs = max(1, round(seconds / per_epoch[small]))
        if "small" in controls and f"batch {small}, {epochs} epochs" not in results:
            short = {**common, "epochs": epochs, "batch_size": small}
            results[f"batch {small}, {epochs} epochs"] = train(split, keep=None, **short)
    sizes = f"{len(split.x_train)} train / {len(split.x_test)} test"
    print(f"\nMNIST-1D, {sizes}, {args.epochs} epochs, batch {args.batch_size}")
    print(f"{'arm':<22}{'test acc':>9}{'backprop':>10}{'predicted':>10}{'seconds':>9}{'vs base':>9}{'fwd-equiv':>11}")
    for name, r in results.items():
        print(
            f"{name:<22}{r['accuracy']:>9.4f}{r['backprop_fraction']:>10.2f}{r['predicted_seconds']:>9.1f}s"
            f"{r['seconds']:>8.1f}s{r['seconds'] / base['seconds']:>8.2f}x"
            f"{r['forward_equivalents'] / base['forward_equivalents']:>10.2f}x"
        )
    if args.json:
        with open(args.json, "w") as file:
            json.dump({**results, "costs": costs.as_dict()}, file, indent=1)
    return results


def calibrate_here(split, batch_size: int, keep: float, small: int):
    """This machine's step costs for the ConvNet (a few seconds): loading a batch, training at B and at the small
    batch, scoring at every bucket size a cached run may use, and SBLoader's own work per SB step."""
    x, y = split.x_train, split.y_train
    torch.manual_seed(0)
    engine = SBLoader([], ConvNet(), F.cross_entropy, keep=keep).engine
    batch = (x[:batch_size], y[:batch_size])

    def sb_step() -> None:
        engine.process(batch)

    def fetch(size: int):  # one batch from a DataLoader like the arms', restarting it when it runs out
        loader = DataLoader(TensorDataset(x, y), batch_size=size, shuffle=True)
        state = {"batches": iter(loader)}

        def call() -> None:
            if next(state["batches"], None) is None:
                state["batches"] = iter(loader)

        return call

    quantum = -(-batch_size // 4)  # LossCache scores in multiples of a quarter batch (sbdata.cache.BUCKETS)
    sizes = sorted({*range(quantum, batch_size + 1, quantum), batch_size, len(x) % batch_size or batch_size})
    return calibrate(
        ConvNet, x, y, train_sizes=[batch_size, small, len(x) % batch_size or batch_size, len(x) % small or small],
        score_sizes=sizes, engine_steps={"sb": sb_step}, engine_batch=batch_size, block=4, rounds=3,
        data_calls={size: fetch(size) for size in (batch_size, small)},
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=1e-4),
    )  # fmt: skip


if __name__ == "__main__":
    main()
