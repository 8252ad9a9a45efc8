"""Price an SB step on this machine before a long run: sbdata's calibrated cost model (``sbdata.auto.Costs``,
``calibration_calls``, ``costs_from``, ``sb_step_seconds``; the model is described in ``sbdata/auto/_calibrated.py``)
timed by this file's own interleaved loop.

    python examples/costmodel.py             # the wide ConvNet of the quickstart, batch 256, keep 0.25 (about 3 s)
    python examples/costmodel.py --keep 0.5 --batch-size 128

It times a training step at the loader batch and at the kept batch, a scoring forward and one SB step of an SBLoader
engine (one torch thread, CPU seconds, interleaved calls), and prints the predicted seconds of a plain step and of an
SB step: below 1 for their ratio, selection's steps are cheaper here (whether it reaches the accuracy sooner is the
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

from sbdata.auto import Costs, calibration_calls, costs_from, sb_step_seconds

__all__ = ["Costs", "calibrate", "costs_from", "interleaved", "sb_step_seconds"]


def interleaved(calls: dict[str, Callable[[], None]], *, block: int, rounds: int, clock=time.perf_counter) -> dict:
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
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    engine_steps: dict[str, Callable[[], None]] | None = None,
    engine_batch: int | None = None,
    data_calls: dict[int, Callable[[], None]] | None = None,
    block: int = 8,
    rounds: int = 5,
    clock=time.perf_counter,
    measure: bool = True,
) -> Costs:
    """Measure :class:`Costs` for a model on samples of ``x``/``y`` (at least the largest size): sbdata's
    ``calibration_calls``, timed by :func:`interleaved`.

    Args:
        make_model: a fresh model (trained on copies, so the caller's stays untouched).
        x, y: inputs and targets to slice batches from.
        train_sizes, score_sizes: the batch sizes to measure.
        make_optimizer: the training recipe's optimizer; default AdamW(lr=1e-3).
        engine_steps: by configuration name, one SB step of that configuration's engine on a ready batch of
            ``engine_batch`` samples (e.g. ``lambda: engine.process(batch)``); its time minus
            ``score[engine_batch]`` is that configuration's ``overhead``.
        data_calls: by batch size, how the run gets one batch (e.g. ``lambda: next(iter(loader))``); default a
            gather of random rows of ``x`` and ``y``.
        block, rounds: each round calls every function ``block`` times, interleaved one by one.
        clock: the timer; ``time.thread_time`` on a shared CPU machine.
        measure: False returns the calls by name instead, for :func:`costs_from` after timing them elsewhere.
    """
    calls = calibration_calls(make_model, x, y, train_sizes=train_sizes, score_sizes=score_sizes,
                              make_optimizer=make_optimizer, engine_steps=engine_steps, engine_batch=engine_batch,
                              data_calls=data_calls)  # fmt: skip
    if not measure:
        return calls  # type: ignore[return-value]
    return costs_from(interleaved(calls, block=block, rounds=rounds, clock=clock), engine_batch)


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
        engine_steps={"sb": lambda: engine.process((x, y))}, engine_batch=args.batch_size, block=4, rounds=3,
        clock=time.thread_time,
    )  # fmt: skip
    plain = costs.plain_step(args.batch_size)
    sb = sb_step_seconds(costs, args.batch_size, kept, overhead="sb")
    print(f"plain step, batch {args.batch_size}: {plain * 1e3:.2f} ms (CPU, one thread)")
    print(f"SB step, batch {args.batch_size} keeping {kept}: {sb * 1e3:.2f} ms: {sb / plain:.2f} of a plain step's")
    return {"plain": plain, "sb": sb, "costs": costs.as_dict()}


if __name__ == "__main__":
    main()
