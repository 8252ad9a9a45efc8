"""``advise``'s branch trial on the continued language model (issue 28: "never loses", on a language model), against
the suite's whole runs.

Design, commands and the record: ``benchmarks/frontier/README.md`` (``continued-lm-trial``)."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness._sb import Candidates, CostTable, Measurement, Training, advise, causal_lm
from benchmarks.harness.branch_trials import agrees, named, times
from benchmarks.harness.cost import frontier_run_seconds
from benchmarks.harness.lm_arms import SequenceBatches
from benchmarks.harness.lm_train import make_optimizer
from benchmarks.harness.records import machine, read_jsonl
from benchmarks.harness.runs import Job, run_loop

from .arms import BudgetArm
from .lm import LMMix, _Run, train_epochs
from .suites import Suite

AT_EPOCH = 1  # advise is called after this many epochs of the user's run
TRIAL = 256  # loader batches per option
KEEPS = (0.25, 0.5)
STEPS = 8  # timed loader batches (advise's priced part)
ORDER = 7_919  # the advisor reads the mix in an order of its own
FIXED = CostTable.forward_equivalents()


class _Tokens:
    """The mix as ``{"input_ids"}`` batches in the advisor's order (the hooks pass every key to the model)."""

    def __init__(self, chunks: torch.Tensor, batch: int, seed: int) -> None:
        self.source = SequenceBatches(chunks, batch, seed)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self):
        self.source.set_epoch(self.epoch)
        self.epoch += 1
        for batch in self.source:
            yield {"input_ids": batch["input_ids"]}


