"""Quickstart: train a small CNN on MNIST-1D with and without SBLoader, side by side, and say which paid.

    python examples/quickstart.py            # about six minutes on 2 CPU cores; progress on stderr
    python examples/quickstart.py --small    # a few seconds (what the tests run)
    python examples/quickstart.py --quiet    # the table and the verdict alone

Every arm starts from the same weights and sees the samples in the same order. The SB arm trains only on the hardest
``keep`` share of each batch, chosen by one no-grad scoring forward; "SB + LossCache(2)" does the same but reuses a
sample's loss for up to two epochs (refreshed for free by the training step's own losses, ``observe``) instead of
rescoring it. The controls train without selection: ``random`` on a random share of each batch (the same work as SB,
samples chosen by chance); the baseline for fewer epochs, at top-k's compute, which says whether selection beat
simply training less; and the baseline at the batch size SB trains on (``keep * B``), for the epochs either side of
the cheaper SB arm's compute, which takes as many optimizer steps per trained sample as SB and so says how much of
SB's gain is merely "more, smaller steps" (``benchmarks/time_to_accuracy/README.md`` finds that this explains most
of fresh scoring's gain for this model). Compute is counted in forward-equivalents (a scoring forward is 1 per
sample, a trained sample 3), which no machine changes, so every machine trains the same rows. The "predicted" column
is a calibrated cost model's price for each arm (``costmodel.py``: a few seconds at the start time a training step
and a scoring forward at each batch size on this machine, in thread CPU time; ``--costs`` gives a table instead).

Seconds are CPU seconds of the training thread (``time.thread_time``, one torch thread), which a busy machine
changes far less than wall-clock time. After one untimed warm-up run of the two SB arms (whose compute sets the
controls' epochs), every arm is trained ``--repeats`` times, the arms' epochs interleaved one by one (the order
rotating every epoch), so that a change of load hits every arm alike; each repeat is the same run (same seed, same
order: the same accuracy). The table gives the median and range over the repeats, and each arm's ratio to the
baseline's seconds in the same repeat. The verdict line names the arm that reached the baseline's test accuracy
(within ``--tolerance`` points) in the fewest CPU seconds; arms whose ratios differ by less than 2 standard errors of
their paired differences over the interleaved repeats are tied, and the verdict says so rather than pick one. It
says so too when a plain control, not selection, wins or ties.

Progress goes to stderr, one line per epoch of one arm (``--quiet`` turns it off), after a line with the cost model's
estimate of how long the run takes. With matplotlib installed, the arms' test accuracy against CPU seconds is saved
as a picture (``--plot``, default ``quickstart.png``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from costmodel import Costs, calibrate, sb_step_seconds
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sbdata import LossCache, SBLoader, keep_count, with_index

# examples/common.py and examples/costmodel.py, beside this script (a script's own directory is importable)
from common import ConvNet, Split, accuracy, load_mnist1d

TIED = 2.0  # standard errors of the repeats' paired ratio differences within which two arms are tied
SELECTION = "selection"  # an arm's kind: selection (top-k, with or without the cache) or one of the controls
CONTROL_MEANING = {
    "fewer epochs": "training less is enough: train the baseline for fewer epochs",
    "small batch": "more, smaller optimizer steps, not the choice of samples, is what saves time: use a smaller batch",
    "random": "choosing samples by loss adds nothing over chance here",
}


class Run:
    """One arm's training run, advanced an epoch at a time, so that the arms' epochs can be interleaved.

    Args:
        split: the data.
        epochs: epochs to train.
        batch_size: the loader's batch size.
        keep: the share SB trains on; None is the plain baseline (at ``batch_size``).
        seed: initial weights and sample order.
        costs: the cost model's table, for the predicted seconds.
        cache: add a ``LossCache(staleness=2)`` refreshed by ``observe``.
        policy: the selection policy (``"random"`` for the control).
    """

    def __init__(
        self,
        split: Split,
        *,
        epochs: int,
        batch_size: int,
        keep: float | None,
        seed: int,
        costs: Costs,
        cache: bool = False,
        policy: str = "topk",
    ) -> None:
        self.split, self.epochs, self.batch_size, self.keep, self.costs = split, epochs, batch_size, keep, costs
        self.cache = cache
        torch.manual_seed(seed)
        self.model = ConvNet()
        order = torch.Generator().manual_seed(seed)
        dataset = TensorDataset(split.x_train, split.y_train)
        if cache:  # each sample carries its index, the cache's id: batches are (x, y, index)
            dataset = with_index(dataset)
        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=order)
        options = {"cache": LossCache(staleness=2, size=len(dataset)), "id_key": -1} if cache else {}
        self.batches = (
            self.loader
            if keep is None
            else SBLoader(self.loader, self.model, F.cross_entropy, keep=keep, policy=policy, **options)
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=1e-4)
        total = epochs * len(self.loader)
        self.lr_schedule = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=3e-3, total_steps=total)
        self.scoring: Counter[int] = Counter()  # scoring forwards (no grad) by batch size, for the cost model
        self.model.register_forward_pre_hook(self._count_scoring)
        self.epoch = 0
        self.trained = 0
        self.seconds = 0.0
        self.marks: list[float] = []  # CPU seconds at the end of each epoch
        self.curve: list[float] | None = None  # test accuracy after each epoch, when asked for (not timed)
        self.evaluating = False  # the curve's test forwards are not scoring forwards

    def _count_scoring(self, _: nn.Module, args: tuple) -> None:
        if not torch.is_grad_enabled() and not self.evaluating:
            self.scoring[len(args[0])] += 1

    @property
    def done(self) -> bool:
        """Whether every epoch has been trained."""
        return self.epoch == self.epochs

    def train_epoch(self) -> None:
        """Train one epoch, adding its CPU seconds in this thread (one torch thread) to ``seconds``."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # all of the work in this thread, where time.thread_time sees it
        try:
            started = time.thread_time()
            for batch in self.batches:
                x, y = batch[0], batch[1]
                self.model.train()
                losses = F.cross_entropy(self.model(x), y, reduction="none")
                if self.cache:
                    self.batches.observe(batch, losses)  # the training step's losses refresh the cache for free
                loss = losses.mean()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                self.lr_schedule.step()  # one LR step per loader batch in every arm: the same recipe
                self.trained += len(y)
            self.seconds += time.thread_time() - started
        finally:
            torch.set_num_threads(threads)
        self.epoch += 1
        self.marks.append(self.seconds)
        if self.curve is not None:
            self.evaluating = True
            self.curve.append(accuracy(self.model, self.split.x_test, self.split.y_test))
            self.evaluating = False

    def result(self) -> dict:
        """Test accuracy, the share of samples trained on, forward-equivalents, predicted and measured seconds."""
        scored = self.batches.stats.samples_scored if self.keep is not None else 0
        steps = self.epochs * len(self.loader)
        if self.keep is None:
            predicted = steps * self.costs.plain_step(self.batch_size)
        else:
            mix = {size: count / steps for size, count in self.scoring.items()}
            kept = keep_count(self.keep, self.batch_size)
            predicted = steps * sb_step_seconds(self.costs, self.batch_size, kept, overhead="sb", scored=mix)
        return {
            "predicted_seconds": predicted,
            "accuracy": accuracy(self.model, self.split.x_test, self.split.y_test),
            "backprop_fraction": self.trained / (self.epochs * len(self.loader.dataset)),
            "forward_equivalents": scored + 3 * self.trained,
            "seconds": self.seconds,
            "marks": self.marks,
            "curve": self.curve,
        }


