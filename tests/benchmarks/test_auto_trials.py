"""The keep="auto" trials table (``benchmarks/auto/trials_table.py``): its targets on planted records whose answers
are known, for both flipped-label suites and the long-window ablation arm; and that arm's settings."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from benchmarks.auto.arms import ONCE, SelectArm, ablation_arms, plain_before_verdict
from benchmarks.auto.trials_table import first_verdict_lines, main, summarize, targets, trial_check_lines
from benchmarks.harness._sb import Auto, CostTable, SBLoader


def _run(arm: str, seed: int, final: float, seconds: float, auto: bool = False, fe: float | None = None) -> dict:
    """A run whose test curve rises linearly from 0.5 to ``final`` over ``seconds`` (8 evaluations), and over ``fe``
    forward-equivalents where given."""
    curve = [{"seconds": seconds * i / 8, "accuracy": 0.5 + (final - 0.5) * i / 8} for i in range(1, 9)]
    if fe is not None:
        curve = [{**point, "fe": fe * i / 8} for i, point in enumerate(curve, 1)]
    record = {"arm": arm, "seed": seed, "accuracy": final, "seconds": seconds, "curve": curve, "steps": 800}
    if fe is not None:
        record["fe"] = fe
    if auto:
        record["auto"] = {"on_share": 0.5, "trials": 1, "trial_share": 0.25, "history": [[400.0, 1.0, 0.25, 2.0,
                          1.5]], "reason": "trial 1: select at keep 0.25"}  # fmt: skip
    return record


def _suite(user: float, topk: tuple[float, float], auto: tuple[float, float], arm: str) -> list[dict]:
    runs = []
    for seed, wobble in enumerate((-0.001, 0.0, 0.001)):
        runs += [_run("user", seed, user + wobble, 10.0), _run("topk-0.25", seed, topk[0] + wobble, topk[1]),
                 _run(arm, seed, auto[0] + wobble, auto[1], auto=True)]  # fmt: skip
    return runs


def test_capture_target_reads_the_ratio_to_top_k():
    """The user's curve reaches its final accuracy at its last evaluation (10 s); top-k's (final 0.95 over 5 s)
    reaches 0.90 at 4.44 s: 2.25x; an arm at 0.95 over 8 s gets there at 7.11 s: 1.41x, 0.63 of top-k's < 0.87."""
    suite = summarize(_suite(0.90, (0.95, 5.0), (0.95, 8.0), "auto-topk-long"))
    assert suite["arms"]["topk-0.25"]["speedup_mean"] == pytest.approx(2.25, rel=0.01)
    (said,) = targets("mlp100k", suite, "auto-topk-long")
    assert said.startswith("mlp100k: auto-topk-long captures top-k's win: **missed**") and "ratio 0.63" in said
    suite = summarize(_suite(0.90, (0.95, 5.0), (0.95, 5.5), "auto-topk"))
    assert "**met**" in targets("cnn100k", suite)[0]


def test_the_trials_estimate_is_printed_beside_the_fixed_arms_whole_run():
    """The planted auto runs' first decision measured 1.5x; top-k (final 0.95 over 5 s, the user's 0.90 at 10 s)
    gets to the user's accuracy at 4.44 s: 2.25x on seed 1, whose user run ends at exactly 0.90."""
    lines = trial_check_lines({"suites": {"mlp100k": summarize(_suite(0.90, (0.95, 5.0), (0.95, 8.0), "auto-topk"))}})
    (row,) = [line for line in lines if line.startswith("| mlp100k |")]
    cells = row.split("|")[2].split(";")
    assert [c.strip().split(" / ")[0] for c in cells] == ["0: 1.50x", "1: 1.50x", "2: 1.50x"]
    assert cells[1].strip() == "1: 1.50x / 2.25x"