def lm_trial(data: LMMix, suite: Suite, seed: int, *, trial: int, fixed: bool) -> dict[str, Any]:
    """The user's run to :data:`AT_EPOCH`, then ``advise`` with a branch trial of ``trial`` loader batches; the record
    (its trial rows, the option it named, its seconds)."""
    recipe = suite.recipe
    user = BudgetArm("plain", batch=recipe["batch"], lr=recipe["lr"])
    torch.manual_seed(seed)
    model = data.pretrained_model(seed)
    optimizer = make_optimizer(model, user.lr)
    run = _Run(user, model, data, epochs=suite.reference_epochs, seed=seed)
    train_epochs(run, model, optimizer, user.lr, AT_EPOCH, suite.reference_epochs)
    probe = [{"input_ids": chunk.long()} for chunk in data.holdout.split(user.batch)]
    tokens, hooks = _Tokens(data.chunks, user.batch, seed + ORDER), causal_lm()
    started = time.perf_counter()
    advice = advise(
        tokens, model, hooks["loss_fn"], split=hooks["split"], forward=hooks["forward"], reduce=hooks["reduce"],
        training=Training(optimizer=optimizer), candidates=Candidates(keeps=KEEPS),
        measurement=Measurement(steps=min(STEPS, max(4, len(tokens) // 2)), trial_steps=trial, probe=probe,
                                costs=FIXED if fixed else None),
    )  # fmt: skip
    rows = [{k: v for k, v in row.items() if k != "curve"} for row in advice.trial]
    return {
        "seed": seed, "at_epochs": AT_EPOCH, "of_epochs": suite.reference_epochs, "trial_steps": advice.trial_steps,
        "lr_now": optimizer.param_groups[0]["lr"], "trial": rows, "recommendation": advice.recommendation,
        "named": named(advice.recommendation), "note": advice.trial_note, "seconds": time.perf_counter() - started,
        "fixed_costs": fixed, "time": time.time(), "load": os.getloadavg(),
    }  # fmt: skip


def run_trial(data: LMMix, suite: Suite, out: Path, seeds: tuple[int, ...], trial: int, fixed: bool) -> None:
    """One trial per seed not yet in ``out/runs.jsonl`` (``out``: the trial's own folder); ``out/machine.json``."""

    def job(seed: int) -> Job:
        return Job(("trial", seed), lambda: {"arm": "trial", **lm_trial(data, suite, seed, trial=trial, fixed=fixed)})

    def line(r: dict[str, Any]) -> None:
        print(f"{suite.name} trial seed={r['seed']}: {r['named']} ({r['seconds']:.0f} s)", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    run_loop((job(s) for s in seeds), out / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    settings = {"at_epochs": AT_EPOCH, "trial": trial, "keeps": KEEPS, "steps": STEPS, "fixed_costs": fixed}
    (out / "machine.json").write_text(json.dumps({**machine(), "suite": suite.name, **settings}, indent=2))


def whole_runs(records: list[dict[str, Any]], kinds: dict[str, Any], suite: Suite, samples: int) -> dict[str, Any]:
    """Per option of the trial, the suite's whole runs at the user's LR: (seed-mean speed-up to the user's recipe's
    final mix nats, seeds that reached it, seeds). Top-k and random at the user's batch; the smaller batch is plain
    at ``ceil(keep * B)`` where the grid has it."""
    b, lr = suite.recipe["batch"], suite.recipe["lr"]
    seeds = sorted({r["seed"] for r in records})

    def at(r: dict[str, Any], family: str, batch: int) -> bool:
        return r["family_arm"] == family and r["config"]["batch"] == batch and math.isclose(r["config"]["lr"], lr)

    options = {f"topk-{k}": ("topk-" + str(k), b) for k in KEEPS}
    options.update({f"random-{k}": (f"random-{k}", b) for k in KEEPS})
    options.update({f"small-batch {math.ceil(k * b)}": ("plain", math.ceil(k * b)) for k in KEEPS})
    out: dict[str, Any] = {}
    for option, (family, batch) in options.items():
        speeds, reached, counted = [], 0, 0
        for seed in seeds:
            mine = [r for r in records if r["seed"] == seed]
            user = [r for r in mine if at(r, "plain", b) and r["epochs"] == suite.reference_epochs]
            runs = [r for r in mine if at(r, family, batch)]
            if not user or not runs:
                continue
            counted += 1
            target, seconds = user[0]["nats_mix"], frontier_run_seconds(user[0], kinds, samples)
            hits = [frontier_run_seconds(r, kinds, samples) for r in runs if r["nats_mix"] <= target + 1e-12]
            if hits:
                reached += 1
                speeds.append(seconds / min(hits))
        if counted:  # 0.0 ("never") where no seed reached it; None where only some did
            speed = 0.0 if not reached else statistics.fmean(speeds) if reached == counted else None
            out[option] = (speed, reached, counted)
    return out


def _judged_by(option: str, whole: dict[str, Any]) -> dict[str, Any]:
    """The whole-run records ``branch_trials.agrees`` judges ``option`` by: top-k 0.25's, and the small-batch control
    at the named smaller batch's size, or, for any other option, the small batch that measured fastest (a win of
    either size makes "whole batches" wrong); a size the grid lacks is left out (not judged)."""
    out = {"topk-0.25": whole["topk-0.25"]} if "topk-0.25" in whole else {}
    smalls = {k: v for k, v in whole.items() if k.startswith("small-batch ")}
    if option.startswith("smaller batch "):
        mine = smalls.get(f"small-batch {option.removeprefix('smaller batch ')}")
        return {**out, "small-batch": mine} if mine is not None else out
    if smalls:
        out["small-batch"] = max(smalls.values(), key=lambda v: (v[0] or 0.0, v[1]))
    return out


def trial_report(out: Path, suite_out: Path, suite: Suite, samples: int) -> list[str]:
    """``out/table.md``: per seed, each option's measured speed-up and nats against whole batches, the option named,
    and whether it agrees with the whole runs (``suite_out``'s runs and timing; ``branch_trials.agrees``, top-k
    judged by top-k 0.25's record and the smaller batch by plain at batch ``ceil(0.5 * B)``)."""
    records = read_jsonl(out / "runs.jsonl")
    if not records:
        raise SystemExit(f"no {out / 'runs.jsonl'}: run `python -m benchmarks frontier trial {suite.name}` first")
    timing = json.loads((suite_out / "timing.json").read_text())["kinds"]
    whole = whole_runs(read_jsonl(suite_out / "runs.jsonl"), timing, suite, samples)
    said = ", ".join(f"{k} {times(v[0])} ({v[1]}/{v[2]})" for k, v in whole.items()) or "not recorded"
    first = records[0]
    options = [row["option"] for row in first["trial"]]
    lines = [
        f"# advise's branch trial on the continued language model ({suite.name})", "",
        f"After {first['at_epochs']} of the user's {first['of_epochs']} epochs, {first['trial_steps']} loader batches "
        "per option, probe: the irreducible model's hold-out (minus nats per byte). Speed-up in the trial: whole "
        "batches' seconds to the lower of the two final probe qualities over the option's (> 1 pays; `never`: it "
        "ended no better than it started); nats: the option's final probe nats per byte minus whole batches' (> 0: "
        "behind), with the paired se. Whole runs at the user's LR, to the user's recipe's final mix nats (seeds that "
        f"reached it, of the seeds): {said}.", "",
        "| seed | " + " | ".join(options[1:]) + " | named | agrees with the whole runs |",
        "| --- | " + " | ".join("---" for _ in options[1:]) + " | --- | --- |",
    ]  # fmt: skip
    agreed = []
    for record in sorted(records, key=lambda r: r["seed"]):
        cells = []
        for row in record["trial"][1:]:
            cells.append(f"{times(row['speedup'])}, {-row['difference']:+.4f} ± {row['se']:.4f}")
        verdict = agrees(record["named"], _judged_by(record["named"], whole))
        agreed.append(verdict)
        shown = {True: "yes", False: "no", None: "not judged"}[verdict]
        lines.append(f"| {record['seed']} | " + " | ".join(cells) + f" | {record['named']} | {shown} |")
    judged = [a for a in agreed if a is not None]
    lines += ["", f"Agrees with the whole runs on {sum(judged)} of {len(judged)} judged calls ({len(agreed)} calls).",
              "", "Recommendations, verbatim:", ""]  # fmt: skip
    lines += [f"- seed {r['seed']}: {r['recommendation']}" for r in sorted(records, key=lambda r: r["seed"])]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return lines