def interleaved(runs: dict[str, Run], rotate: int = 0, progress: Callable[[str], None] = print) -> dict[str, dict]:
    """Train the runs epoch by epoch in turn (the order rotating every epoch), so that a change of the machine's
    load hits every arm alike; returns each run's :meth:`Run.result`. ``progress`` is called once before each epoch
    of each arm: no more than one arm's epoch of work goes by between two calls."""
    names = list(runs)
    turn = rotate
    while not all(run.done for run in runs.values()):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            if not runs[name].done:
                progress(f"{name}: epoch {runs[name].epoch + 1}/{runs[name].epochs}")
                runs[name].train_epoch()
        turn += 1
    return {name: run.result() for name, run in runs.items()}


def with_heartbeat(work: Callable[[], Any], say: Callable[[str], None], what: str, every: float = 10.0) -> Any:
    """``work()``, saying ``what`` is still under way every ``every`` seconds while it runs (one call with no
    progress of its own, such as generating the data)."""
    stop = threading.Event()

    def beat() -> None:
        waited = 0.0
        while not stop.wait(every):
            waited += every
            say(f"{what}: still at it after {waited:.0f} s")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        return work()
    finally:
        stop.set()
        thread.join()


def duration(seconds: float) -> str:
    """``seconds`` in words: ``"40 s"`` or ``"4.5 min"``."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def tied(a: Timing, b: Timing) -> bool:
    """Whether two arms' ratios to the baseline differ by less than ``TIED`` standard errors of their paired
    differences over the interleaved repeats (repeat ``i`` of both ran in the same rounds; a single repeat has no
    standard error: tied only if equal)."""
    differences = [x - y for x, y in zip(a.ratios, b.ratios, strict=True)]
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return mean == 0
    error = statistics.stdev(differences) / math.sqrt(len(differences))
    return abs(mean) <= TIED * error


@dataclass
class Timing:
    """One arm's measured CPU seconds over the repeats, and its ratio to the baseline's in each repeat."""

    seconds: list[float]
    ratios: list[float]

    @property
    def ratio(self) -> float:
        """The median ratio to the baseline's seconds."""
        return statistics.median(self.ratios)

    @property
    def low(self) -> float:
        """The smallest ratio of any repeat."""
        return min(self.ratios)

    @property
    def high(self) -> float:
        """The largest ratio of any repeat."""
        return max(self.ratios)


