"""Selection against the budget-matched tuned frontier: continued training on data the model mostly knows, and from
scratch (issue 30).

Stages: ``pretrain``, ``run`` (``--worker I/N``), ``timing`` (the interleaved step timing every run is priced at),
``report``, ``all``; ``back-to-back`` (a check of the price table's back-to-back column: two models or one);
``trial`` and ``trial-report`` on ``continued-lm``. The suites: ``suites.py``, ``data.py``,
``lm.py``; commands and records: ``benchmarks/frontier/README.md``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.cost import back_to_back_name
from benchmarks.harness.models import MODELS
from benchmarks.harness.records import machine, read_jsonl, results_dir
from benchmarks.harness.runs import Job, cli, run_loop
from benchmarks.harness.timing import cpu_clock, interleaved, rotated, setup, sized_block
from benchmarks.harness.train import train_run

from .arms import BudgetArm, endless_own_work, endless_scoring, endless_steps, seed_model
from .data import SMOKE_SIZES, Mix, Sizes, domains, mix, pretrain, scratch
from .lm import (
    SMOKE_LM_SIZES,
    LMMix,
    LMSizes,
    endless_lm_own_work,
    endless_lm_scoring,
    endless_lm_steps,
    lm_mix,
    lm_run,
    pretrain_lm,
)
from .report import metric_of
from .suites import KEEP, SUITES, Suite

RESULTS = results_dir("frontier")
SEEDS = (0, 1, 2)


def _model_of(data: Mix, suite: Suite, seed: int, held: list) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        model = MODELS[suite.family]()
        if suite.continued:
            model.load_state_dict(data.pretrained(seed)["model"])
        held.append(model)
        return model

    return build


def one_run(data: Any, suite: Suite, arm: BudgetArm, epochs: int, seed: int) -> dict[str, Any]:
    """Train one arm for ``epochs`` (from the seed's pretrained model in a continued suite); its record with the test
    metrics (accuracies, or nats per byte for the LM: mix; new and old domain when continued) and its thread CPU
    seconds."""
    if suite.domain == "lm":
        record = lm_run(data, arm, epochs, seed)
        record["cpu_seconds"] = record["seconds"]
        return record
    held: list[torch.nn.Module] = []
    record = train_run(
        data, arm, family=suite.family, epochs=epochs, seed=seed, evals=2, clock=cpu_clock,
        build_model=_model_of(data, suite, seed, held), recipe=suite.recipe,
    )  # fmt: skip
    record.update(domains(held[-1], data))
    record["cpu_seconds"] = record["seconds"]
    return record


def run(data: Any, suite: Suite, out: Path, seeds: tuple[int, ...], smoke: bool, worker: tuple[int, int]) -> None:
    """Every (seed, budget level, arm) not yet in ``out/runs.jsonl`` (this worker's share), interleaved."""
    arms = suite.plan(smoke)

    def job(arm: BudgetArm, epochs: int, seed: int) -> Job:
        def train() -> dict[str, Any]:
            if arm.keep == "auto":  # auto and a plain run of the same batch, LR and epochs, side by side
                plain = replace(arm, name="plain", policy=None, keep=1.0, warm=False)
                order = [arm, plain] if seed % 2 == 0 else [plain, arm]
                done = {a.name: one_run(data, suite, a, epochs, seed) for a in order}
                record = done[arm.name]
                record["paired_plain_cpu_seconds"] = done["plain"]["cpu_seconds"]
            else:
                record = one_run(data, suite, arm, epochs, seed)
            record.update(arm=arm.label, family_arm=arm.name, suite=suite.name, time=time.time(),
                          load=os.getloadavg())  # fmt: skip
            return record

        return Job((arm.label, epochs, seed), train)

    def jobs() -> Iterator[Job]:
        levels = max(len(e) for _, e in arms)
        for seed in seeds:
            for level in range(levels):
                for arm, epochs in rotated(arms, level + seed):
                    if level < len(epochs):
                        yield job(arm, epochs[level], seed)

    prefix = metric_of(suite).prefix

    def line(r: dict) -> None:
        extra = "".join(f" {k}={r[f'{prefix}_{k}']:.4f}" for k in ("new", "old") if f"{prefix}_{k}" in r)
        print(f"{suite.name} seed={r['seed']} {r['arm']:<36} e={r['epochs']:<3} mix={r[f'{prefix}_mix']:.4f}{extra} "
              f"cpu={r['cpu_seconds']:.1f}s", flush=True)  # fmt: skip

    out.mkdir(parents=True, exist_ok=True)
    run_loop(jobs(), out / "runs.jsonl", lambda r: (r["arm"], r["epochs"], r["seed"]), worker=worker, log=line)


def step_kinds(suite: Suite, smoke: bool) -> dict[str, tuple[BudgetArm, bool]]:
    """The step kinds the suite's runs are priced with: name -> (arm, prefill)."""
    b, lr = suite.recipe["batch"], suite.recipe["lr"]
    names = {arm.name for arm, _ in suite.families()}
    kinds: dict[str, tuple[BudgetArm, bool]] = {}
    for batch in (min(suite.plain_batches), b) if smoke else suite.plain_batches:
        kinds[f"plain b={batch}"] = (BudgetArm("t", batch=batch, lr=lr), False)
    for batch in (b,) if smoke else (*suite.fresh_batches, b):
        for keep in (0.25, 0.5):
            arm = BudgetArm("t", batch=batch, lr=lr, policy="topk", keep=keep)
            kinds[f"topk keep={keep} b={batch}"] = (arm, False)
    if "topk-0.25-bf16" in names:
        arm = BudgetArm("t", batch=b, lr=lr, policy="topk", keep=KEEP, autocast=True)
        kinds[f"topk-bf16 keep={KEEP} b={b}"] = (arm, False)
    for policy in ("random", "rank", "importance", "reducible"):
        if f"{policy}-{KEEP}" in names:
            kinds[f"{policy} keep={KEEP} b={b}"] = (BudgetArm("t", batch=b, lr=lr, policy=policy, keep=KEEP), False)
    if names & {"sampler-topk-0.25", "warm-sampler-topk-0.25"}:  # every sample's loss known (a later epoch's step)
        arm = BudgetArm("t", batch=b, lr=lr, warm=suite.continued, prune=0.5, rule="top_losses", staleness=10**6)
        kinds[f"top_losses b={b}"] = (arm, True)
    if suite.continued:
        kinds[f"prune b={b}"] = (BudgetArm("t", batch=b, lr=lr, warm=True, prune=0.5, staleness=10**6), True)
        for keep in (0.25, 0.5):
            arm = BudgetArm("t", batch=b, lr=lr, policy="topk", keep=keep, warm=True)
            kinds[f"warm-scored keep={keep} b={b}"] = (replace(arm, staleness=0), False)
            kinds[f"warm-reused keep={keep} b={b}"] = (replace(arm, staleness=10**6), True)
    return kinds


def part_steppers(data: Any, suite: Suite, kinds: dict[str, tuple[BudgetArm, bool]]) -> dict[str, Iterator[Any]]:
    """The price table's parts, each timed alone: the scoring pass at the user's batch (``score
    b=B``; ``score-bf16 b=B`` under bfloat16 autocast where a family scores so) and sbdata's own work in every
    selection or sampler kind (``own: KIND``); the training step at the kept batch is the plain kind of that batch."""
    out: dict[str, Iterator[Any]] = {}
    if suite.domain == "lm":  # the ByteLM: its scoring pass and every kept batch are kinds already
        b = suite.recipe["batch"]
        out[f"score b={b}"] = endless_lm_scoring(data, b)
        for name, (arm, prefill) in kinds.items():
            if not name.startswith("plain "):
                out[f"own: {name}"] = endless_lm_own_work(arm, data, prefill=prefill)
        return out
    for name, (arm, prefill) in kinds.items():
        if name.startswith("plain "):
            continue
        out[f"own: {name}"] = endless_own_work(arm, data, prefill=prefill)
        kept = math.ceil(float(arm.keep) * arm.batch) if arm.policy is not None else arm.batch
        if f"plain b={kept}" not in kinds and f"plain b={kept}" not in out:  # a kept batch the grid lacks
            plain = BudgetArm("t", batch=kept, lr=arm.lr)
            out[f"plain b={kept}"] = endless_steps(plain, data, suite.family, pretrained=suite.continued)
        if arm.policy is not None and not (arm.warm and arm.staleness > 0):  # scored at its loader batch
            label = "score-bf16" if arm.autocast else "score"
            if f"{label} b={arm.batch}" not in out:
                out[f"{label} b={arm.batch}"] = endless_scoring(
                    data, suite.family, arm.batch, pretrained=suite.continued, autocast=arm.autocast
                )
            if arm.autocast and f"score b={arm.batch}" not in out:  # the live check's full-precision pass
                out[f"score b={arm.batch}"] = endless_scoring(data, suite.family, arm.batch, pretrained=suite.continued)
            pair = back_to_back_name(label, arm.batch, kept)
            if pair not in out:  # the same two parts one after the other, no sbdata: what running them in a row costs
                out[pair] = endless_back_to_back(data, suite, arm.batch, kept, arm.lr, autocast=arm.autocast)
    return out


def endless_back_to_back(data: Any, suite: Suite, batch: int, kept: int, lr: float, *, autocast: bool = False,
                         one_model: bool = True) -> Iterator[None]:  # fmt: skip
    """A scoring pass at ``batch``, then a plain training step at ``kept``, endlessly (each primed by its first
    ``next``, as the timing primes every stepper): the price table's parts run back to back without sbdata between
    them, on one model as an SB step runs them (``one_model=False``: the scoring pass on a second model of the same
    seed, the back-to-back check's comparison). Both are built here, as every other stepper is built when named."""
    family, pretrained = suite.family, suite.continued
    model = seed_model(data, family, pretrained, 0) if one_model else None
    score = endless_scoring(data, family, batch, pretrained=pretrained, autocast=autocast, model=model)
    train = endless_steps(BudgetArm("t", batch=kept, lr=lr), data, family, pretrained=pretrained, model=model)
    return _in_turn(score, train)


def _in_turn(score: Iterator[Any], train: Iterator[Any]) -> Iterator[None]:
    next(score)
    next(train)
    while True:
        next(score)
        next(train)
        yield None


def back_to_back_check(data: Any, suite: Suite, out: Path, smoke: bool, allocator: dict[str, Any]) -> dict[str, Any]:
    """For each (scoring batch, kept batch) pair of the suite's fresh full-precision selection kinds: the two parts
    alone, and back to back on two models (the recorded timings' column, before 56e0f9c) and on one (an SB step's
    shape, the column since), interleaved as ``timing`` interleaves; writes ``<out>/back-to-back.json``."""
    rounds, seconds_per_block = (2, 0.0) if smoke else (12, 0.25)
    fresh = [arm for arm, _ in step_kinds(suite, smoke).values() if arm.policy and not arm.warm and not arm.autocast]
    pairs = sorted({(arm.batch, math.ceil(float(arm.keep) * arm.batch), arm.lr) for arm in fresh})
    steppers: dict[str, Iterator[Any]] = {}
    family, pretrained = suite.family, suite.continued
    for b, k, lr in pairs:
        steppers.setdefault(f"score b={b}", endless_scoring(data, family, b, pretrained=pretrained))
        steppers.setdefault(f"plain b={k}", endless_steps(BudgetArm("t", batch=k, lr=lr), data, family,
                                                          pretrained=pretrained))  # fmt: skip
        steppers[f"two models {b}/{k}"] = endless_back_to_back(data, suite, b, k, lr, one_model=False)
        steppers[f"one model {b}/{k}"] = endless_back_to_back(data, suite, b, k, lr)
    for stepper in steppers.values():
        next(stepper)
    block = dict.fromkeys(steppers, 2 if smoke else 10)
    blocks = {name: sized_block(steppers[name], block, name, seconds_per_block, cpu_clock) for name in steppers}
    ms = {name: 1000 * statistics.median(v) for name, v in interleaved(blocks, rounds, warmup=1).items()}
    rows = []
    for b, k, _ in pairs:
        parts, two, one = ms[f"score b={b}"] + ms[f"plain b={k}"], ms[f"two models {b}/{k}"], ms[f"one model {b}/{k}"]
        rows.append({"score_batch": b, "kept_batch": k, "parts_ms": parts, "two_models_ms": two, "one_model_ms": one,
                     "two_models_over_parts": two / parts - 1, "one_model_over_parts": one / parts - 1})  # fmt: skip
        print(f"{suite.name} score b={b}, train b={k}: parts apart {parts:.3f} ms; back to back on two models "
              f"{two:.3f} ({two / parts - 1:+.1%}), on one {one:.3f} ({one / parts - 1:+.1%})", flush=True)  # fmt: skip
    result = {"machine": machine(), "allocator": allocator, "rounds": rounds, "clock": "thread CPU seconds",
              "load": os.getloadavg(), "ms_per_batch": ms, "pairs": rows}  # fmt: skip
    (out / "back-to-back.json").write_text(json.dumps(result, indent=2))
    return result


def timing(data: Any, suite: Suite, out: Path, smoke: bool, allocator: dict[str, Any]) -> dict[str, Any]:
    """Median thread CPU seconds per loader batch of every step kind and of the price table's parts (``part_steppers``),
    interleaved (blocks of about 0.25 s, the order rotating, 12 rounds after a warm-up round); writes
    ``<out>/timing.json`` (with ``allocator``, what ``setup()`` set)."""
    rounds, seconds_per_block = (2, 0.0) if smoke else (12, 0.25)
    kinds = step_kinds(suite, smoke)
    steppers = {
        name: endless_lm_steps(arm, data, prefill=prefill)
        if suite.domain == "lm"
        else endless_steps(arm, data, suite.family, pretrained=suite.continued, prefill=prefill)
        for name, (arm, prefill) in kinds.items()
    }
    steppers.update(part_steppers(data, suite, kinds))  # score b=B also prices the reducible arm's up-front pass
    for stepper in steppers.values():  # build each (model, loader, prefilled cache) outside the timing
        next(stepper)
    block = dict.fromkeys(steppers, 2 if smoke else 10)

    blocks = {name: sized_block(steppers[name], block, name, seconds_per_block, cpu_clock) for name in steppers}
    times = interleaved(blocks, rounds, warmup=1)
    result = {
        "machine": machine(),
        "allocator": allocator,
        "rounds": rounds,
        "clock": "thread CPU seconds",
        "load": os.getloadavg(),
        "kinds": {name: {"seconds_per_batch": statistics.median(v), "block": block[name]} for name, v in times.items()},
    }
    (out / "timing.json").write_text(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    """Run a stage of the frontier benchmark (see the module docstring); returns the exit status."""
    parser = cli("frontier", __doc__, smoke="2,000 samples, one seed, tiny grids", workers=True)
    parser.add_argument(
        "stage", choices=["pretrain", "run", "timing", "report", "all", "trial", "trial-report", "back-to-back"]
    )
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--out", type=Path, help="results folder (default results/frontier/SUITE)")
    parser.add_argument("--seeds", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--trial-steps", type=int, help="trial: loader batches per option (default 256; smoke 16)")
    args = parser.parse_args(argv)
    if args.stage.startswith("trial") and SUITES[args.suite].domain != "lm":
        parser.error(f"the trial stages are the language model's (continued-lm); for {args.suite} advise's trial is "
                     "`python -m benchmarks calibration trial`")  # fmt: skip
    info = setup()
    suite = SUITES[args.suite]
    out = args.out or RESULTS / suite.name
    trial_out = args.out / "trial" if args.out else RESULTS / f"{suite.name}-trial"  # advise's trial: its own folder
    sizes: Sizes | LMSizes = SMOKE_SIZES if args.smoke else Sizes()
    seeds: tuple[int, ...] = (0,) if args.smoke else SEEDS
    if args.seeds:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    worker = args.worker
    data: Mix | LMMix
    if suite.domain == "lm":
        sizes = SMOKE_LM_SIZES if args.smoke else LMSizes()
        data = lm_mix(sizes, out / "pretrained")
    elif suite.continued:
        assert isinstance(sizes, Sizes)
        data = mix(sizes, out / "pretrained")
    else:
        data = scratch(2_000 if args.smoke else 20_000, noise=suite.noise)
    stages = ["pretrain", "run", "timing", "report"] if args.stage == "all" else [args.stage]
    out.mkdir(parents=True, exist_ok=True)
    for stage in stages:
        if stage == "pretrain":
            if not suite.continued:
                continue  # nothing to pretrain from scratch
            (out / "pretrained").mkdir(parents=True, exist_ok=True)  # the states: git-ignored, made again here
            record = out / "pretrained.json"  # their accuracies, per seed: recorded
            accuracies = json.loads(record.read_text()) if record.exists() else {}
            for seed in seeds:
                path = out / "pretrained" / f"seed{seed}.pt"
                if not path.exists():
                    if isinstance(data, LMMix):
                        torch.save(pretrain_lm(data, seed), path)
                    else:
                        torch.save(pretrain(data, seed, suite.family, epochs=2 if args.smoke else 10), path)
                state = data.pretrained(seed)
                accuracies[str(seed)] = {k: v for k, v in state.items() if k.startswith("pretrained_")}
                prefix = metric_of(suite).prefix
                print(f"pretrained seed={seed}: old {state[f'pretrained_{prefix}_old']:.4f} "
                      f"new {state[f'pretrained_{prefix}_new']:.4f}", flush=True)  # fmt: skip
            record.write_text(json.dumps(accuracies, indent=2))
        elif stage == "run":
            run(data, suite, out, seeds, args.smoke, worker)  # type: ignore[arg-type]
            described: dict[str, Any] = {"sizes": vars(sizes)} if suite.continued else {"samples": len(data.y_train)}
            if isinstance(data, LMMix):
                described["data"] = data.description
            (out / "machine.json").write_text(json.dumps({**machine(), **info, "suite": suite.name, **described},
                                                         indent=2))  # fmt: skip
        elif stage == "timing":
            timing(data, suite, out, args.smoke, info["allocator"])
        elif stage == "back-to-back":
            if suite.domain == "lm":
                parser.error(
                    "the back-to-back check is for the MNIST-1D suites (the ByteLM's table has no such column)"
                )
            back_to_back_check(data, suite, out, args.smoke, info["allocator"])
        elif stage == "trial":
            from .trial import TRIAL, run_trial

            assert isinstance(data, LMMix)
            steps = args.trial_steps or (16 if args.smoke else TRIAL)
            run_trial(data, suite, trial_out, seeds, steps, fixed=args.smoke)
        elif stage == "trial-report":
            from .trial import trial_report

            trial_report(trial_out, out, suite, len(data.y_train))
        else:
            from .report import report

            needed = {
                "runs.jsonl": "run",
                "timing.json": "timing",
                **({"pretrained.json": "pretrain"} if suite.continued else {}),
            }
            for name, before in needed.items():
                if not (out / name).exists():
                    raise SystemExit(
                        f"no {out / name}: run `python -m benchmarks frontier {before} {suite.name}` first"
                    )
            pretrained = json.loads((out / "pretrained.json").read_text()) if suite.continued else {}
            earlier = {path.stem.removeprefix("timing-"): json.loads(path.read_text())
                       for path in sorted(out.glob("timing-*.json"))}  # fmt: skip
            report(read_jsonl(out / "runs.jsonl"), json.loads((out / "timing.json").read_text()), suite, pretrained,
                   sizes if suite.continued else None, len(data.y_train), out, earlier)  # fmt: skip
    return 0
