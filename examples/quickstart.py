"""Quickstart: selection where the project measured it paying, beside the plain runs that could beat it.

    python examples/quickstart.py            # about 2.5 minutes on a 2-core CPU (docs/quickstart_runs.md)
    python examples/quickstart.py --small    # a few seconds: the structure, not the verdict (what the tests run)
    python examples/quickstart.py --quiet    # the table and the verdict alone

Needs the ``examples`` extra (MNIST-1D: ``pip install -e ".[examples]"`` from the clone's root); with matplotlib
installed it also saves a picture.

The run: MNIST-1D (generated offline, 16,000 training and 4,000 test samples), the wide ConvNet (width 64, BatchNorm:
a training step on 64 samples costs about a third of one on 256, so a shrunk step pays), AdamW with weight decay
1e-4 and a one-cycle LR. The user's recipe (batch 256, lr 3e-3, 8 epochs) sets the budget; the run is at half of it,
where the project's frontier benchmark (``benchmarks/results/frontier/scratch-wide/table.md``) measured selection
ahead of the best plain run of a tuned grid. Every arm trains at that grid's best LR, 0.024:

- ``baseline``: the tuned grid's best plain run at this budget: batch 256, 4 epochs.
- ``SB top-k keep=0.25 bf16``: ``SBLoader(loader, model, F.cross_entropy, keep=0.25, autocast_dtype=torch.bfloat16)``
  for 6 epochs: each batch of 256 is scored by one no-grad forward under bfloat16 autocast and the 64 hardest are
  trained on.
- ``random keep=0.25``: the same work, the 64 samples chosen by chance (is it the choice of samples that pays?).
- ``batch 64, N epochs``: plain training at the batch selection trains on (as many optimizer steps per trained sample),
  for 2 and 3 epochs, either side of the selection arm's compute (is it merely "more, smaller steps"?).

Seconds are CPU seconds of the training thread (``time.thread_time``, one torch thread), which a busy machine changes
far less than wall-clock time. Every arm is trained ``--repeats`` times, the arms' epochs interleaved one by one (the
order rotating every epoch), so that a change of load hits every arm alike; each repeat is the same run (same seed,
same order: the same accuracy). The table gives the median and range over the repeats and each arm's time ratio: its
seconds over the baseline's in the same repeat (below 1: faster than the baseline). The verdict names the arm that
reached the baseline's test accuracy (within ``--tolerance`` points) in the fewest CPU seconds; arms whose ratios
differ by less than 2 standard errors of their paired differences over the interleaved repeats are tied, and the
verdict says so rather than pick one. It says so too when a plain control, not selection, wins or ties: the verdict
is this machine's, whatever the records say.

Progress goes to stderr, one line per epoch of one arm (``--quiet`` turns it off). With matplotlib installed, the
arms' test accuracy against CPU seconds is saved as a picture (``--plot``, default ``quickstart.png``).
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader, keep_count

# examples/common.py, beside this script (a script's own directory is importable)
from common import WideConvNet, accuracy, load_mnist1d

TIED = 2.0  # standard errors of the repeats' paired ratio differences within which two arms are tied
SELECTION = "selection"  # an arm's kind: selection or one of the controls
CONTROL_MEANING = {
    "small batch": "more, smaller optimizer steps, not the choice of samples, is what saves time: use a smaller batch",
    "random": "choosing samples by loss adds nothing over chance here",
}
LR = 0.024  # the tuned grid's best LR at this budget, for plain and selection alike


class Run:
    """One arm's training run, advanced an epoch at a time, so that the arms' epochs can be interleaved.

    Args:
        split: the data.
        epochs: epochs to train (the one-cycle LR anneals over them).
        batch_size: the loader's batch size.
        keep: the share selection trains on; None trains on whole batches.
        seed: initial weights and sample order.
        policy: the selection policy (``"random"`` for the control).
    """

    def __init__(
        self, split: Any, *, epochs: int, batch_size: int, keep: float | None, seed: int, policy: str = "topk"
    ) -> None:
        self.split, self.epochs, self.batch_size, self.keep = split, epochs, batch_size, keep
        torch.manual_seed(seed)
        self.model = WideConvNet()
        order = torch.Generator().manual_seed(seed)
        dataset = TensorDataset(split.x_train, split.y_train)
        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=order)
        self.batches = self.loader
        if keep is not None:
            precision = {"autocast_dtype": torch.bfloat16} if policy == "topk" else {}
            self.batches = SBLoader(self.loader, self.model, F.cross_entropy, keep=keep, policy=policy, **precision)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=1e-4)
        total = epochs * len(self.loader)
        self.lr_schedule = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=LR, total_steps=total)
        self.epoch = 0
        self.trained = 0
        self.seconds = 0.0
        self.marks: list[float] = []  # CPU seconds at the end of each epoch
        self.curve: list[float] | None = None  # test accuracy after each epoch, when asked for (not timed)

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
            for x, y in self.batches:
                self.model.train()
                loss = F.cross_entropy(self.model(x), y)
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
            self.curve.append(accuracy(self.model, self.split.x_test, self.split.y_test))

    def result(self) -> dict:
        """Test accuracy, the share of samples trained on, and measured seconds."""
        return {
            "accuracy": accuracy(self.model, self.split.x_test, self.split.y_test),
            "backprop_fraction": self.trained / (self.epochs * len(self.loader.dataset)),
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
        return f"{name} (time ratio {t.ratio:.2f}, {t.low:.2f}-{t.high:.2f})"

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
  test acc    top-1 accuracy on the test split (every repeat of an arm is the same run: the same accuracy)
  backprop    share of the training samples that reached the backward pass
  CPU s       the training loop's CPU seconds in one thread (time.thread_time): median [min-max] over {repeats}
              repeats, the arms' epochs interleaved
  time ratio  each repeat's CPU seconds over the baseline's in the same repeat: median [min-max]; below 1 is faster
              than the baseline; the verdict counts two arms as tied when their ratios differ by less than {tied:g}
              standard errors of the repeats' paired differences
  controls    random: a random share of each batch (selection's work, samples by chance); batch {small}: the batch
              selection trains on (as many optimizer steps per trained sample), either side of its compute"""


