"""A frontier suite's report: every run priced, the frontier read at each budget, every family's ratio per seed, the
band across the suite's timings, the price table, the pre-registered target; ``table.md``, ``summary.json`` and
``<metric>_vs_seconds.png``.

**Priced seconds**: each run's loader batches at its step kind's interleaved seconds (``lab/price.py``). **Budgets**:
shares of the user's recipe's priced seconds. **Ratio**: ``lab/read.py`` (below 1 pays; ``never``: the family never
reaches the frontier's value at that budget).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.lab.domain import Data, Domain, Metric
from benchmarks.lab.price import limits, price_table, run_seconds
from benchmarks.lab.read import PLAIN, configurations, envelope, per_seed, read_at
from benchmarks.lab.records import ratio, table, write_report

from .frontier_suites import BUDGETS, Suite

CONTROLS = ("random-0.25", "auto-epochs")  # not selection families for the target: a control, and auto (reported)


def priced(records: list[dict[str, Any]], kinds: dict[str, Any], samples: int) -> list[dict[str, Any]]:
    """The runs a timing can price, each with its priced ``seconds`` (a run whose kind the timing lacks, a family
    added after it, is left out)."""
    out = []
    for r in records:
        try:
            out.append({**r, "seconds": run_seconds(r, kinds, samples)})
        except KeyError:
            continue
    return out


def budgets_of(points: dict[str, list[dict]], suite: Suite, recipe: dict[str, Any]) -> list[float] | None:
    """The budgets in seconds: :data:`BUDGETS` times the user's recipe's priced seconds (None: not recorded)."""
    ref = [p for p in points.get(PLAIN, []) if p["batch"] == recipe["batch"] and math.isclose(p["lr"], recipe["lr"])
           and p["epochs"] == suite.reference_epochs]  # fmt: skip
    return None if not ref else [f * ref[0]["seconds"] for f in BUDGETS]


def report(dom: Domain, suite: Suite, data: Data, records: list[dict[str, Any]], timing: dict[str, Any], out: Path,
           earlier: dict[str, dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """Write the suite's report (module docstring) from its runs and timing (``earlier``: its earlier timings, label ->
    ``timing.json``, for the band); returns the summary."""
    metric, recipe, samples = dom.metric, suite.recipe(dom), data.size
    planned = {arm.name for arm, _ in suite.families(batch=recipe["batch"])}
    records = [r for r in records if r["family_arm"] in planned]  # families retired from the suite stay in git
    runs = priced(records, timing["kinds"], samples)
    points = configurations(runs, metric)
    budgets = budgets_of(points, suite, recipe)
    if budgets is None:
        raise SystemExit(f"no plain run at the user's recipe (batch {recipe['batch']}, lr {recipe['lr']:g}, "
                         f"{suite.reference_epochs} epochs) in {out / 'runs.jsonl'}")  # fmt: skip
    read, seeds = read_at(points, budgets, metric), per_seed(runs, budgets, metric)
    families = [f for f in points if f == PLAIN] + sorted(f for f in points if f != PLAIN)
    band = {label: _read_under(records, t, suite, metric, recipe, samples) for label, t in earlier.items()}
    lines = _header(dom, suite, data, recipe, points, budgets, timing)
    lines += ["## Read at the budget", "",
              "Each family's least priced seconds to the frontier's value at the budget, over the frontier's own "
              "(seed means; per seed in brackets, each against its own frontier; below 1 pays).", ""]  # fmt: skip
    rows = []
    for family in families:
        cells = [family]
        for i in range(len(budgets)):
            if read[i] is None:
                cells.append("n/a")
                continue
            mine = [ratio(None if seeds[s][i] is None else seeds[s][i]["ratios"].get(family)) for s in seeds]
            cells.append(f"{ratio(read[i]['ratios'].get(family))} [{', '.join(mine)}]")
        rows.append(cells)
    lines += table(["family", *(f"{f:g}x ({b:.1f} s): {metric.show(r['target']) if r else ''}"
                                for f, b, r in zip(BUDGETS, budgets, read, strict=True))], rows)  # fmt: skip
    verdict = target(suite, read, seeds, budgets, metric)
    lines += ["", "## The pre-registered target", "", f"- {verdict}", ""]
    if band:
        lines += [
            "## Across timings",
            "",
            "Seed-mean ratios with every run priced again by each of the suite's "
            f"earlier timings ({', '.join(band)}), beside this one's: the band a timing's noise spans.",
            "",
        ]
        rows = [[f, *(_band([read[i]["ratios"].get(f) if read[i] else None, *(b[i].get(f, "-") for b in band.values())])
                      for i in range(len(budgets)))] for f in families]  # fmt: skip
        lines += [*table(["family", *(f"{f:g}x" for f in BUDGETS)], rows), ""]
    prices = price_table(timing["kinds"], recipe["batch"])
    lines += _price_lines(prices, recipe["batch"])
    bound = limits(timing["kinds"], recipe["batch"], staleness=2, new_share=data.description.get("new_share"))
    summary = {"suite": suite.name, "domain": dom.name, "kind": dom.kind, "budgets": dict(zip(map(str, BUDGETS),
               budgets, strict=True)), "read_at_budget": read, "per_seed": seeds, "across_timings": band,
               "target": verdict, "prices": prices, "limits": bound, "points": points}  # fmt: skip
    write_report(out, summary, lines)
    plot(points, budgets, out / f"{metric.label.split()[0]}_vs_seconds.png", f"{suite.name} ({dom.name}, "
         f"{suite.family}): envelopes against the tuned frontier", metric)  # fmt: skip
    return summary


def _header(dom: Domain, suite: Suite, data: Data, recipe: dict[str, Any], points: dict[str, list[dict]],
            budgets: list[float], timing: dict[str, Any]) -> list[str]:  # fmt: skip
    ref = next(p for p in points[PLAIN] if p["batch"] == recipe["batch"] and math.isclose(p["lr"], recipe["lr"])
               and p["epochs"] == suite.reference_epochs)  # fmt: skip
    start = "continued from a pretrained model" if suite.continued else "from scratch"
    allocator = timing.get("allocator") or timing.get("machine", {}).get("allocator") or {}
    return [
        f"# {suite.name}: {dom.name} ({dom.kind} data), {suite.family}, {start}, against the tuned frontier", "",
        f"Data: {data.size:,} training samples ({data.description}). Seeds: "
        f"{sorted({p['seeds'] for f in points.values() for p in f})[-1]} per configuration. The user's recipe "
        f"(batch {recipe['batch']}, LR {recipe['lr']:g}, {suite.reference_epochs} epochs): "
        f"{metric_text(dom.metric, ref)} in {ref['seconds']:.2f} priced s. Budgets: "
        + ", ".join(f"{f:g}x = {b:.2f} s" for f, b in zip(BUDGETS, budgets, strict=True))
        + f". Priced by `timing.json` (thread CPU seconds per loader batch, one torch thread, glibc's heap "
        f"{'pinned' if allocator.get('pinned') else 'not pinned'}; {timing.get('machine', {}).get('cpu', '?')}).", "",
        *_step_line(timing["kinds"], recipe["batch"], suite.score_mode, _layout(dom.model(suite.family))),
    ]  # fmt: skip


def _layout(model: nn.Module) -> str:
    """The memory layout of the model's convolution weights: it can decide whether selection pays at all."""
    weights = [p for p in model.parameters() if p.dim() == 4]
    if not weights:
        return "no 2-d convolution"
    # a weight with one input channel (or a 1x1 kernel) is both; the layout shows on the others
    channels_last = all(p.is_contiguous(memory_format=torch.channels_last) for p in weights) and not all(
        p.is_contiguous() for p in weights
    )
    return "channels-last" if channels_last else "contiguous (torch's default)"


