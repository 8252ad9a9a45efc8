"""Selection against the budget-matched tuned frontier, on any domain's suite.

``python -m benchmarks frontier SUITE [--stage STAGE]``: ``pretrain`` (a continued suite's pretrained states), ``run``
(the grid: every family at every batch, LR and epochs, 3 seeds, ``--worker I/N`` to share it), ``timing`` (the
interleaved step timing every run is priced at, with the price table's parts), ``report`` (the frontier read at the
budget, every family's ratio per seed, the price table, the targets); ``all`` (default) runs them in turn. Suites:
``recipes/frontier_suites.py``; the records: ``benchmarks/results/frontier/<suite>/table.md``, listed in
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.domains import domain as domain_named
from benchmarks.lab.arm import Arm
from benchmarks.lab.domain import Data, Domain
from benchmarks.lab.loop import Job, run_loop, worker
from benchmarks.lab.price import back_to_back_name
from benchmarks.lab.records import RESULTS, machine, read_jsonl, write_json
from benchmarks.lab.run import endless_own_work, endless_scoring, endless_steps, pretrain, start, train_run
from benchmarks.lab.timing import rotated, setup, time_steppers

from .frontier_suites import KEEP, SUITES, Suite

SEEDS = (0, 1, 2)


def one_run(dom: Domain, suite: Suite, data: Data, arm: Arm, epochs: int, seed: int) -> dict[str, Any]:
    """One run of ``arm``; ``keep="auto"`` beside a plain run of its batch, LR and epochs (their CPU seconds price
    it), the order alternating with the seed."""
    if arm.keep != "auto":
        return train_run(dom, suite.family, data, arm, epochs=epochs, seed=seed, continued=suite.continued)
    plain = replace(arm, name="plain", policy=None, keep=1.0, told=False)
    done = {a.name: train_run(dom, suite.family, data, a, epochs=epochs, seed=seed, continued=suite.continued)
            for a in ([arm, plain] if seed % 2 == 0 else [plain, arm])}  # fmt: skip
    return {**done[arm.name], "paired_plain_cpu_seconds": done["plain"]["cpu_seconds"]}


def run(dom: Domain, suite: Suite, data: Data, out: Path, seeds: tuple[int, ...], smoke: bool,
        part: tuple[int, int], families: set[str] | None) -> None:  # fmt: skip
    """Every (seed, budget level, arm) not yet in ``out/runs.jsonl`` (this worker's share), interleaved and rotating;
    ``families``: these alone."""
    arms = [(arm, e) for arm, e in suite.plan(dom, smoke) if families is None or arm.name in families]

    def job(arm: Arm, epochs: int, seed: int) -> Job:
        def train() -> dict[str, Any]:
            record = one_run(dom, suite, data, arm, epochs, seed)
            return {**record, "arm": arm.label, "family_arm": arm.name, "suite": suite.name, "time": time.time(),
                    "load": os.getloadavg()}  # fmt: skip

        return Job((arm.label, epochs, seed), train)

    def jobs() -> Iterator[Job]:
        levels = max(len(e) for _, e in arms)
        for seed in seeds:
            for level in range(levels):
                for arm, epochs in rotated(arms, level + seed):
                    if level < len(epochs):
                        yield job(arm, epochs[level], seed)

    key = dom.metric.key

    def line(r: dict[str, Any]) -> None:
        print(f"{suite.name} seed={r['seed']} {r['arm']:<36} e={r['epochs']:<3} {key}={r[key]:.4f} "
              f"cpu={r['cpu_seconds']:.1f}s", flush=True)  # fmt: skip

    run_loop(jobs(), out / "runs.jsonl", lambda r: (r["arm"], r["epochs"], r["seed"]), worker=part, log=line)


def step_kinds(dom: Domain, suite: Suite, smoke: bool) -> dict[str, tuple[Arm, bool]]:
    """The step kinds the suite's runs are priced with: name -> (arm, prefill)."""
    recipe = suite.recipe(dom)
    b, lr = recipe["batch"], recipe["lr"]
    names = {arm.name for arm, _ in suite.families(batch=b)}
    kinds: dict[str, tuple[Arm, bool]] = {}
    for batch in (min(suite.plain_batches), b) if smoke else suite.plain_batches:
        kinds[f"plain b={batch}"] = (Arm("t", batch=batch, lr=lr), False)
    for batch in (b,) if smoke else (*suite.fresh_batches, b):
        for keep in (0.25, 0.5):
            kinds[f"topk keep={keep} b={batch}"] = (Arm("t", batch=batch, lr=lr, policy="topk", keep=keep), False)
    if "topk-0.25-bf16" in names:
        kinds[f"topk-bf16 keep={KEEP} b={b}"] = (Arm("t", b, lr, "topk", KEEP, autocast=True), False)
    for policy in ("random", "rank", "importance", "reducible"):
        if f"{policy}-{KEEP}" in names:
            kinds[f"{policy} keep={KEEP} b={b}"] = (Arm("t", batch=b, lr=lr, policy=policy, keep=KEEP), False)
    if names & {"sampler-topk-0.25", "warm-sampler-topk-0.25"}:  # every sample's loss known (a later epoch's step)
        arm = Arm("t", b, lr, warm=suite.continued, prune=0.5, rule="top_losses", staleness=10**6)
        kinds[f"top_losses b={b}"] = (arm, True)
    if suite.continued:
        kinds[f"prune b={b}"] = (Arm("t", batch=b, lr=lr, warm=True, prune=0.5, staleness=10**6), True)
        for keep in (0.25, 0.5):
            arm = Arm("t", batch=b, lr=lr, policy="topk", keep=keep, warm=True)
            kinds[f"warm-scored keep={keep} b={b}"] = (replace(arm, staleness=0), False)
            kinds[f"warm-reused keep={keep} b={b}"] = (replace(arm, staleness=10**6), True)
    return {name: (replace(arm, score_mode=suite.score_mode), prefill) for name, (arm, prefill) in kinds.items()}


def steppers(dom: Domain, suite: Suite, data: Data, smoke: bool) -> dict[str, Iterator[Any]]:
    """Every step kind's endless steps, and the price table's parts: sbdata's own work in every selection or sampler
    kind (``own: KIND``), the scoring pass at the loader batch alone (``score b=B``; ``score-bf16 b=B`` where a kind
    scores so) and back to back with the kept batch's training step on one model (:func:`back_to_back_name`), and
    the training step at a kept batch the grid lacks (``plain b=K``)."""
    family, continued = suite.family, suite.continued
    out: dict[str, Iterator[Any]] = {}
    kinds = step_kinds(dom, suite, smoke)
    for name, (arm, prefill) in kinds.items():
        out[name] = endless_steps(dom, family, data, arm, continued=continued, prefill=prefill)
    for name, (arm, prefill) in kinds.items():
        if arm.policy is None and arm.prune is None:
            continue
        out[f"own: {name}"] = endless_own_work(dom, family, data, arm, continued=continued, prefill=prefill)
        kept = arm.kept
        if f"plain b={kept}" not in out:
            out[f"plain b={kept}"] = endless_steps(dom, family, data, Arm("t", kept, arm.lr), continued=continued)
        if arm.policy is None or (arm.warm and arm.staleness > 0):  # nothing scored at its loader batch
            continue
        score = "score-bf16" if arm.autocast else "score"
        for label, bf16 in {(score, arm.autocast), ("score", False)}:  # bf16's live check scores at full precision
            out.setdefault(f"{label} b={arm.batch}", endless_scoring(dom, family, data, arm.batch, continued=continued,
                                                                     score_mode=arm.score_mode,
                                                                     autocast=bf16))  # fmt: skip
        pair = back_to_back_name(score, arm.batch, kept)
        if pair not in out:
            model, _ = start(dom, family, data, 0, continued=continued)
            scoring = endless_scoring(dom, family, data, arm.batch, continued=continued, autocast=arm.autocast,
                                      score_mode=arm.score_mode,
                                      model=model)  # fmt: skip
            training = endless_steps(dom, family, data, Arm("t", kept, arm.lr), continued=continued, model=model)
            out[pair] = _in_turn(scoring, training)
    return out


def _in_turn(*steps: Iterator[Any]) -> Iterator[None]:
    while True:
        for step in steps:
            next(step)
        yield None


def timing(dom: Domain, suite: Suite, data: Data, out: Path, smoke: bool, info: dict[str, Any]) -> dict[str, Any]:
    """Median thread CPU seconds per loader batch of every step kind and part (:func:`steppers`), interleaved; writes
    ``<out>/timing.json``."""
    medians = time_steppers(steppers(dom, suite, data, smoke), smoke=smoke)
    result = {"machine": machine(), **info, "clock": "thread CPU seconds", "load": os.getloadavg(), "time": time.time(),
              "kinds": {name: {"seconds_per_batch": value} for name, value in medians.items()}}  # fmt: skip
    write_json(out / "timing.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks frontier", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--stage", choices=["pretrain", "run", "timing", "report", "all"], default="all")
    parser.add_argument("--smoke", action="store_true", help="seconds: tiny data, one seed, two LRs, epochs 1 and 2")
    parser.add_argument("--out", type=Path, help="the record's folder (default benchmarks/results/frontier/SUITE)")
    parser.add_argument("--seeds", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--worker", type=worker, default=(0, 1), help="I/N: run every N-th run from the I-th")
    parser.add_argument("--families", help="'run': comma-separated families to run (default: every family)")
    parser.add_argument("--data", type=Path, help="where the domain's files are (Fashion-MNIST's IDX files)")
    args = parser.parse_args(argv)
    info = setup()
    suite = SUITES[args.suite]
    dom = domain_named(suite.domain)
    out = args.out or RESULTS / "frontier" / suite.name
    seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else (0,) if args.smoke else SEEDS
    data = dom.data(smoke=args.smoke, pretrained_dir=out / "pretrained", root=args.data, **suite.data)
    out.mkdir(parents=True, exist_ok=True)
    for stage in ["pretrain", "run", "timing", "report"] if args.stage == "all" else [args.stage]:
        if stage == "pretrain" and suite.continued:
            states = pretrained_states(dom, suite, data, out, seeds, args.smoke)
            write_json(out / "pretrained.json", states)
        elif stage == "run":
            families = set(args.families.split(",")) if args.families else None
            run(dom, suite, data, out, seeds, args.smoke, args.worker, families)
            write_json(out / "machine.json", {**machine(), **info, "suite": suite.name, "domain": dom.name,
                                              "kind": dom.kind, "data": data.description})  # fmt: skip
        elif stage == "timing":
            timing(dom, suite, data, out, args.smoke, info)
        elif stage == "report":
            from .frontier_report import report

            for name, before in {"runs.jsonl": "run", "timing.json": "timing"}.items():
                if not (out / name).exists():
                    raise SystemExit(f"no {out / name}: run `python -m benchmarks frontier {suite.name} --stage "
                                     f"{before}` first")  # fmt: skip
            earlier = {
                p.stem.removeprefix("timing-"): json.loads(p.read_text()) for p in sorted(out.glob("timing-*.json"))
            }
            reference = suite if not args.smoke else replace(suite, reference_epochs=2)  # smoke runs epochs 1, 2
            report(dom, reference, data, read_jsonl(out / "runs.jsonl"), json.loads((out / "timing.json").read_text()),
                   out, earlier)  # fmt: skip
    return 0


def pretrained_states(dom: Domain, suite: Suite, data: Data, out: Path, seeds: tuple[int, ...],
                      smoke: bool) -> dict[str, Any]:  # fmt: skip
    """Each seed's pretrained states, made where missing (git-ignored) and their metrics (recorded)."""
    import torch

    (out / "pretrained").mkdir(parents=True, exist_ok=True)
    record = out / "pretrained.json"
    metrics = json.loads(record.read_text()) if record.exists() else {}
    for seed in seeds:
        path = out / "pretrained" / f"seed{seed}.pt"
        if not path.exists():
            torch.save(pretrain(dom, suite.family, data, seed, smoke), path)
        state = data.pretrained(seed)
        metrics[str(seed)] = {k: v for k, v in state.items() if k.startswith("pretrained_")}
        print(f"{suite.name} pretrained seed={seed}: {metrics[str(seed)]}", flush=True)
    return metrics
