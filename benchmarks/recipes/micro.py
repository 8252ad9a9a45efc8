"""What sbdata costs beside its scoring pass, and whether its scoring ranks the samples the training step would.

``python -m benchmarks micro STAGE [--smoke] [--out DIR]`` writes ``DIR/STAGE/`` (``summary.json``, ``table.md``,
``machine.json``; ``DIR``: ``benchmarks/results/micro``, with ``--smoke`` (seconds) ``benchmarks/results/tmp/micro``):

- ``overhead``: a training step behind ``SBLoader``, the torchdata node and the WebDataset stage against a hand-written
  loop doing the same scoring (eval mode, no grad), top-k (ties to the lower index, batch order kept) and subsetting,
  on MNIST-1D's ConvNet at width 32 and 128 and a one-layer model; per-step thread CPU seconds, interleaved, and
  each round's ratio to the hand-written loop (without torchdata the node's arm is skipped, said in the table).
- ``auto-off``: a step of ``keep="auto"`` that never trials against a plain loop: ``keep="auto"`` not told the run's
  length (it runs no trial; a row says when it did) and, where ``Auto`` takes ``warmup``, a warm-up past
  any run. Target: at most 1.02x.
- ``scoring``: along each domain's user run, on fixed batches of its training set: bfloat16-autocast scoring against
  fp32 (kept-set overlap at keep 0.25 and 0.5); and where a model has running statistics or dropout, two scoring
  modes against the training forward's per-sample losses (train mode, the same batch): eval mode, and batch
  statistics (sbdata's default ``score_mode="batch"``: normalisation on the batch's own statistics, running
  statistics untouched, dropout off), each sbdata's own pass, with overlap and Spearman's rank correlation, and each
  mode's cost.
- ``cache``: whole runs of top-k 0.25 fresh against a ``LossCache(staleness=2)`` from scratch, without ``observe``,
  with it and with ``refresh="scored"``, 3 seeds, each seed's arms in rotated order (``runs.jsonl``, resumable).
- ``streaming``: ``sb_select`` in a WebDataset pipeline over 1,000,000 samples from tar shards: seconds with and
  without the stage, and the main process's RSS sampled as it streams.
- ``gpu``: seconds per epoch (plain, the small batch, top-k, the cache with ``observe``) and every SB step of top-k,
  rank, random and both cache layouts under ``torch.cuda.set_sync_debug_mode("error")``; stops without a CUDA device.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import io
import itertools
import math
import pickle
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.domains import domain
from benchmarks.domains.mnist1d import ConvNet
from benchmarks.lab._sb import Auto, LossCache, SBLoader, sb_select, sb_selector
from benchmarks.lab.arm import Arm, Built
from benchmarks.lab.batches import Batches
from benchmarks.lab.domain import Domain
from benchmarks.lab.loop import Job, run_loop
from benchmarks.lab.records import RESULTS, machine, table, write_json, write_report
from benchmarks.lab.run import endless, scoring_pass, train_run
from benchmarks.lab.step import train_step
from benchmarks.lab.timing import interleaved, rotated, setup, sized_block

Report = tuple[dict[str, Any], list[str]]
KEEPS = (0.25, 0.5)
NEVER = 10**12  # Auto(warmup=NEVER): no trial ever starts


# -- the pure pieces ------------------------------------------------------------------------------------------------


def kept(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """The indices top-k keeps of (N,) ``scores``: the ``ceil(keep * N)`` highest (at least 1), ties to the lower
    index, in descending order of score."""
    k = min(len(scores), max(1, math.ceil(keep * len(scores) - 1e-9)))
    return torch.sort(scores, descending=True, stable=True).indices[:k]


def overlap(first: torch.Tensor, second: torch.Tensor, keep: float) -> float:
    """``|A ∩ B| / k``: the share of the samples top-k keeps under ``first`` that it also keeps under ``second``."""
    a, b = kept(first, keep), kept(second, keep)
    return float(torch.isin(a, b).sum()) / len(a)


def ranks(values: torch.Tensor) -> torch.Tensor:
    """0-based ranks of (N,) ``values``, ties sharing their mean rank (float64)."""
    ordered, order = torch.sort(values.double(), stable=True)
    _, inverse, counts = torch.unique_consecutive(ordered, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    out = torch.empty(len(values), dtype=torch.float64)
    out[order] = ((ends - counts) + ends - 1)[inverse] / 2
    return out


def spearman(first: torch.Tensor, second: torch.Tensor) -> float:
    """Spearman's rank correlation of two (N,) vectors (Pearson's on their tie-averaged ranks); NaN when one is
    constant."""
    a, b = ranks(first), ranks(second)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / ((a * a).sum() * (b * b).sum()).sqrt())


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def per_round(times: dict[str, list[float]], base: str) -> dict[str, dict[str, Any]]:
    """Each arm's median milliseconds per step and its ratio to ``base`` round by round (median, min, max)."""
    out = {}
    for name, values in times.items():
        ratios = [t / b for t, b in zip(values, times[base], strict=True)]
        out[name] = {"median_ms": 1e3 * statistics.median(values), "ratio": spread(ratios), "ratios": ratios,
                     "seconds": values}  # fmt: skip
    return out