def verdict(
    accuracies: dict[str, float], timings: dict[str, Timing], kinds: dict[str, str], *, tolerance: float
) -> str:
    """The verdict in words, from accuracies and ratios alone (no clock: tests pass fixed numbers).

    An arm *pays* if its test accuracy is at most ``tolerance`` points below the baseline's and its ratio to the
    baseline's CPU seconds is below 1 in every repeat. The winner is the paying arm with the lowest median ratio;
    every other paying arm :func:`tied` with it (within ``TIED`` standard errors over the repeats) shares the win,
    and the verdict names them all rather than pick one. A plain control among them is named, with what it means.

    Args:
        accuracies: test accuracy by arm (0-1); ``"baseline"`` among them.
        timings: the measured ratios by arm.
        kinds: by arm, ``"selection"`` or the control it is (a key of ``CONTROL_MEANING``); the baseline has none.
        tolerance: accuracy points (0-100) an arm may lose and still count as reaching the baseline's.
    """
    target = accuracies["baseline"] - tolerance / 100
    paying = [name for name in kinds if accuracies[name] >= target and timings[name].high < 1.0]
    where = f"the baseline's test accuracy ({accuracies['baseline']:.4f}, within {tolerance:g} points)"
    if not paying:
        return (
            f"Verdict: nothing paid here: no arm reached {where} in fewer CPU seconds than the baseline in every "
            "repeat; train on whole batches."
        )
    best = min(paying, key=lambda name: timings[name].ratio)
    first = [best, *(name for name in paying if name != best and tied(timings[name], timings[best]))]
    repeats = len(timings[best].ratios)
    within = f"tied within {TIED:g} standard errors of the {repeats} interleaved repeats"

    def said(name: str) -> str:
        t = timings[name]
        return f"{name} ({t.ratio:.2f}x, {t.low:.2f}-{t.high:.2f}x)"

    def listed(names: list[str]) -> str:
        return (
            ", ".join(said(name) for name in names[:-1]) + f" and {said(names[-1])}"
            if len(names) > 1
            else said(names[0])
        )

    controls = [name for name in first if kinds[name] != SELECTION]
    if not controls:
        if len(first) == 1:
            return (
                f"Verdict: selection pays here: {said(best)} reached {where} in the fewest CPU seconds, ahead of "
                "every plain control."
            )
        return (
            f"Verdict: selection pays here: {listed(first)} reached {where} in the fewest CPU seconds, {within} "
            "(the repeats cannot order them), ahead of every plain control."
        )
    control = controls[0]
    if len(controls) < len(first):
        return (
            f"Verdict: selection does not beat the plain control here: {listed(first)} reached {where}, {within} "
            f"(the repeats cannot order them); {CONTROL_MEANING[kinds[control]]}."
        )
    if len(first) == 1:
        return (
            f"Verdict: a plain control wins: {said(control)} reached {where} in the fewest CPU seconds, and no "
            f"selection arm came within {TIED:g} standard errors of it; {CONTROL_MEANING[kinds[control]]}."
        )
    return (
        f"Verdict: a plain control wins: {listed(first)} reached {where} in the fewest CPU seconds, {within}, and "
        f"no selection arm came within {TIED:g} standard errors of them; {CONTROL_MEANING[kinds[control]]}."
    )