def _step_line(kinds: dict[str, Any], batch: int, score_mode: str, layout: str) -> list[str]:
    """What decides whether selection can pay, from the timing: a training step on a quarter of the loader batch
    against one on all of it, and the scoring pass against the training step at the loader batch (``layout``: the
    model's memory layout)."""
    t = {name: kind["seconds_per_batch"] for name, kind in kinds.items()}
    small = math.ceil(batch / 4)
    quarter, full, score = t.get(f"plain b={small}"), t.get(f"plain b={batch}"), t.get(f"score b={batch}")
    if quarter is None or full is None or score is None:
        return []
    return [
        f"The step: a training step on {small} samples costs {quarter / full:.2f} of one on {batch}; the scoring "
        f"pass at {batch} (score_mode={score_mode!r}) costs {score / full:.2f} of that step. Memory layout: {layout}.",
        "",
    ]


def metric_text(metric: Metric, point: dict[str, Any]) -> str:
    return f"{metric.label} {metric.show(point[metric.key])}"


def target(suite: Suite, read: list[dict | None], seeds: dict[int, list], budgets: list[float], metric: Metric) -> str:
    """The pre-registered target, met or missed: the best selection family (controls and auto aside) at most
    ``suite.target`` times the frontier's seconds at one budget (seed mean), every seed's ratio at most
    ``suite.seed_target``; the best budget's reading, with every seed's."""
    found = []  # (missed, ratio, family, budget index, every seed's ratio)
    for i, row in enumerate(read):
        for family, value in ({} if row is None else row["ratios"]).items():
            if family == PLAIN or family in CONTROLS or value is None:
                continue
            each = [seeds[s][i]["ratios"].get(family) if seeds[s][i] else None for s in seeds]
            met = value <= suite.target and all(v is not None and v <= suite.seed_target for v in each)
            found.append((not met, value, family, i, each))
    bound = f"target <= {suite.target}x, every seed <= {suite.seed_target}"
    if not found:
        return f"missed: no selection family reaches the frontier at any budget ({bound})"
    missed, value, family, i, each = min(found)
    return (
        f"{'missed' if missed else 'met'}: best {family} {value:.2f}x at the {BUDGETS[i]:g}x budget "
        f"({budgets[i]:.2f} s; per seed {', '.join(ratio(v) for v in each)}); {bound}"
    )