def timed(steppers: dict[str, Iterator[Any]], smoke: bool, seconds: float, rounds: int) -> dict[str, list[float]]:
    """Per-step thread CPU seconds of every stepper in each measured round (blocks of about ``seconds``, interleaved,
    rotating, after a warm-up round that sizes them; smoke: blocks of 2 steps, 2 rounds)."""
    for stepper in steppers.values():
        next(stepper)
    size = dict.fromkeys(steppers, 2)
    blocks = {name: sized_block(steppers[name], size, name, 0.0 if smoke else seconds) for name in steppers}
    return interleaved(blocks, 2 if smoke else rounds, warmup=1)


# -- overhead -------------------------------------------------------------------------------------------------------

OVERHEAD_KEEP = 0.33  # the old overhead benchmark's, so its records compare
Epoch = Callable[[], Iterator[Any]]


def hand_written(dom: Domain, model: nn.Module, batches: list[Any], keep: float) -> Epoch:
    """Scoring, top-k and subsetting written inline, as a user would without sbdata."""

    def epoch() -> Iterator[Any]:
        for batch in batches:
            was = model.training
            model.eval()
            with torch.no_grad():
                losses = dom.loss(model, batch)
            model.train(was)
            index = kept(losses, keep).sort().values
            yield tuple(t.index_select(0, index) for t in batch)

    return epoch


def front_end(name: str, dom: Domain, model: nn.Module, batches: list[Any], keep: float) -> Epoch:
    """An epoch of ``batches`` through the front end ``name`` (ImportError where its package is missing)."""
    if name == "hand-written":
        return hand_written(dom, model, batches, keep)
    if name == "wds.sb_select":
        stage = sb_select()(model, **dom.sb_options(), keep=keep)
        return lambda: stage(iter(batches))
    if name == "nodes.SBSelector":
        from torchdata.nodes import IterableWrapper, Loader

        loader = Loader(sb_selector()(IterableWrapper(batches), model, **dom.sb_options(), keep=keep))
    else:
        loader = SBLoader(batches, model, **dom.sb_options(), keep=keep)
    return lambda: iter(loader)


def trained_steps(dom: Domain, model: nn.Module, epoch: Epoch, count: list[int]) -> Iterator[None]:
    """Endless training steps on ``epoch()``'s batches at a small fixed LR; ``count``: steps and samples trained."""
    optimizer = dom.optimizer(model, dom.recipes["cnn"], dom.recipes["cnn"]["lr"] / 25)
    while True:
        for batch in epoch():
            train_step(dom, model, optimizer, batch)
            count[0] += 1
            count[1] += len(batch[0])
            yield None