def arms_for(args: argparse.Namespace) -> tuple[dict[str, dict], dict[str, str]]:
    """The arms (name: ``Run`` keyword arguments) and their kinds (selection or the control each is)."""
    small = keep_count(args.keep, args.batch_size)
    sb_name, random_name = f"SB top-k keep={args.keep:g} bf16", f"random keep={args.keep:g}"
    arms: dict[str, dict] = {
        "baseline": {"keep": None, "epochs": args.epochs},
        sb_name: {"keep": args.keep, "epochs": args.sb_epochs},
        random_name: {"keep": args.keep, "epochs": args.sb_epochs, "policy": "random"},
    }
    kinds = {sb_name: SELECTION, random_name: "random"}
    for epochs in args.small_epochs:
        arms[f"batch {small}, {epochs} epochs"] = {"keep": None, "epochs": epochs, "batch_size": small}
        kinds[f"batch {small}, {epochs} epochs"] = "small batch"
    return arms, kinds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000, help="MNIST-1D samples, 80%% train (default 20000)")
    parser.add_argument("--batch-size", type=int, default=256, help="loader batch size (default 256)")
    parser.add_argument("--keep", type=float, default=0.25, help="share of each batch selection trains on (0.25)")
    parser.add_argument("--epochs", type=int, default=4, help="the baseline's epochs (default 4)")
    parser.add_argument("--sb-epochs", type=int, default=6, help="the selection arm's and random's epochs (6)")
    parser.add_argument(
        "--small-epochs", type=int, nargs="+", default=[2, 3], help="the small-batch control's epochs (default 2 3)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of every arm, interleaved (default 5)")
    parser.add_argument(
        "--tolerance", type=float, default=0.25, help="accuracy points an arm may lose and still reach the "
        "baseline's, in the verdict (default 0.25: 10 of the 4000 test samples)"
    )  # fmt: skip
    parser.add_argument(
        "--small", action="store_true", help="seconds, not minutes: 2000 samples, 1-2 epochs, 2 repeats (a smoke run)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--plot", metavar="PATH", default="quickstart.png", help="save test accuracy against CPU seconds here, "
        "when matplotlib is installed (default quickstart.png; '' for none)"
    )  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="also write the results, per arm, to this JSON file")
    args = parser.parse_args(argv)
    if args.small:
        args.samples, args.epochs, args.sb_epochs, args.small_epochs, args.repeats = 2000, 1, 2, [1], 2
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: ties are read from the spread of the repeats")
    torch.set_num_threads(1)  # fair, repeatable timings on a shared machine
    started = time.monotonic()

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:5.0f}s] {text}", file=sys.stderr, flush=True)

    progress(f"generating MNIST-1D ({args.samples} samples, offline)")
    split = with_heartbeat(lambda: load_mnist1d(args.samples), progress, "generating MNIST-1D")
    arms, kinds = arms_for(args)
    names = list(arms)
    common = {"batch_size": args.batch_size, "seed": args.seed}
    runs: dict[str, list[dict]] = {name: [] for name in names}
    training_started = time.monotonic()
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
        if r == 0:
            spent = time.monotonic() - training_started
            progress(f"the other {args.repeats - 1} repeats take about {duration(spent * (args.repeats - 1))} more")
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
            "epochs": arms[name]["epochs"],
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
    print(f"MNIST-1D, {sizes}, the wide ConvNet, AdamW lr {LR:g} one-cycle, {args.repeats} timed repeats")
    print(f"{'arm':<26}{'epochs':>7}{'test acc':>9}{'backprop':>10}  {'CPU s [min-max]':<23}{'time ratio [min-max]'}")
    for name, r in results.items():
        t = timings[name]
        cpu = f"{statistics.median(t.seconds):.2f}s [{min(t.seconds):.2f}-{max(t.seconds):.2f}]"
        ratio = f"{t.ratio:.2f} [{t.low:.2f}-{t.high:.2f}]"
        print(f"{name:<26}{r['epochs']:>7}{r['accuracy']:>9.4f}{r['backprop_fraction']:>10.2f}  {cpu:<23}{ratio}")
    print()
    print(LEGEND.format(repeats=args.repeats, small=keep_count(args.keep, args.batch_size), tied=TIED))
    print()
    print(textwrap.fill(said, width=116))
    if args.plot:
        plot(curves, accuracies["baseline"] - args.tolerance / 100, args.plot, progress)
    if args.json:
        curve_points = {name: {"seconds": x, "accuracy": y} for name, (x, y) in curves.items()}
        with open(args.json, "w") as file:
            json.dump({**results, "verdict": said, "curves": curve_points}, file, indent=1)
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


if __name__ == "__main__":
    main()
