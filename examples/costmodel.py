"""Price an SB step on this machine before a long run, with sbdata's one cost model (``sbdata.CostTable``: linear
fits of the measured seconds, and its one step price, ``CostTable.sb_step``) timed by this file's own interleaved
loop.

    python examples/costmodel.py             # the wide ConvNet of the quickstart, batch 256, keep 0.25 (about 3 s)
    python examples/costmodel.py --keep 0.5 --batch-size 128

It times a training step at the loader batch and at the kept batch, a scoring forward and one SB step of an SBLoader
engine (one torch thread, CPU seconds, interleaved calls), fits a ``CostTable`` (sbdata's own work per SB step:
the SB step's seconds less the scoring forward's), and prints the predicted seconds of a plain step and of an SB
step: below 1 for their ratio, selection's steps are cheaper here (whether it reaches the accuracy sooner is the
quickstart's question). Use one torch thread and, for stable numbers, the allocator pinning of
``benchmarks/lab/timing.py`` (``pin_allocator``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from sbdata import CostTable

__all__ = ["calibrate", "interleaved"]


def interleaved(
    calls: dict[str, Callable[[], object]], *, block: int, rounds: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Median seconds per call of each function. Calls are interleaved one by one (each round runs every function
    ``block`` times in turn, the order rotating every round), after one warm-up call each: so each call finds the
    caches as the other calls left them, as in a training loop, and a load change on a shared machine hits every
    function alike."""
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        calls[name]()
    for r in range(rounds * block):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = clock()
            calls[name]()
            times[name].append(clock() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def calibrate(
    make_model: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    train_sizes: list[int],
    score_sizes: list[int],
    sb_step: Callable[[], object] | None = None,
    block: int = 8,
    rounds: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> CostTable:
    """Fit a :class:`~sbdata.CostTable` for a model from interleaved timings (:func:`interleaved`) of a training
    step (forward, backward, AdamW step) at each of ``train_sizes`` and a scoring forward (no grad, eval mode,
    per-sample loss) at each of ``score_sizes``, on the first rows of ``x``/``y`` (at least the largest size).

    Args:
        make_model: a fresh model (trained on its own copy, so the caller's stays untouched).
        x, y: inputs and targets to slice batches from.
        train_sizes, score_sizes: the batch sizes to time.
        sb_step: one SB step of an engine on a batch of ``score_sizes[-1]`` samples (e.g.
            ``lambda: engine.process(batch)``); its seconds less the scoring forward's at that size are the table's
            ``overhead``. Default None: overhead 0.
        block, rounds: each round calls every function ``block`` times, interleaved one by one.
        clock: the timer; ``time.thread_time`` on a shared CPU machine.
    """
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train(b: int) -> Callable[[], None]:
        def step() -> None:
            model.train()
            loss = F.cross_entropy(model(x[:b]), y[:b])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    def score(b: int) -> Callable[[], None]:
        def forward() -> None:
            model.eval()
            with torch.no_grad():
                F.cross_entropy(model(x[:b]), y[:b], reduction="none")
            model.train()

        return forward

    calls = {f"train {b}": train(b) for b in sorted(set(train_sizes))}
    calls.update({f"score {b}": score(b) for b in sorted(set(score_sizes))})
    if sb_step is not None:
        calls["sb"] = sb_step
    seconds = interleaved(calls, block=block, rounds=rounds, clock=clock)
    overhead = max(0.0, seconds["sb"] - seconds[f"score {max(score_sizes)}"]) if sb_step is not None else 0.0
    sized = {kind: {int(name.split()[1]): value for name, value in seconds.items() if name.startswith(kind)}
             for kind in ("train", "score")}  # fmt: skip
    return CostTable.fit(sized["score"], sized["train"], overhead)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=256, help="the loader batch (default 256)")
    parser.add_argument("--keep", type=float, default=0.25, help="the share an SB step trains on (default 0.25)")
    args = parser.parse_args(argv)
    from sbdata import SBLoader, keep_count

    from common import WideConvNet  # beside this script

    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(args.batch_size, 1, 40), torch.randint(0, 10, (args.batch_size,))
    kept = keep_count(args.keep, args.batch_size)
    engine = SBLoader([], WideConvNet(), F.cross_entropy, keep=args.keep).engine
    costs = calibrate(
        WideConvNet, x, y, train_sizes=[args.batch_size, kept], score_sizes=[args.batch_size],
        sb_step=lambda: engine.process((x, y)), block=4, rounds=3, clock=time.thread_time,
    )  # fmt: skip
    plain = costs.train(args.batch_size)
    sb = costs.sb_step(args.batch_size, kept).seconds
    print(f"plain step, batch {args.batch_size}: {plain * 1e3:.2f} ms (CPU, one thread)")
    print(f"SB step, batch {args.batch_size} keeping {kept}: {sb * 1e3:.2f} ms: {sb / plain:.2f} of a plain step's")
    return {"plain": plain, "sb": sb, "costs": vars(costs)}


if __name__ == "__main__":
    main()