def overhead(out: Path, smoke: bool) -> Report:
    dom = domain("mnist1d")
    data = dom.data(smoke=smoke)
    size = 64 if smoke else 256
    batches = [b for b in Batches(dom, data.train, size, 0) if len(b[0]) == size][: 3 if smoke else None]
    models = {"one-layer": dom.tiny, "cnn": lambda: dom.model("cnn"), "cnn-wide": lambda: ConvNet(128)}
    summary: dict[str, Any] = {"keep": OVERHEAD_KEEP, "batch": size, "loader_batches": len(batches), "models": {}}
    rows = []
    for name, make in models.items():
        steppers, counts, skipped = {}, {}, {}
        for arm in ("hand-written", "SBLoader", "nodes.SBSelector", "wds.sb_select"):
            torch.manual_seed(0)
            model = make()
            try:
                epoch = front_end(arm, dom, model, batches, OVERHEAD_KEEP)
            except ImportError as error:  # torchdata or webdataset not installed
                skipped[arm] = f"skipped: {error}"
                continue
            counts[arm] = [0, 0]
            steppers[arm] = trained_steps(dom, model, epoch, counts[arm])
        arms = per_round(timed(steppers, smoke, 0.5, 25), "hand-written")
        for arm, row in arms.items():
            row["trained_per_step"] = counts[arm][1] / counts[arm][0]
            r = row["ratio"]
            rows.append([name, arm, f"{row['median_ms']:.3f}", f"{r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}]",
                         f"{row['trained_per_step']:g}"])  # fmt: skip
        rows += [[name, arm, why, "", ""] for arm, why in skipped.items()]
        summary["models"][name] = {"arms": arms, "skipped": skipped}
    lines = [f"# A training step behind each front end against the hand-written loop (keep {OVERHEAD_KEEP}, batch "
             f"{size}; thread CPU time, interleaved)", "",
             *table(["model", "arm", "ms per step (median)", "x hand-written per round (median [min, max])",
                     "trained per step"], rows)]  # fmt: skip
    return summary, lines


# -- auto-off -------------------------------------------------------------------------------------------------------


def stepping(dom: Domain, model: nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[Any], None]:
    return lambda batch: train_step(dom, model, optimizer, batch)


def auto_off(out: Path, smoke: bool) -> Report:
    dom, family = domain("mnist1d"), "cnn"
    data, recipe = dom.data(smoke=smoke), dom.recipes["cnn"]
    arms: dict[str, Any] = {"plain loop": None, 'keep="auto", run not told': "auto"}
    if "warmup" in inspect.signature(Auto).parameters:
        arms[f"Auto(warmup={NEVER:.0e}), run not told"] = Auto(warmup=NEVER)
    steppers: dict[str, Iterator[Any]] = {}
    loaders: dict[str, Any] = {}
    for name, keep in arms.items():
        torch.manual_seed(0)
        model = dom.model(family)
        optimizer = dom.optimizer(model, recipe, recipe["lr"] / 25)
        source = Batches(dom, data.train, recipe["batch"], 0)
        loaders[name] = source if keep is None else SBLoader(source, model, **dom.sb_options(), keep=keep)
        steppers[name] = endless(loaders[name], stepping(dom, model, optimizer))
    found = per_round(timed(steppers, smoke, 0.25, 41), "plain loop")
    rows = []
    for name, row in found.items():
        if name != "plain loop":
            stats = loaders[name].stats
            row.update(trials=stats.auto_trials, on_share=stats.auto_on_share, samples_scored=stats.samples_scored)
        r, trials = row["ratio"], row.get("trials", 0)
        note = "" if not trials else f"trialled {trials}x: not an off measurement"
        rows.append([name, f"{row['median_ms']:.3f}", f"{r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}]", note])
    lines = ["# keep='auto' between trials against a plain loop (MNIST-1D ConvNet, batch 256; target <= 1.02x)", "",
             *table(["arm", "ms per step (median)", "x plain per round (median [min, max])", "note"],
                    rows)]  # fmt: skip
    return {"arms": found, "target": 1.02}, lines


# -- scoring --------------------------------------------------------------------------------------------------------


# suite: domain, family, the user run's epochs, the domain's data spec
SCORING: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "mnist1d-cnn": ("mnist1d", "cnn", 4, {"samples": 20_000}),
    "mnist1d-cnn64": ("mnist1d", "cnn64", 4, {"samples": 20_000}),
    "mnist1d-mlp": ("mnist1d", "mlp", 4, {"samples": 20_000}),
    "digits-cnn": ("digits", "cnn", 25, {}),
    "fashion-cnn": ("fashion_mnist", "cnn", 8, {"samples": 20_480}),
    "bytelm": ("stdlib_bytes", "bytelm", 8, {}),
}
PROBES, EARLY = 16, 20  # fixed loader batches compared at each point; the early point's steps
MODES = ("eval", "batch-stats")


def varies(model: nn.Module) -> bool:
    """Whether a forward's mode changes its losses: normalisation with running statistics, or dropout."""
    return any(getattr(m, "track_running_stats", False) or (isinstance(m, nn.Dropout) and m.p > 0)
               for m in model.modules())  # fmt: skip