def test_where_the_first_verdict_would_have_to_fall_reads_seconds_and_forward_equivalents():
    """The user reaches its 0.90 at 10 s and 1,000 FE; top-k (0.95 over 5 s and 400 FE) at 8/9 of its curve: 2.25x in
    seconds, 2.81x in FE; after 64 whole batches (0.95 over 7.5 s and 500 FE): 1.50x (0.67 of top-k's), 2.25x in FE
    (0.80 of top-k's). Arms the record lacks have no row; a record without FE leaves those cells empty."""
    runs = []
    for seed, wobble in enumerate((-0.001, 0.0, 0.001)):
        runs += [_run("user", seed, 0.90 + wobble, 10.0, fe=1000.0), _run("topk-0.25", seed, 0.95 + wobble, 5.0,
                 fe=400.0), _run("topk-0.25-after-64", seed, 0.95 + wobble, 7.5, fe=500.0)]  # fmt: skip
    lines = first_verdict_lines({"suites": {"mlp100k": summarize(runs)}})
    rows = [[c.strip() for c in line.split("|")[2:-1]] for line in lines if line.startswith("| mlp100k |")]
    assert rows == [
        ["topk-0.25", "0", "95.00%", "2.25x", "1.00", "2.81x", "1.00"],
        ["topk-0.25-after-64", "64", "95.00%", "1.50x", "0.67", "2.25x", "0.80"],
    ]
    assert first_verdict_lines({"suites": {"mlp100k": summarize(_suite(0.9, (0.95, 5.0), (0.9, 9.0), "x"))}}) == []
    # topk-0.25-after-trial's n is plain_before_verdict of the epoch read from the user's runs: 800 steps / 80 epochs
    late = [{**r, "epochs": 80} for r in runs] + [
        _run("topk-0.25-after-trial", s, 0.95, 7.5, fe=500.0) for s in range(3)
    ]
    (row,) = [
        line
        for line in first_verdict_lines({"suites": {"m": summarize(late)}})
        if line.startswith("| m | topk-0.25-after-trial")
    ]
    assert (
        row.startswith(f"| m | topk-0.25-after-trial | {plain_before_verdict(10)} |") and plain_before_verdict(10) < 64
    )
    no_fe = [{**r, "curve": [{k: v for k, v in p.items() if k != "fe"} for p in r["curve"]]} for r in runs]
    (row,) = [line for line in first_verdict_lines({"suites": {"m": summarize(no_fe)}}) if "after-64" in line]
    assert row.endswith("| 1.50x | 0.67 | n/a |  |")


@pytest.mark.parametrize("name", ["noisy100k", "noisy30-100k"])
def test_never_loses_on_both_flipped_label_suites(name):
    """Below the user's mean minus one seed sd (0.001) is a loss; so is a speed-up under 0.95."""
    kept = targets(name, summarize(_suite(0.90, (0.80, 5.0), (0.9005, 9.0), "auto-topk")))
    assert ["**met**" in t for t in kept] == [True, True]
    lost = targets(name, summarize(_suite(0.90, (0.80, 5.0), (0.897, 9.0), "auto-topk")))
    assert "**missed**" in lost[0] and "**missed**" in lost[1]  # never reaches the user's accuracy: no speed-up