LEGEND = """\
Legend:
  test acc   top-1 accuracy on the test split (every repeat of an arm is the same run: the same accuracy)
  backprop   share of the training samples that reached the backward pass
  fwd-equiv  compute on no machine in particular, relative to the baseline: a scoring forward counts 1 per sample,
             a trained sample 3
  predicted  the cost model's CPU seconds for the arm on this machine (calibrated at the start, or --costs)
  CPU s      the training loop's CPU seconds in one thread (time.thread_time): median [min-max] over {repeats}
             repeats, the arms' epochs interleaved
  vs base    each repeat's CPU seconds over the baseline's in the same repeat: median [min-max]; the verdict counts
             two arms as tied when their ratios differ by less than {tied:g} standard errors of the repeats'
             paired differences
  controls   random: a random share of each batch (SB's work, samples by chance); baseline N epochs: training
             less, at top-k's compute; batch {small}: SB's batch size (as many optimizer steps per trained sample
             as SB), for the epochs either side of the cheaper SB arm's compute"""


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000, help="MNIST-1D samples, 80%% train (default 20000)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs per arm (default 8)")
    parser.add_argument("--batch-size", type=int, default=256, help="loader batch size (default 256)")
    parser.add_argument("--keep", type=float, default=0.33, help="share of each batch SB trains on (default 0.33)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of every arm, interleaved (default 5)")
    parser.add_argument(
        "--tolerance", type=float, default=0.25, help="accuracy points an arm may lose and still reach the "
        "baseline's, in the verdict (default 0.25: 10 of the 4000 test samples)"
    )  # fmt: skip
    parser.add_argument("--small", action="store_true", help="a seconds-long run: 2000 samples, 1 epoch, 2 repeats")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--plot", metavar="PATH", default="quickstart.png", help="save test accuracy against CPU seconds here, "
        "when matplotlib is installed (default quickstart.png; '' for none)"
    )  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="also write the results, per arm, to this JSON file")
    parser.add_argument(
        "--costs", metavar="PATH", help="price the arms with this cost table (JSON, as --json's 'costs') instead of "
        "calibrating: the control rows are then the same on any machine (what the tests do)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.small:
        args.samples, args.epochs, args.repeats = 2000, 1, 2
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: ties are read from the spread of the repeats")
    torch.set_num_threads(1)  # fair, repeatable timings on a shared machine
    started = time.monotonic()

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:5.0f}s] {text}", file=sys.stderr, flush=True)

    progress(f"generating MNIST-1D ({args.samples} samples, offline)")
    split = with_heartbeat(lambda: load_mnist1d(args.samples), progress, "generating MNIST-1D")
    small = keep_count(args.keep, args.batch_size)
    if args.costs:
        with open(args.costs) as file:
            costs = Costs.from_dict(json.load(file))
    else:
        progress("calibrating the cost model: timing a training step and a scoring forward on this machine")
        costs = calibrate_here(split, args.batch_size, args.keep, small)
    steps = -(-len(split.x_train) // args.batch_size) * args.epochs
    sb_run = steps * sb_step_seconds(costs, args.batch_size, small, overhead="sb", scored={args.batch_size: 1.0})
    plain_run = steps * costs.plain_step(args.batch_size)
    # the timed rounds: the baseline, 3 selection-priced arms, and controls at about selection's compute (at most 3)
    estimate = 2 * sb_run + args.repeats * (plain_run + 3 * sb_run + 3 * sb_run)
    progress(
        f"this run takes about {duration(estimate)} of CPU time on this machine (the cost model's prices: a "
        f"warm-up of 2 arms, then {args.repeats} timed repeats of 6-7 arms; longer if the machine is busy)"
    )
    common = {"epochs": args.epochs, "batch_size": args.batch_size, "seed": args.seed, "costs": costs}
    sb_name, random_name = f"SB top-k keep={args.keep}", f"random keep={args.keep}"
    arms = {
        "baseline": {"keep": None},
        sb_name: {"keep": args.keep},
        "SB + LossCache(2)": {"keep": args.keep, "cache": True},
        random_name: {"keep": args.keep, "policy": "random"},
    }
    kinds = {sb_name: SELECTION, "SB + LossCache(2)": SELECTION, random_name: "random"}
    # Warm-up (not timed): the selection arms once, whose priced seconds set the controls' epochs.
    warm = interleaved({name: Run(split, **common, **arms[name]) for name in (sb_name, "SB + LossCache(2)")},
                       progress=lambda text: progress(f"warm-up: {text}"))  # fmt: skip
    # Controls at the SB arms' compute, in forward-equivalents (machine-free, so the rows are the same on every
    # machine and under any load; a plain epoch costs 3 FE per sample): the baseline for fewer epochs, at top-k's
    # compute, which says whether selection beat simply training less, and the baseline at the batch size SB trains
    # on for the epochs either side of the cheaper SB arm's compute, which take as many optimizer steps per trained
    # sample as SB and so say how much of SB's gain is merely "more, smaller steps".
    plain_epoch = 3 * len(split.x_train)
    epochs = max(1, round(warm[sb_name]["forward_equivalents"] / plain_epoch))
    if epochs < args.epochs:  # else SB saved no compute: the baseline is its control
        arms[f"baseline {epochs} epochs"] = {"keep": None, "epochs": epochs}
        kinds[f"baseline {epochs} epochs"] = "fewer epochs"
    cheapest = min(run["forward_equivalents"] for run in warm.values()) / plain_epoch
    for epochs in sorted({max(1, math.floor(cheapest)), max(1, math.ceil(cheapest))}):
        arms[f"batch {small}, {epochs} epochs"] = {"keep": None, "epochs": epochs, "batch_size": small}
        kinds[f"batch {small}, {epochs} epochs"] = "small batch"
    # Timed: every arm `repeats` times, its epochs interleaved with the other arms', the order rotated every epoch.
    names = list(arms)

    def price(name: str) -> float:  # the cost model's CPU seconds for one run of an arm
        if name in warm or arms[name].get("policy") == "random":  # random: selection's work
            return warm[name if name in warm else sb_name]["predicted_seconds"]
        size = arms[name].get("batch_size", args.batch_size)
        return arms[name].get("epochs", args.epochs) * -(-len(split.x_train) // size) * costs.plain_step(size)

    timed = args.repeats * sum(price(name) for name in names)
    progress(f"warm-up done; the {args.repeats} timed repeats of {len(names)} arms take about {duration(timed)} more")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(args.repeats):
        fresh = {name: Run(split, **{**common, **arms[name]}) for name in names}
        if r == 0:  # every repeat is the same run: the first one's accuracies after each epoch are the curves
            for run in fresh.values():
                run.curve = []
        done = interleaved(
            fresh, rotate=r, progress=lambda text, r=r: progress(f"repeat {r + 1}/{args.repeats}: {text}")
        )
        for name in names:
            runs[name].append(done[name])
    progress("done: the table and the verdict follow on stdout")
    base = [run["seconds"] for run in runs["baseline"]]
    timings = {
        name: Timing([run["seconds"] for run in done], [run["seconds"] / b for run, b in zip(done, base, strict=True)])
        for name, done in runs.items()
    }
    results = {
        name: {
            **done[0],
            "accuracies": [run["accuracy"] for run in done],  # the same in every repeat: the same run
            "seconds": timings[name].seconds,
            "ratios": timings[name].ratios,
        }
        for name, done in runs.items()
    }
    accuracies = {name: result["accuracy"] for name, result in results.items()}
    said = verdict(accuracies, timings, kinds, tolerance=args.tolerance)
    curves = {
        name: ([statistics.median(marks) for marks in zip(*(run["marks"] for run in done), strict=True)],
               done[0]["curve"])
        for name, done in runs.items()
    }  # fmt: skip
    for result in results.values():
        del result["marks"], result["curve"]

    sizes = f"{len(split.x_train)} train / {len(split.x_test)} test"
    print(f"MNIST-1D, {sizes}, {args.epochs} epochs, batch {args.batch_size}, {args.repeats} timed repeats")
    header = f"{'arm':<22}{'test acc':>9}{'backprop':>10}{'fwd-equiv':>11}{'predicted':>11}"
    print(f"{header}  {'CPU s [min-max]':<23}{'vs base [min-max]'}")
    for name, r in results.items():
        t = timings[name]
        cpu = f"{statistics.median(t.seconds):.2f}s [{min(t.seconds):.2f}-{max(t.seconds):.2f}]"
        ratio = f"{t.ratio:.2f}x [{t.low:.2f}-{t.high:.2f}]"
        print(
            f"{name:<22}{r['accuracy']:>9.4f}{r['backprop_fraction']:>10.2f}"
            f"{r['forward_equivalents'] / results['baseline']['forward_equivalents']:>10.2f}x"
            f"{r['predicted_seconds']:>10.1f}s  {cpu:<23}{ratio}"
        )
    print()
    print(LEGEND.format(repeats=args.repeats, small=small, tied=TIED))
    print()
    print(textwrap.fill(said, width=116))
    if args.plot:
        plot(curves, accuracies["baseline"] - args.tolerance / 100, args.plot, progress)
    if args.json:
        curve_points = {name: {"seconds": x, "accuracy": y} for name, (x, y) in curves.items()}
        with open(args.json, "w") as file:
            json.dump({**results, "costs": costs.as_dict(), "verdict": said, "curves": curve_points}, file, indent=1)
    return results


def plot(curves: dict[str, tuple[list[float], list[float]]], target: float, path: str, say) -> None:
    """Save each arm's test accuracy after each epoch against its CPU seconds (the median over the repeats) to
    ``path``, with the accuracy the verdict asks for; says where, or that matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say(f"no picture: matplotlib is not installed (pip install matplotlib, then run again for {path})")
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, (seconds, accuracy_) in curves.items():
        axes.plot([0.0, *seconds], [math.nan, *accuracy_], marker="o", markersize=3, label=name)
    axes.axhline(target, color="grey", linestyle="--", linewidth=1, label="the baseline's accuracy, less the tolerance")
    axes.set_xlabel("CPU seconds of training (median over the repeats)")
    axes.set_ylabel("test accuracy")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    say(f"saved the accuracy-against-seconds curves to {path}")


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
        clock=time.thread_time,  # CPU seconds, as the arms are measured
    )  # fmt: skip


if __name__ == "__main__":
    main()