def training_losses(dom: Domain, model: nn.Module, batch: Any, seed: int) -> torch.Tensor:
    """The training forward's per-sample losses (train mode: batch statistics, dropout drawn from ``seed``) on a copy
    of ``model``, so that the run's model, its running statistics and the global RNG are untouched."""
    twin = copy.deepcopy(model).train()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return dom.loss(twin, batch).float()


def agreement(pairs: list[tuple[torch.Tensor, torch.Tensor]], rank: bool = False) -> dict[str, Any]:
    """Per keep, the mean and lowest kept-set overlap over the batches' ``(first, second)`` scores; with ``rank``
    also the mean Spearman correlation and the mean of each batch's ratio of mean losses (first over second)."""
    out: dict[str, Any] = {}
    for keep in KEEPS:
        values = [overlap(a, b, keep) for a, b in pairs]
        out[str(keep)] = {"mean": statistics.fmean(values), "lowest": min(values)}
    if rank:
        out["spearman"] = statistics.fmean(spearman(a, b) for a, b in pairs)
        out["loss_ratio"] = statistics.fmean(float(a.mean() / b.mean()) for a, b in pairs)
    return out


def scoring_suite(name: str, smoke: bool) -> dict[str, Any]:
    """The suite's user run (its recipe), measured before the first step, after :data:`EARLY` steps, at half and at
    nine tenths of the run; the modes' costs timed on the untrained model."""
    dom_name, family, epochs, spec = SCORING[name]
    dom = domain(dom_name)
    data = dom.data(smoke=smoke, **spec)
    recipe = dom.recipes[family]
    b, epochs = recipe["batch"], 1 if smoke else epochs
    steps = epochs * math.ceil(data.size / b)
    points = (0.0, (2 if smoke else EARLY) / steps, 0.5, 0.9)
    draw = torch.randperm(data.size, generator=torch.Generator().manual_seed(7))
    probe = [dom.batch(data.train, index, False) for index in draw[: (2 if smoke else PROBES) * b].split(b)]
    costs: dict[str, float] = {}
    passes = {"eval": scoring_pass(dom, "eval"), "eval bf16": scoring_pass(dom, "eval", autocast=True),
              "batch-stats": scoring_pass(dom, "batch")}  # sbdata's own passes, as SBLoader runs them  # fmt: skip

    def measure(model: nn.Module, _: Any) -> dict[str, Any]:
        found: dict[str, Any] = {"bf16": agreement([(passes["eval bf16"](model, p), passes["eval"](model, p))
                                                    for p in probe])}  # fmt: skip
        if varies(model):
            train = [training_losses(dom, model, p, i) for i, p in enumerate(probe)]
            for mode in MODES:
                mine = [passes[mode](model, p) for p in probe]
                found[mode] = agreement(list(zip(mine, train, strict=True)), rank=True)
        if not costs:
            ways = ["eval", "eval bf16", *(["batch-stats"] if varies(model) else [])]
            steppers: dict[str, Iterator[Any]] = {
                name: (passes[name](model, p) for _ in itertools.count() for p in probe) for name in ways
            }
            times = per_round(timed(steppers, smoke, 0.25, 12), "eval")
            costs.update({name: row["median_ms"] for name, row in times.items()})
        return found

    record = train_run(dom, family, data, Arm("user", b, recipe["lr"]), epochs=epochs, seed=0, inspect=measure,
                       inspect_at=points)  # fmt: skip
    return {"domain": dom_name, "kind": dom.kind, "family": family, "epochs": epochs, "batch": b,
            "probe_batches": len(probe), "points": record["inspections"], "cost_ms_per_batch": costs,
            "metric": record[dom.metric.key], "steps": steps}  # fmt: skip