def test_table_reads_the_ablation_folders(tmp_path):
    """``trials/long-<suite>`` feeds the ablation section and its targets; the main targets are untouched by it."""
    folders = {
        "mlp100k": _suite(0.9, (0.95, 5.0), (0.9, 10.0), "auto-topk"),
        "long-mlp100k": _suite(0.9, (0.95, 5.0), (0.95, 5.5), "auto-topk-long"),
    }
    for name, rows in folders.items():
        (tmp_path / "trials" / name).mkdir(parents=True)
        (tmp_path / "trials" / name / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    main(["--results", str(tmp_path)])
    summary = json.loads((tmp_path / "trials" / "report" / "summary.json").read_text())
    assert [t.split(":")[1].strip() for t in summary["targets"]] == ["auto-topk captures top-k's win"]
    assert "**missed**" in summary["targets"][0] and "**met**" in summary["long_targets"][0]
    assert "## Ablation: longer trial windows" in (tmp_path / "trials" / "report" / "table.md").read_text()


def test_an_ablation_arm_in_the_main_folder_keeps_its_targets(tmp_path):
    """``trials/noisy30-100k`` holds the long-window arms beside the default: each gets its targets in the table."""
    runs = _suite(0.90, (0.80, 5.0), (0.9005, 9.0), "auto-topk") + _suite(
        0.90, (0.80, 5.0), (0.897, 9.0), "auto-topk-long"
    )
    (tmp_path / "trials" / "noisy30-100k").mkdir(parents=True)
    (tmp_path / "trials" / "noisy30-100k" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    main(["--results", str(tmp_path)])
    said = json.loads((tmp_path / "trials" / "report" / "summary.json").read_text())["targets"]
    assert [t.split("'s")[0] for t in said] == ["noisy30-100k: auto-topk"] * 2 + ["noisy30-100k: auto-topk-long"] * 2


def test_ablation_arms_and_their_settings():
    arms = ablation_arms({"batch": 256, "lr": 2e-3})
    assert [(a.name, a.batch, a.policy, a.keep, a.auto, a.before_verdict, a.first) for a in arms] == [
        ("auto-topk-long", 256, "topk", "auto", (("window", 64), ("settle", 64)), None, None),
        ("auto-topk-long-window", 256, "topk", "auto", (("window", 64), ("settle", 16)), None, None),
        ("auto-topk-once", 256, "topk", "auto", (("every", ONCE),), None, None),
        ("topk-0.25-after-trial", 256, "topk", 0.25, (), "plain", None),
        ("topk-0.25-until-verdict", 256, "topk", 0.25, (), "select", None),
        ("topk-0.25-after-64", 256, "topk", 0.25, (), "plain", 64),
        ("topk-0.25-after-128", 256, "topk", 0.25, (), "plain", 128),
        ("topk-0.25-after-192", 256, "topk", 0.25, (), "plain", 192),
        ("topk-0.25-after-256", 256, "topk", 0.25, (), "plain", 256),
        ("small-64", 64, None, 1.0, (), None, None),
        ("auto-topk-run", 256, "topk", "auto", (), None, None),
    ]
    assert [a.name for a in arms if a.run] == ["auto-topk-run"]  # told the run's length (Auto(run=...))


@pytest.mark.parametrize(
    ("before_verdict", "first", "whole"),
    [("plain", 5, [8] * 5 + [2] * 7), ("select", 5, [2] * 5 + [8] * 7), ("plain", None, [8] * 12)],
)
def test_a_before_verdict_arm_switches_after_exactly_its_first_batches(before_verdict, first, whole):
    """Two epochs of 6 batches of 8: ``first=5`` trains 5 whole batches, then top-k keeps 2 of 8 (the mirror arm the
    other way round); with ``first=None`` the phase lasts ``plain_before_verdict(6)`` batches, which outlast the run."""
    split = type("Split", (), {"fields": lambda self: (torch.randn(48, 3), torch.randint(0, 2, (48,)))})()
    arm = SelectArm("arm", 8, 1e-3, policy="topk", keep=0.25, before_verdict=before_verdict, first=first)
    loader, _ = arm.build(torch.nn.Linear(3, 2), split, family="mlp", batch=8, epochs=2, seed=0)
    sizes = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        sizes += [len(x) for x, _ in loader]
    assert plain_before_verdict(6) >= 12 and sizes == whole


def test_the_run_arm_tells_auto_the_runs_length():
    split = type("Split", (), {"fields": lambda self: (torch.randn(48, 3), torch.randint(0, 2, (48,)))})()
    told = next(a for a in ablation_arms({"batch": 8, "lr": 1e-3}) if a.name == "auto-topk-run")
    loader, _ = told.build(torch.nn.Linear(3, 2), split, family="mlp", batch=8, epochs=3, seed=0)
    assert loader.engine.keep.auto.run == 3 * 6  # 3 epochs of 6 loader batches
    plain, _ = SelectArm("auto-topk", 8, 1e-3, policy="topk", keep="auto").build(
        torch.nn.Linear(3, 2), split, family="mlp", batch=8, epochs=3, seed=0
    )
    assert plain.engine.keep.auto.run is None


@pytest.mark.filterwarnings("ignore:sbdata keep='auto'")  # the planted data are random: the verdict is off
@pytest.mark.parametrize("epoch", [12, 313])
def test_plain_before_verdict_counts_the_whole_batches_auto_trains_before_its_first_verdict(epoch):
    """A linear model on a loader of ``epoch`` batches of 8, keep="auto" on a fixed cost table: the batches that
    arrive whole before the first decision is recorded are exactly ``plain_before_verdict(epoch)`` (379 at 313: 64
    of warm-up, 4 plain windows of 47 + 16, and the span after the trial in which its sums land)."""
    torch.manual_seed(0)
    batches = [(torch.randn(8, 3), torch.randint(0, 2, (8,))) for _ in range(epoch)]
    model = torch.nn.Linear(3, 2)
    loader = SBLoader(batches, model, F.cross_entropy, keep=Auto(costs=CostTable(1.0, 1.0)), policy="topk")
    whole = 0
    while loader.stats.auto_trials == 0:
        for x, _ in loader:
            whole += len(x) == 8
            if loader.stats.auto_trials:
                whole -= len(x) == 8  # the batch routed as the decision is taken arrives after it
                break
    assert whole == plain_before_verdict(epoch)
