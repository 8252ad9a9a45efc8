"""Seconds priced from a suite's interleaved step timing: a run's (:func:`run_seconds`) and the price table's
(:func:`price_table`: each path's measured step beside its limit, :func:`limits`: what an epoch can cost at best).

A timing (``timing.json``'s ``kinds``) holds the median thread CPU seconds per loader batch of every step kind,
named ``plain b=B``, ``POLICY keep=K b=B`` (``topk-bf16`` scored in bfloat16), ``warm-scored`` / ``warm-reused
keep=K b=B`` (the warm cache rescoring everything, or nothing), ``prune b=B`` / ``top_losses b=B`` (the sampler);
and of the price table's parts, each timed alone: ``score b=B`` / ``score-bf16 b=B`` (the scoring pass), ``own: KIND``
(sbdata's own work in that kind's step) and ``back to back: SCORE b=B, train b=K`` (the scoring pass and the kept
batch's training step one right after the other on one model, no sbdata between them).
"""

from __future__ import annotations

import math
import re
from typing import Any

CHECK_EVERY = 100  # sbdata's default autocast_check_every: one batch in 100 also scored at full precision


def seconds_per_batch(kinds: dict[str, Any]) -> dict[str, float]:
    return {name: kind["seconds_per_batch"] for name, kind in kinds.items()}


def run_seconds(record: dict[str, Any], kinds: dict[str, Any], samples: int) -> float:
    """A run's priced seconds: its loader batches at the seconds of its step kind; the reducible arm's up-front
    training steps at plain steps' and its pass over the training set at the ``score`` kind's; a warm-cache step
    between the all-reused and the all-scored one by the run's share of scored samples; ``keep="auto"`` as the plain
    run of its batch and epochs times the ratio of their CPU seconds (the two ran side by side). ``samples``: the
    training set's size."""
    cfg, t = record["config"], seconds_per_batch(kinds)
    batch, steps = cfg["batch"], record["steps"]
    if cfg["keep"] == "auto":
        plain = record["epochs"] * math.ceil(samples / batch) * t[f"plain b={batch}"]
        return plain * record["cpu_seconds"] / record["paired_plain_cpu_seconds"]
    if cfg["policy"] is None:
        if cfg["prune"] is None:
            return steps * t[f"plain b={batch}"]
        rule = cfg.get("rule", "infobatch")
        return steps * t[f"prune b={batch}" if rule == "infobatch" else f"{rule} b={batch}"]
    if not cfg["warm"]:  # a timing without the up-front work's kinds raises rather than pricing it at 0
        upfront = 0.0
        if record.get("upfront_steps"):
            upfront += record["upfront_steps"] * t[f"plain b={batch}"]
        if record.get("upfront_scored"):
            upfront += math.ceil(record["upfront_scored"] / batch) * t[f"score b={batch}"]
        policy = cfg["policy"] + ("-bf16" if cfg.get("autocast") else "")
        return steps * t[f"{policy} keep={cfg['keep']} b={batch}"] + upfront
    sb = record["sb"]
    share = sb["samples_scored"] / max(1, sb["samples_seen"])
    reused, scored = t[f"warm-reused keep={cfg['keep']} b={batch}"], t[f"warm-scored keep={cfg['keep']} b={batch}"]
    return steps * (reused + share * (scored - reused))


def back_to_back_name(score: str, batch: int, kept: int) -> str:
    """The timing kind of a scoring pass (``score`` or ``score-bf16``) at ``batch`` then a plain training step at
    ``kept``, one after the other on one model, no sbdata between them."""
    return f"back to back: {score} b={batch}, train b={kept}"


_SELECTION = re.compile(r"(?P<kind>\S+) keep=(?P<keep>[\d.]+) b=(?P<batch>\d+)$")


def price_table(kinds: dict[str, Any], batch: int) -> list[dict[str, Any]]:
    """Every selection and sampler path's measured seconds per loader batch beside its **limit**: its parts run back
    to back on one model plus sbdata's own work, never the measured step itself. The parts: the scoring pass at the
    loader batch and the training step at the kept batch, timed back to back (bfloat16 scoring adds one
    full-precision pass in :data:`CHECK_EVERY`, the live check's); a path that scores nothing (the sampler, the warm
    cache's reused step) trains at its batch alone; sbdata's own work (``own: KIND``). The same parts timed apart
    stay beside as a column. A path whose parts were not timed is left out. ``batch``: the user's loader batch, whose
    plain step makes the plain-epoch columns.

    Returns:
        Rows ``{"path", "measured", "limit", "parts", "apart", "over", "over_apart", "measured_epochs",
        "limit_epochs"}``: seconds per loader batch; ``parts`` names the limit's; ``apart``: the parts timed apart;
        ``over`` = measured / limit - 1; both in plain epochs (over the plain step at ``batch``).
    """
    t = seconds_per_batch(kinds)
    plain = t.get(f"plain b={batch}")
    rows: list[dict[str, Any]] = []
    if plain is None:
        return rows
    for name, measured in t.items():
        own = t.get(f"own: {name}")
        if own is None:
            continue
        match = _SELECTION.match(name)
        if match is None or match["kind"] == "warm-reused":  # trains what it loads, nothing scored
            b = int(name.rsplit("b=", 1)[1])
            kept = b if match is None else math.ceil(float(match["keep"]) * b)
            train = t.get(f"plain b={kept}")
            if train is None:
                continue
            parts = {f"train b={kept}": train}
            apart = train + own
        else:
            kind, b = match["kind"], int(match["batch"])
            kept = math.ceil(float(match["keep"]) * b)
            score = "score-bf16" if kind == "topk-bf16" else "score"
            pair, alone, train = t.get(back_to_back_name(score, b, kept)), t.get(f"{score} b={b}"), t.get(
                f"plain b={kept}")  # fmt: skip
            if pair is None or alone is None or train is None:
                continue
            parts = {f"{score} b={b}, then train b={kept}": pair}
            apart = alone + train + own
            if kind == "topk-bf16":
                check = t[f"score b={b}"] / CHECK_EVERY
                parts["full-precision check"] = check
                apart += check
        parts["sbdata"] = own
        limit = sum(parts.values())
        rows.append({"path": name, "measured": measured, "limit": limit, "parts": parts, "apart": apart,
                     "over": measured / limit - 1.0, "over_apart": measured / apart - 1.0,
                     "measured_epochs": measured / plain, "limit_epochs": limit / plain})  # fmt: skip
    return rows


def limits(kinds: dict[str, Any], batch: int, *, staleness: int, new_share: float | None) -> dict[str, float]:
    """What an epoch can cost at best, in plain epochs at the user's ``batch``, from the price table's limits: each
    path at the user's batch; the warm cache at each keep (known samples rescored once every ``staleness + 1``
    epochs) and with nothing scored; in a continued suite (``new_share``: the mix's share of new samples), training
    only the new samples and scoring nothing (``ideal``)."""
    out: dict[str, float] = {} if new_share is None else {"ideal": new_share}
    rows = {row["path"]: row["limit_epochs"] for row in price_table(kinds, batch)}
    out.update({p: v for p, v in rows.items() if p.endswith(f"b={batch}") and not p.startswith("warm-")})
    for keep in (0.25, 0.5):
        reused, scored = rows.get(f"warm-reused keep={keep} b={batch}"), rows.get(f"warm-scored keep={keep} b={batch}")
        if reused is not None and scored is not None:
            out[f"warm keep={keep}"] = reused + (scored - reused) / (staleness + 1)
            out[f"warm keep={keep}, nothing scored"] = reused
    return out