def scoring(out: Path, smoke: bool) -> Report:
    summary: dict[str, Any] = {"keeps": KEEPS, "batch_stats": "sbdata's score_mode='batch'",
                               "suites": {}, "skipped": {}}  # fmt: skip
    for name in SCORING:
        try:
            summary["suites"][name] = scoring_suite(name, smoke)
        except SystemExit as error:  # a domain whose files are not here (Fashion-MNIST)
            summary["skipped"][name] = str(error)
    cell = lambda d: f"{d['mean']:.3f} ({d['lowest']:.3f})"  # noqa: E731
    precision, modes, costs = [], [], []
    for name, s in summary["suites"].items():
        for p in s["points"]:
            at = f"step {round(p['at'] * s['steps'])} of {s['steps']}"
            precision.append([name, at, *(cell(p["bf16"][str(k)]) for k in KEEPS)])
            for mode in (mode for mode in MODES if mode in p):
                m = p[mode]
                modes.append([name, at, mode, *(cell(m[str(k)]) for k in KEEPS), f"{m['spearman']:.3f}",
                              f"{m['loss_ratio']:.3f}"])  # fmt: skip
        ms = s["cost_ms_per_batch"]
        costs.append([name, s["batch"], *(f"{ms[w]:.3f} ({ms[w] / ms['eval']:.2f})" if w in ms else "" for w in
                                          ("eval", "eval bf16", "batch-stats"))])  # fmt: skip
    lines = ["# bfloat16 scoring against fp32: kept-set overlap, mean over the batches (lowest)", "",
             *table(["suite", "at", "keep 0.25", "keep 0.5"], precision), "",
             "# Scoring modes against the training forward's per-sample losses (train mode, the same batch)", "",
             "batch-stats: normalisation on the batch's own statistics, running statistics untouched, dropout off "
             "(sbdata's score_mode='batch'; eval: score_mode='eval').", "",
             *table(["suite", "at", "mode", "keep 0.25", "keep 0.5", "Spearman", "mean loss / training's"], modes), "",
             "# Scoring cost per batch, ms (x eval): eval, eval bf16, batch-stats", "",
             *table(["suite", "batch", "eval", "eval bf16", "batch-stats"], costs),
             *(f"\n{name}: {why}" for name, why in summary["skipped"].items())]  # fmt: skip
    return summary, lines


# -- cache ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedArm(Arm):
    """Selection over a ``LossCache`` filled from scratch (the lab's :class:`Arm` carries a cache only warm or
    under a sampler), or fresh with ``cached=False``; every arm's batches carry their ids.

    Attributes:
        cached: score through ``LossCache(staleness, size, refresh)``.
        observe: the training step hands its losses to ``loader.observe``.
        refresh: the cache's ``refresh=``.
    """

    cached: bool = False
    observe: bool = False
    refresh: str = "observed"

    def build(self, domain: Domain, family: str, model: nn.Module, data: Any, *, epochs: int, seed: int,
              pretrained: dict[str, Any] | None = None) -> Built:  # fmt: skip
        source = Batches(domain, data.train, self.batch, seed, ids=True)
        options: dict[str, Any] = {**domain.sb_options(), "keep": self.keep, "policy": self.policy, "generator": seed}
        if self.cached:
            cache = LossCache(staleness=self.staleness, size=data.size, refresh=self.refresh)
            options.update(cache=cache, id_key=domain.id_key)
        loader = SBLoader(source, model, **options)
        return Built(loader, source, loader, observe=loader.observe if self.observe else None)


