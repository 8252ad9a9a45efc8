"""Overhead of the wrapper: SBLoader, the node and the WebDataset stage against a hand-written loop doing the same
scoring forward, top-k selection and indexing inline, on the same batches and model.

Per model, ``select`` (scoring, selection, indexing) and ``step`` (plus the training step) modes; arms in interleaved
blocks (the harness's timing loop), thread CPU time; noise-free counts per loader batch beside (aten operators,
Python calls, forwards). Commands and records: ``benchmarks/overhead/README.md``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.harness.models import MODELS as FAMILIES
from benchmarks.harness.records import machine, results_dir, write_results
from benchmarks.harness.runs import cli
from benchmarks.harness.timing import cpu_clock, interleaved, setup

from .arms import all_arms

RESULTS = results_dir("overhead")
# The timer: this thread's CPU time, which time spent waiting for the core on a shared machine does not inflate
# (torch runs on one thread here, so it is all the work); --clock wall switches to time.perf_counter.
CLOCK = cpu_clock
MODELS = {
    "tiny": lambda: nn.Sequential(nn.Flatten(), nn.Linear(40, 10)),  # where per-call overhead shows
    "mlp": lambda: FAMILIES["mlp"](),  # the time-to-accuracy MLP: a cheap step, where sbdata's fixed work shows
    "cnn": lambda: FAMILIES["cnn"](),  # the time-to-accuracy ConvNet, ~25k parameters
    "cnn-wide": lambda: FAMILIES["cnn"](width=128),  # the same ConvNet 4x wider, ~16x the compute
}


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def run_block(epoch, model, optimizer, train: bool) -> int:
    """One pass over the arm's batches; returns the samples yielded."""
    yielded = 0
    for x, y in epoch():
        yielded += len(y)
        if train:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return yielded


def counts(epoch, model, optimizer, train: bool, steps: int) -> dict[str, float]:
    """Noise-free work per loader batch: aten ops, Python calls and model forwards."""
    forwards = [0]
    hook = model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    calls = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    counter = OpCounter()
    try:
        with counter:
            run_block(epoch, model, optimizer, train)
        sys.setprofile(profile)
        run_block(epoch, model, optimizer, train)
    finally:
        sys.setprofile(None)
        hook.remove()
    return {"aten_ops": counter.ops / steps, "python_calls": calls[0] / steps, "forwards": forwards[0] / 2 / steps}


def measure(name: str, *, batch: int, steps: int, rounds: int, keep: float, train: bool) -> dict:
    """Interleaved A/B(/C...) timing of every arm on one model and mode."""
    torch.manual_seed(0)
    model = MODELS[name]()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(batch, 1, 40, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(steps)
    ]
    arms = {arm: factory(model, batches, keep) for arm, factory in all_arms().items()}
    out: dict = {"arms": {}, "skipped": {}}
    for arm, epoch in list(arms.items()):
        try:
            yielded = run_block(epoch, model, optimizer, train)  # warm-up, and a check that the arm works
        except Exception as error:  # an optional front end whose API moved: report, do not crash
            out["skipped"][arm] = f"{type(error).__name__}: {error}"
            del arms[arm]
            continue
        out["arms"][arm] = {"yielded_per_step": yielded / steps, "times": []}
    names = list(arms)

    def timed(arm: str) -> Callable[[int], float]:
        def run(_: int) -> float:
            started = CLOCK()
            run_block(arms[arm], model, optimizer, train)
            return (CLOCK() - started) / steps

        return run

    for arm, times in interleaved({arm: timed(arm) for arm in names}, rounds).items():
        out["arms"][arm]["times"].extend(times)
    reference = out["arms"]["hand-written"]["times"]
    for arm in names:
        row = out["arms"][arm]
        ratios = [t / h for t, h in zip(row["times"], reference, strict=True)]
        row.update(
            median_ms=1e3 * statistics.median(row["times"]),
            min_ms=1e3 * min(row["times"]),
            max_ms=1e3 * max(row["times"]),
            ratio_median=statistics.median(ratios),
            ratio_min=min(ratios),
            ratio_max=max(ratios),
            **counts(arms[arm], model, optimizer, train, steps),
        )
    return out


def table(results: dict) -> str:
    lines = [
        "| model | mode | arm | per step, ms (median [min, max]) | ratio to hand-written (median [min, max]) | "
        "aten ops / step | Python calls / step | forwards / step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, modes in results["models"].items():
        for mode, res in modes.items():
            for arm, r in res["arms"].items():
                lines.append(
                    f"| {model} | {mode} | {arm} | {r['median_ms']:.3f} [{r['min_ms']:.3f}, {r['max_ms']:.3f}] | "
                    f"{r['ratio_median']:.3f} [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}] | {r['aten_ops']:.0f} | "
                    f"{r['python_calls']:.0f} | {r['forwards']:.0f} |"
                )
            for arm, why in res["skipped"].items():
                lines.append(f"| {model} | {mode} | {arm} | skipped: {why} | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the overhead benchmark (see the module docstring); returns the exit status."""
    parser = cli("overhead", __doc__, out=RESULTS, smoke="tiny model, 3 steps, 2 rounds", suite=True)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch", type=int, default=256, help="loader batch size (default 256)")
    parser.add_argument("--keep", type=float, default=0.33)
    parser.add_argument("--steps", type=int, default=40, help="loader batches per timed block (default 40)")
    parser.add_argument("--rounds", type=int, default=25, help="timed blocks per arm (default 25)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="thread CPU time (default) or wall")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = cpu_clock if args.clock == "cpu" else time.perf_counter
    if args.smoke:
        args.models, args.steps, args.rounds, args.batch = ["tiny"], 3, 2, 64
    timing = setup()
    config = {k: str(v) for k, v in vars(args).items()}
    results = {"machine": machine(), "timing": timing, "config": config, "models": {}}
    for name in args.models:
        results["models"][name] = {}
        for mode in ("select", "step"):
            res = measure(name, batch=args.batch, steps=args.steps, rounds=args.rounds, keep=args.keep,
                          train=mode == "step")  # fmt: skip
            results["models"][name][mode] = res
            ratio = res["arms"]["SBLoader"]["ratio_median"]
            print(f"{name:<9} {mode:<7} SBLoader / hand-written = {ratio:.3f}", flush=True)
    write_results(args.out / args.suite, results, table(results))
    return 0