def _read_under(records: list[dict[str, Any]], timing: dict[str, Any], suite: Suite, metric: Metric,
                recipe: dict[str, Any], samples: int) -> list[dict[str, Any]]:  # fmt: skip
    """The seed-mean ratios at each budget with every run priced by ``timing`` (its own budgets)."""
    points = configurations(priced(records, timing["kinds"], samples), metric)
    budgets = budgets_of(points, suite, recipe)
    if budgets is None:
        return [{} for _ in BUDGETS]
    return [{} if row is None else row["ratios"] for row in read_at(points, budgets, metric)]


def _band(values: list[Any]) -> str:
    read = [v for v in values if isinstance(v, float)]
    never = any(v is None for v in values)
    if not read:
        return "never"
    return f"{min(read):.2f}-{max(read):.2f}" + (" (never under one)" if never else "")


def _price_lines(prices: list[dict[str, Any]], batch: int) -> list[str]:
    lines = ["## The price table", "",
             "Per loader batch: each path's **measured** step beside its **limit**, its parts run back to back on one "
             "model (the scoring pass at the loader batch, then the training step at the kept batch; a path that "
             "scores nothing trains alone) plus sbdata's own work (its loader or sampler on a model that does almost "
             "nothing). **Over** = measured / limit - 1; the parts timed **apart** beside. Plain epochs: over the "
             f"plain step at batch {batch}.", ""]  # fmt: skip
    if not prices:
        return [*lines, "Not timed: this record's timing has no parts.", ""]
    rows = [[p["path"], f"{1e3 * p['measured']:.3g}", f"{1e3 * p['limit']:.3g}",
             " + ".join(f"{k} {1e3 * v:.3g}" for k, v in p["parts"].items()), f"{100 * p['over']:+.1f}%",
             f"{1e3 * p['apart']:.3g} ({100 * p['over_apart']:+.1f}%)", f"{p['measured_epochs']:.3f}",
             f"{p['limit_epochs']:.3f}"] for p in prices]  # fmt: skip
    lines += table(["path", "measured ms", "limit ms", "its parts (ms)", "over", "apart ms (over)",
                    "measured, plain epochs", "limit, plain epochs"], rows)  # fmt: skip
    within = sum(p["over"] <= 0.10 for p in prices)  # below the limit: the parts' own timing noise, never a cost
    return [*lines, "", f"At most 10% over the limit: {within} of {len(prices)} paths.", ""]


def plot(points: dict[str, list[dict]], budgets: list[float], path: Path, title: str, metric: Metric) -> None:
    """Every family's envelope against priced seconds, the frontier in black, the budgets dotted (skipped without
    matplotlib, the ``bench`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for index, (family, pts) in enumerate(points.items()):
        curve = envelope(pts, metric)
        values = [metric.signed(v) * (100 if metric.higher else 1) for _, v in curve]
        style: dict[str, Any] = {"color": "black", "lw": 2.5} if family == PLAIN else {
            "lw": 1.2, "color": plt.cm.tab20(index % 20), "ls": "--" if "auto" in family else "-"}  # fmt: skip
        ax.step([s for s, _ in curve], values, where="post", label=family, **style)
    for b in budgets:
        ax.axvline(b, ls=":", color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("priced seconds (log)")
    ax.set_ylabel(f"test {metric.label} ({metric.unit})")
    plain = [metric.signed(v) * (100 if metric.higher else 1) for _, v in envelope(points[PLAIN], metric)]
    if metric.higher:
        ax.set_ylim(bottom=max(0.0, min(plain) - 1))
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