def cache(out: Path, smoke: bool) -> Report:
    dom = domain("mnist1d")
    family, epochs, seeds = ("mlp", 4, (0,)) if smoke else ("cnn", 14, (0, 1, 2))
    data = dom.data(smoke=smoke)
    top = {"batch": dom.recipes[family]["batch"], "lr": dom.recipes[family]["lr"], "policy": "topk", "keep": 0.25}
    arms = [CachedArm("fresh", **top), CachedArm("cache-s2", **top, cached=True),
            CachedArm("cache-s2-observe", **top, cached=True, observe=True),
            CachedArm("cache-s2-observe-scored", **top, cached=True, observe=True, refresh="scored")]  # fmt: skip

    def job(arm: CachedArm, seed: int) -> Job:
        return Job((arm.name, seed), lambda: {"arm": arm.name, **train_run(dom, family, data, arm, epochs=epochs,
                                                                             seed=seed)})  # fmt: skip

    jobs = (job(arm, seed) for seed in seeds for arm in rotated(arms, seed))
    records = run_loop(jobs, out / "runs.jsonl", lambda r: (r["arm"], r["seed"]))
    by = {(r["arm"], r["seed"]): r for r in records}
    summary: dict[str, Any] = {"family": family, "epochs": epochs, "seeds": list(seeds), "arms": {}}
    rows = []
    for arm in arms:
        mine = [by[arm.name, s] for s in seeds]
        row: dict[str, Any] = {"seconds": spread([r["cpu_seconds"] for r in mine]),
               "x_fresh": spread([r["cpu_seconds"] / by["fresh", r["seed"]]["cpu_seconds"] for r in mine]),
               "scored_x_fresh": statistics.fmean(r["sb"]["samples_scored"] / by["fresh", r["seed"]]["sb"]
                                                  ["samples_scored"] for r in mine),
               "accuracy": statistics.fmean(r[dom.metric.key] for r in mine)}  # fmt: skip
        if arm.observe:
            row["x_no_observe"] = spread([r["cpu_seconds"] / by["cache-s2", r["seed"]]["cpu_seconds"] for r in mine])
        summary["arms"][arm.name] = row
        s, x = row["seconds"], row["x_fresh"]
        rows.append([arm.name, f"{s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}]",
                     f"{x['median']:.3f} [{x['min']:.3f}, {x['max']:.3f}]", f"{row['scored_x_fresh']:.3f}",
                     f"{x2['median']:.3f}" if (x2 := row.get("x_no_observe")) else "",
                     dom.metric.show(row["accuracy"])])  # fmt: skip
    lines = [f"# Whole runs of top-k 0.25 through a LossCache against fresh scoring (MNIST-1D {family}, {epochs} "
             f"epochs, seeds {', '.join(map(str, seeds))}; thread CPU seconds)", "",
             *table(["arm", "seconds (median [min, max])", "x fresh (median [min, max])", "samples scored x fresh",
                     "x cache-s2", "accuracy"], rows)]  # fmt: skip
    return summary, lines


# -- streaming ------------------------------------------------------------------------------------------------------

FEATURES, CLASSES, RECORD = 40, 10, 256


def memory() -> dict[str, float]:
    """This process's resident set and its peak, MiB (Linux's /proc)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {"rss_mib": int(status["VmRSS"].split()[0]) / 1024, "peak_mib": int(status["VmHWM"].split()[0]) / 1024}


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def decode(record: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return tuple(np.lib.format.read_array(io.BytesIO(record[k]), allow_pickle=False) for k in ("x.npy", "y.npy"))


def streaming(out: Path, smoke: bool) -> Report:
    try:
        import webdataset as wds

        stage_of = sb_select()
    except ImportError as error:
        return {"skipped": f"{error.name or error} is not installed"}, [f"streaming: skipped ({error})"]
    samples, repeats, workers, keep = (4096, 1, 0, 0.5) if smoke else (1_000_000, 3, 2, 0.5)
    summary: dict[str, Any] = {"samples": samples, "repeats": repeats, "workers": workers, "keep": keep}

    def pipeline(urls: list[str]) -> Any:
        data = wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(decode)
        loader = wds.WebLoader(data, batch_size=None, num_workers=workers)
        return loader.unbatched().shuffle(1000, initial=1000).batched(256)

    def passed(batches: Iterator[Any], probe: Callable[[int], None] | None = None) -> tuple[float, int, int]:
        started, seen, count = time.perf_counter(), 0, 0
        for count, batch in enumerate(batches):
            seen += len(batch[0])
            if probe is not None and count % 64 == 0:
                probe(seen)
        return time.perf_counter() - started, seen, count + 1

    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        with wds.ShardWriter(f"{tmp}/bench-%06d.tar", maxcount=-(-samples // RECORD // 8) or 1, verbose=0) as sink:
            for r in range(-(-samples // RECORD)):
                n = min(RECORD, samples - r * RECORD)
                sink.write({"__key__": f"record-{r:07d}", "y.npy": npy(rng.integers(0, CLASSES, n)),
                            "x.npy": npy(rng.standard_normal((n, FEATURES), dtype=np.float32))})  # fmt: skip
        urls = sorted(str(p) for p in Path(tmp).glob("bench-*.tar"))
        plain = [passed(iter(pipeline(urls))) for _ in range(repeats)]
        trace: list[dict[str, Any]] = []
        with_stage, stages = [], []
        for repeat in range(repeats):
            stage = stage_of(nn.Identity(), F.cross_entropy, keep=keep)  # costs nothing: the stage's own cost shows
            stages.append(stage)
            probe = (lambda n, s=stage: trace.append({"samples": n, **memory(),
                     "state_bytes": len(pickle.dumps(s.state_dict()))})) if repeat == 0 else None  # fmt: skip
            with_stage.append(passed(stage(iter(pipeline(urls))), probe))
    stats = stages[0].stats
    for name, runs in (("pipeline", plain), ("with_stage", with_stage)):
        summary[name] = {"seconds": [r[0] for r in runs], "median_s": statistics.median(r[0] for r in runs),
                         "samples_per_s": statistics.median(r[1] / r[0] for r in runs), "yielded": runs[0][1],
                         "batches": runs[0][2]}  # fmt: skip
    rss = [t["rss_mib"] for t in trace]
    summary["memory"] = {"first_mib": rss[0], "last_mib": rss[-1], "growth_mib": rss[-1] - rss[0],
                         "max_mib": max(rss), "trace": trace, "samples_seen": stats.samples_seen,
                         "samples_yielded": stats.samples_yielded}  # fmt: skip
    p, w, m = summary["pipeline"], summary["with_stage"], summary["memory"]
    lines = [f"# sb_select (keep {keep}, a parameter-free model) in a WebDataset pipeline over {samples:,} samples "
             f"({workers} loader workers; wall seconds, median of {repeats})", "",
             *table(["pipeline", "seconds", "samples / s", "samples yielded"],
                    [["alone", f"{p['median_s']:.2f}", f"{p['samples_per_s']:,.0f}", p["yielded"]],
                     ["with sb_select", f"{w['median_s']:.2f}", f"{w['samples_per_s']:,.0f}", w["yielded"]]]), "",
             f"Main process RSS while streaming: {m['first_mib']:.1f} MiB at the first batch, {m['last_mib']:.1f} at "
             f"the last sample ({m['growth_mib']:+.1f}), at most {m['max_mib']:.1f}; the stage's state "
             f"{trace[0]['state_bytes']} bytes at the start, {trace[-1]['state_bytes']} at the end."]  # fmt: skip
    return summary, lines


# -- gpu ------------------------------------------------------------------------------------------------------------

GPU_KEEP = 0.25


class DeviceBatches:
    """``(x, y, ids)`` batches of tensors held on ``device``, a fresh permutation each epoch; the ids stay on the
    host (pinned on CUDA: what the cache reads without a copy back)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch: int, device: torch.device) -> None:
        self.x, self.y, self.batch, self.device = x.to(device), y.to(device), batch, device
        self.generator = torch.Generator().manual_seed(0)

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        order = torch.randperm(len(self.y), generator=self.generator)
        order = order.pin_memory() if self.device.type == "cuda" else order
        on_device = order.to(self.device, non_blocking=True)
        for start in range(0, len(order), self.batch):
            yield self.x[on_device[start : start + self.batch]], self.y[on_device[start : start + self.batch]], \
                order[start : start + self.batch]  # fmt: skip


def gpu_measure(device: torch.device, smoke: bool) -> Report:
    """The GPU stage's measurements on ``device`` (the sync check needs CUDA; elsewhere it says so)."""
    dom = domain("mnist1d")
    data = dom.data(smoke=smoke)
    x, y = data.train
    widths, sizes, epochs = ([8], [64], 1) if smoke else ([32, 256], [256, 1024], 6)
    summary: dict[str, Any] = {"device": str(device), "timing": {}, "sync_check": {}}
    if device.type == "cuda":
        summary["gpu"] = torch.cuda.get_device_name(device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    rows = []
    for width, size in itertools.product(widths, sizes):
        runs: dict[str, Any] = {}
        for name in ("plain", "small-batch", "sb-topk", "sb-cache-observe"):
            torch.manual_seed(0)
            model = ConvNet(width).to(device)
            batches = DeviceBatches(x, y, math.ceil(GPU_KEEP * size) if name == "small-batch" else size, device)
            cached = name.endswith("observe")
            options: dict[str, Any] = {"cache": LossCache(staleness=2, size=len(y)), "id_key": -1} if cached else {}
            sb = SBLoader(batches, model, **dom.sb_options(), keep=GPU_KEEP, **options) if name[:3] == "sb-" else None
            runs[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3), sb or batches, [], cached)

        def epoch(name: str, runs: dict[str, Any] = runs) -> Callable[[int], None]:
            def run(_: int) -> None:
                model, optimizer, loader, seconds, observes = runs[name]
                sync()
                started = time.perf_counter()
                for batch in loader:
                    train_step(dom, model, optimizer, batch, observe=loader.observe if observes else None)
                sync()
                seconds.append(time.perf_counter() - started)

            return run

        interleaved({name: epoch(name) for name in runs}, epochs, warmup=1)
        base = statistics.median(runs["plain"][3][1:])
        found = {name: {**spread(r[3][1:]), "x_plain": statistics.median(r[3][1:]) / base} for name, r in runs.items()}
        summary["timing"][f"{width}/{size}"] = found
        rows += [[f"ConvNet width {width}", size, name, f"{r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}]",
                  f"{r['x_plain']:.3f}"] for name, r in found.items()]  # fmt: skip
    summary["sync_check"] = sync_check(dom, x, y, sizes[0], device)
    lines = ["# Seconds per epoch on the device (wall clock between synchronisations; interleaved)", "",
             *table(["model", "batch", "arm", "s / epoch (median [min, max])", "x plain"], rows), "",
             *table(["every SB step under set_sync_debug_mode('error')", "result"],
                    list(summary["sync_check"].items()))]  # fmt: skip
    return summary, lines


def sync_check(dom: Domain, x: torch.Tensor, y: torch.Tensor, size: int, device: torch.device) -> dict[str, str]:
    """Two epochs of every SB step (and its ``observe``) under ``set_sync_debug_mode("error")``: "ok", or the
    error a synchronising call raised."""
    if device.type != "cuda":
        return {"all": "skipped: no CUDA device (tests/checks/test_syncs.py counts would-be syncs on the CPU)"}
    configs: dict[str, dict[str, Any]] = {"topk": {}, "rank": {"policy": "rank"}, "random": {"policy": "random"},
               "topk+dense cache+observe": {"cache": LossCache(staleness=1, size=len(y)), "id_key": -1},
               "topk+keyed cache+observe": {"cache": LossCache(staleness=1, capacity=len(y)),
                                            "id_key": -1}}  # fmt: skip
    found = {}
    for name, options in configs.items():
        torch.manual_seed(0)
        model = ConvNet().to(device)
        batches = DeviceBatches(x, y, size, device)
        loader = SBLoader(batches, model, **dom.sb_options(), keep=GPU_KEEP, **options)
        found[name] = "ok"
        try:
            for _ in range(2):
                outputs = iter(loader)
                for _ in range(len(batches) - 1):
                    torch.cuda.set_sync_debug_mode("error")
                    out = next(outputs)
                    if "cache" in options:
                        with torch.no_grad():
                            loader.observe(out, dom.loss(model, out))
                    torch.cuda.set_sync_debug_mode(0)
                list(outputs)
        except RuntimeError as error:
            found[name] = f"SYNC: {error}"
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return found


def gpu(out: Path, smoke: bool) -> Report:
    if not torch.cuda.is_available():
        raise SystemExit("micro gpu: no CUDA device here (torch.cuda.is_available() is False); run it on a "
                         "machine with one. On the CPU, tests/checks/test_syncs.py counts would-be syncs.")  # fmt: skip
    return gpu_measure(torch.device("cuda"), smoke)


# -- the command ----------------------------------------------------------------------------------------------------

STAGES: dict[str, Callable[[Path, bool], Report]] = {
    "overhead": overhead, "auto-off": auto_off, "scoring": scoring, "cache": cache, "streaming": streaming, "gpu": gpu,
}  # fmt: skip


def run_stage(stage: str, out: Path, smoke: bool, info: dict[str, Any]) -> dict[str, Any]:
    """Run ``stage`` into ``out/<stage>/``: its summary and table, and what it was measured on."""
    folder = out / stage
    summary, lines = STAGES[stage](folder, smoke)
    write_json(folder / "machine.json", {**machine(), **info, "stage": stage, "smoke": smoke})
    write_report(folder, {"stage": stage, "smoke": smoke, **summary}, lines)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("stage", choices=list(STAGES))
    parser.add_argument("--smoke", action="store_true", help="seconds: tiny sizes, blocks of 2 steps, 2 rounds")
    parser.add_argument("--out", type=Path, help="the records' folder (default benchmarks/results/micro; smoke: "
                                                 "benchmarks/results/tmp/micro)")  # fmt: skip
    args = parser.parse_args(argv)
    out = args.out or (RESULTS / "tmp" / "micro" if args.smoke else RESULTS / "micro")
    run_stage(args.stage, out, args.smoke, setup())
    return 0
