"""keep="auto": the controller switches selection on where the gain estimate says it pays, off where it does not,
without flapping, resumes exactly, decides alike on every rank and makes no host-device synchronisation per step.

Every test gives the controller a fixed cost table (forward-equivalents) or a fixed clock: no verdict reads a clock.
The oracle's per-sample losses are planted per batch of 16, so each batch's ``tau`` is known (``PHASES``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torchdata.nodes import IterableWrapper, Loader

import sbdata
from sbdata import Auto, CostTable, LossCache, SBCollator, SBLoader, Schedule, SelectionEngine, keep_count
from sbdata.auto import best_keep, tau
from sbdata.nodes import SBSelector
from sbdata.wds import sb_select
from tests.helpers import OracleModel, ce, check_save_load, oracle_batch, roundtrip
from tests.launch import launch_ranks

FE = CostTable.forward_equivalents()
B = 16
PHASES = {  # per-sample losses of one batch of 16, by how concentrated they are
    "flat": [1.0] * B,  # tau 1.00: predicted 0.40x, off
    "conc": [10.0] + [0.01] * (B - 1),  # tau 3.94: predicted 1.44x at keep 0.1, on
    "band": [10.0] * 2 + [0.01] * (B - 2),  # tau 2.81: predicted 1.15x, inside the hysteresis band (1, 1.3)
}
MARGIN = 0.3
pytestmark = pytest.mark.filterwarnings("ignore:sbdata keep='auto'")


def speedup_of(phase: str) -> float:
    return best_keep(tau(PHASES[phase]), FE, B)[1]


def plan(*phases: tuple[str, int]) -> tuple[list[float], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The oracle's loss table and the batches of 16 for ``(phase, batches)`` in order."""
    table = [loss for phase, count in phases for _ in range(count) for loss in PHASES[phase]]
    return table, [oracle_batch(range(start, start + B)) for start in range(0, len(table), B)]


def settings(**overrides: Any) -> Auto:
    """Read every 2 scored steps, probe every batch while off, no smoothing (tau is the window's), FE costs."""
    values = {
        "every": 2,
        "probe_every": 1,
        "smoothing": 0.0,
        "margin": MARGIN,
        "costs": FE,
        "min_keep": 0.1,
        **overrides,
    }
    return Auto(**{"probes": values["every"], **values})  # while off, a read per `every` probes too


def sizes(outputs: list[Any]) -> list[int]:
    return [out[0].shape[0] for out in outputs]


# ----------------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("min_keep", 0.0, r"Auto.min_keep got 0.0: pass a share in \(0, 1\]"),
        ("max_keep", 1.5, r"Auto.max_keep got 1.5: pass a share in \(0, 1\]"),
        ("margin", -0.1, r"Auto.margin got -0.1: pass a finite number >= 0"),
        ("smoothing", 1.0, r"Auto.smoothing got 1.0: pass a factor in \[0, 1\)"),
        ("grid", True, r"Auto.grid got True"),
        ("every", 0, r"Auto.every must be an int >= 1, got 0"),
        ("probe_every", 2.0, r"Auto.probe_every must be an int >= 1, got 2.0"),
        ("decisions_kept", None, r"Auto.decisions_kept must be an int >= 1, got None"),
    ],
)
def test_settings_are_checked_at_construction_naming_field_and_value(field, value, message):
    with pytest.raises(ValueError, match=message):
        Auto(**{field: value})


def test_settings_type_errors_and_range_order():
    with pytest.raises(ValueError, match=r"min_keep=0.8, max_keep=0.2\): min_keep must not exceed max_keep"):
        Auto(min_keep=0.8, max_keep=0.2)
    with pytest.raises(TypeError, match="Auto.costs must be a sbdata.CostTable or None, got dict"):
        Auto(costs={"score": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Auto.clock must be callable"):
        Auto(clock=3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"got 'fast'"):
        SBLoader([], OracleModel([1.0]), ce, keep="fast")  # type: ignore[arg-type]


def test_auto_string_is_the_default_settings_and_a_fixed_keep_has_no_controller():
    assert SelectionEngine(OracleModel([1.0]), ce, keep="auto").controller.settings == Auto()
    assert SelectionEngine(OracleModel([1.0]), ce, keep=0.5).controller is None


# ----------------------------------------------------------------------------------------------- decisions
def test_switches_off_on_a_flat_spread_and_says_why_once():
    table, batches = plan(("flat", 12))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = [out for _ in range(2) for out in sb]
    assert sizes(outputs) == [B] * 24  # whole batches throughout
    stats = sb.stats
    assert not stats.auto_on and stats.auto_on_share == 0.0 and stats.auto_keep == 1.0
    assert stats.auto_tau == pytest.approx(1.0) and stats.auto_speedup == pytest.approx(speedup_of("flat"))
    # FE at keep 0.55 of 16 (k = 9): scoring 16 of 16 + 27 = 37% of a step; tau 1: 0.40x
    expected = (
        "selection predicted 0.40x here: scoring is 37% of a step and the loss spread is flat (tau 1.00); "
        "training on whole batches"
    )
    assert stats.auto_reason == expected
    assert [str(w.message) for w in caught] == [f"sbdata keep='auto': {expected}"]  # once per loader, not per read
    assert caught[0].filename == __file__  # it names the user's loop line, not a line inside sbdata
    assert len(stats.auto_decisions) == 10 and all(on == 0.0 for _, on, *_ in stats.auto_decisions)
    assert stats.postfix() == {"bp": "1.00", "kept_loss": stats.postfix()["kept_loss"],
                               "dropped_loss": stats.postfix()["dropped_loss"], "auto": "off", "tau": "1.00",
                               "x": f"{speedup_of('flat'):.2f}"}  # fmt: skip


def test_switches_on_on_a_concentrated_spread_at_the_best_keep():
    table, batches = plan(("conc", 12))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings())
    outputs = list(sb)
    # reads at the 3rd and 5th scored batch; the first decision uses the first window (batches 0-1), one window
    # late, so batches 0-3 pass whole and batch 4 on is selected, keeping keep_count(0.1, 16) = 2
    assert sizes(outputs) == [B] * 4 + [2] * 8
    assert all(0 in (torch.round(out[0][:, 0]).long() % B).tolist() for out in outputs[4:])  # the hard sample
    stats = sb.stats
    assert stats.auto_on and stats.auto_keep == pytest.approx(0.1) and stats.auto_on_share == pytest.approx(8 / 12)
    assert stats.auto_decisions[0] == pytest.approx((4, 1.0, 0.1, tau(PHASES["conc"]), speedup_of("conc")))
    assert stats.auto_reason == "" and stats.postfix()["auto"] == "on 0.10"  # the progress bar shows the decision


def check_hysteresis(history: tuple[tuple[float, ...], ...]) -> None:
    """On above 1 + margin, off below 1, unchanged in between, at every decision."""
    previous = 0.0
    for step, on, _keep, _tau, speed in history:
        if speed > 1 + MARGIN:
            assert on == 1.0, step
        elif speed < 1:
            assert on == 0.0, step
        else:
            assert on == previous, f"flapped at step {step} with a predicted {speed:.3f}x"
        previous = on


def test_hysteresis_keeps_the_state_inside_the_band():
    assert 1 < speedup_of("band") < 1 + MARGIN < speedup_of("conc") and speedup_of("flat") < 1
    table, batches = plan(("conc", 6), ("band", 8), ("flat", 8))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings())
    outputs = list(sb)
    history = sb.stats.auto_decisions
    check_hysteresis(history)
    in_band = [on for _, on, _, _, speed in history if 1 < speed < 1 + MARGIN]
    assert in_band and all(on == 1.0 for on in in_band)  # on, and stayed on through the band
    assert history[-1][1] == 0.0  # and off once the spread went flat
    assert sizes(outputs)[:4] == [B] * 4 and sizes(outputs)[-1] == B

    table, batches = plan(("band", 12))  # from off, the band never switches it on
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings())
    assert sizes(list(sb)) == [B] * 12
    assert sb.stats.auto_decisions and all(on == 0.0 for _, on, *_ in sb.stats.auto_decisions)


def test_composes_with_the_schedule():
    table, batches = plan(("conc", 16))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings(), schedule=Schedule(interrupt=2))
    out = sizes(list(sb))
    assert out[1::2] == [B] * 8  # the schedule's plain steps stay plain
    assert out[0::2] == [B] * 4 + [2] * 4  # its SB steps: off until the first decision (after 4 scored), then on


def test_pooled_layout_emits_fixed_size_batches_once_on():
    table, batches = plan(("conc", 12))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings(), batch_size=4)
    out = sizes(list(sb))
    assert out[:4] == [B] * 4 and set(out[4:]) == {4}  # plain batches whole, then pooled batches of 4
    assert sb.stats.auto_keep == pytest.approx(best_keep(tau(PHASES["conc"]), FE, B, batch_size=4)[0])


def test_live_costs_from_a_fixed_clock():
    ticks = iter(range(10**6))
    clock = lambda: float(next(ticks))  # noqa: E731  every call one second later: each timed call lasts 1 s
    table, batches = plan(("conc", 8))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings(costs=None, clock=clock))
    outputs = list(sb)
    assert sizes(outputs) == [B] * 8  # scoring 16 costs as much as training 16: selection cannot pay
    # every other probe scores a quarter batch (4), which lasts 1 s too: the scoring line is all fixed cost, and
    # training, timed at 16 only, scales as scoring does: every call costs 1 s whatever its size
    assert sorted(sb.engine.controller.meter.score_times) == [B // 4, B]
    costs = sb.engine.controller.meter.table()
    assert costs == CostTable(score_per_sample=0.0, train_per_sample=0.0, score_fixed=1.0, train_fixed=1.0)
    assert sb.stats.auto_speedup < 1


def test_observed_losses_feed_the_estimate_while_off():
    table, batches = plan(("conc", 3))
    cache = LossCache(size=len(table), staleness=1)
    expensive = CostTable(score_per_sample=10.0, train_per_sample=1.0)  # never pays: stays off
    keep = settings(costs=expensive, probe_every=100)  # no probe in this epoch: only observe() feeds the sums
    sb = SBLoader(batches, OracleModel(table), ce, keep=keep, cache=cache, id_key=lambda b: b[0][:, 0].long())
    for out in sb:
        sb.observe(out, ce(sb.engine.model(out[0]), out[1], reduction="none"))
    total, squares, count = sb.engine.controller.sums.tolist()
    assert count == 3 * B and total == pytest.approx(3 * sum(PHASES["conc"]), rel=1e-5)
    assert math.sqrt(count * squares) / total == pytest.approx(tau(PHASES["conc"]), rel=1e-5)
    assert not sb.stats.auto_on and sb.stats.sb_steps == 0


# ----------------------------------------------------------------------------------------------- state
@pytest.mark.parametrize("phases", [(("conc", 10),), (("flat", 10),), (("conc", 4), ("flat", 6))], ids=str)
def test_exact_resume_on_off_and_switching(phases):
    table, batches = plan(*phases)

    def make() -> SBLoader:
        return SBLoader(batches, OracleModel(table), ce, keep=settings(), policy="rank", generator=3)

    reference = check_save_load(make, epochs=2, at=range(1, 20))
    assert sum(map(len, reference)) == 20


def test_state_loads_weights_only_and_holds_the_decisions():
    table, batches = plan(("conc", 6))
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings())
    iterator = iter(sb)
    for _ in range(5):
        next(iterator)
    state = roundtrip(sb.state_dict())["engine"]["auto"]
    assert state["on"] is True and state["keep"] == pytest.approx(0.1) and len(state["decisions"]) == 1
    assert state["in_flight"] is not None and state["sums"].dtype == torch.float64


def test_a_state_saved_with_another_keep_mode_refuses_to_load_and_old_states_load():
    table, batches = plan(("conc", 2))
    fixed = SBLoader(batches, OracleModel(table), ce, keep=0.5)
    auto = SBLoader(batches, OracleModel(table), ce, keep="auto")
    with pytest.raises(ValueError, match=r"saved with keep=None but this loader has keep='auto\(min_keep=None"):
        auto.load_state_dict(roundtrip(fixed.state_dict()))
    with pytest.raises(ValueError, match=r"saved with keep='auto\(.*\)' but this loader has keep=None"):
        fixed.load_state_dict(roundtrip(auto.state_dict()))
    old = roundtrip(fixed.state_dict())
    del old["engine"]["options"]["keep"], old["engine"]["auto"]  # as saved before keep="auto" existed
    SBLoader(batches, OracleModel(table), ce, keep=0.5).load_state_dict(old)


# ----------------------------------------------------------------------------------------------- front ends
def test_every_front_end_decides_alike():
    table, batches = plan(("conc", 6), ("flat", 6))
    reference = list(SBLoader(batches, OracleModel(table), ce, keep=settings()))
    node = Loader(SBSelector(IterableWrapper(batches), OracleModel(table), ce, keep=settings()))
    stage = sb_select(OracleModel(table), ce, keep=settings())
    collator = SBCollator(OracleModel(table), ce, keep=settings(), collate_fn=lambda batch: batch)
    runs = {
        "SBSelector": list(node),
        "sb_select": list(stage(iter(batches))),
        "SBCollator": [collator(batch) for batch in batches],
    }
    for name, outputs in runs.items():
        assert sizes(outputs) == sizes(reference), name
        assert all(torch.equal(a[0], b[0]) for a, b in zip(outputs, reference, strict=True)), name
    assert stage.stats.auto_decisions == collator.stats.auto_decisions == node.root.stats.auto_decisions


def test_accelerate_wrap_passes_keep_auto_through():
    accelerate = pytest.importorskip("accelerate")
    from sbdata.integrations.accelerate import wrap

    table, batches = plan(("conc", 6))
    accelerator = accelerate.Accelerator(cpu=True)
    model = accelerator.prepare(OracleModel(table))
    sb = wrap(accelerator, batches, model, ce, keep=settings())
    assert sizes(list(sb)) == [B] * 4 + [2] * 2 and sb.stats.auto_on


# ----------------------------------------------------------------------------------------------- synchronisation
def test_no_sync_per_step_with_keep_auto():
    from tests.checks.test_syncs import LOSSES, SyncCounter, batches

    counter = SyncCounter()
    epochs = [batches(e, keys=False) for e in range(4)]  # no list column: its copy is allowed per SB step
    for epoch in epochs:
        for batch in epoch:
            counter.host.update((id(v), v) for v in batch.values())
    cheap = CostTable(score_per_sample=0.001, train_per_sample=3.0)  # pooled, this pays even on a tau of 1.1
    for config in ({"costs": cheap, "batch_size": 8}, {"costs": FE}):  # on, and off with probes
        pooled = {"batch_size": config.pop("batch_size")} if "batch_size" in config else {}
        auto = Auto(every=2, probe_every=2, probes=2, min_keep=0.1, **config)
        sb = SBLoader([], OracleModel(LOSSES), ce, keep=auto, generator=1, **pooled)
        steps = 0
        for epoch in epochs:
            sb.loader = epoch
            with counter.active():
                outputs = iter(sb)
                while True:
                    try:
                        next(outputs)
                    except StopIteration:
                        break
                    steps += 1
                    assert counter.calls == [], f"step {steps}: {counter.calls}"
        assert steps > 8 and len(sb.stats.auto_decisions) >= 2
        assert sb.stats.auto_on == bool(pooled)


# ----------------------------------------------------------------------------------------------- distributed
def decide_on_rank(rank: int) -> dict[str, Any]:
    """On one of 2 gloo ranks, with its own local losses: the sizes it yields and the decisions it takes."""
    phases = (("conc", 8), ("flat", 8)) if rank == 0 else (("flat", 8), ("conc", 8))  # different local losses
    table, batches = plan(*phases)
    sb = SBLoader(batches, OracleModel(table), ce, keep=settings())
    outputs = sizes(list(sb))
    return {"sizes": outputs, "history": sb.stats.auto_decisions}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ranks_decide_alike():
    first, second = launch_ranks(decide_on_rank, world=2, timeout=120)  # 120 s: a hang guard only
    assert first["history"] == second["history"] and first["sizes"] == second["sizes"]
    # the pooled sums: half the batches concentrated, so a global tau between flat and concentrated
    global_tau = math.sqrt(sum(x * x for x in PHASES["conc"] + PHASES["flat"]) / (2 * B))
    global_tau /= sum(PHASES["conc"] + PHASES["flat"]) / (2 * B)
    assert first["history"][0][3] == pytest.approx(global_tau)


def test_auto_is_exported():
    assert sbdata.Auto is Auto and sbdata.CostTable is CostTable


@pytest.mark.slow
def test_transformers_trainer_passes_keep_auto_through(tmp_path):
    pytest.importorskip("transformers")
    from tests.integrations.test_transformers import BATCH, make_trainer

    trainer = make_trainer(tmp_path, sb_options={"keep": Auto(every=1, probe_every=1, costs=FE)})
    trainer.train()
    stats = trainer.sb.stats
    assert stats.auto_decisions and stats.steps == len(trainer.seen)  # decisions were taken, every batch trained
    shares = {keep for _, on, keep, *_ in stats.auto_decisions if on}
    assert {len(step) for step in trainer.seen} <= {BATCH} | {keep_count(keep, BATCH) for keep in shares}


def test_the_live_meter_takes_medians_and_ignores_sizes_timed_too_rarely():
    from sbdata.engine._cost_meter import MIN_CALLS, CostMeter

    seconds = iter([])
    meter = CostMeter(torch.device("cpu"), clock=lambda: next(seconds))
    # scoring: 64 samples in 1 s and 256 in 2 s (fixed 2/3, 1/192 per sample); training at 256: 3 s, with one call
    # of 30 s (an evaluation between two steps) that a mean would take in; one short batch of 100 timed once
    calls = [(64, 1.0)] * 5 + [(256, 2.0)] * 5
    trains = [(256, 3.0)] * 4 + [(256, 30.0)] + [(100, 9.0)]
    for n, duration in calls:
        seconds = iter([0.0, duration])
        meter.begin_score()
        meter.end_score(n)
    for n, duration in trains:
        seconds = iter([0.0, duration])
        meter.handed(n)
        meter.requested()
    table = meter.table()
    assert meter.train_times[100][0] < MIN_CALLS  # the short batch is left out of the fit
    assert table.score(64) == pytest.approx(1.0) and table.score(256) == pytest.approx(2.0)
    assert table.train(256) == pytest.approx(3.0)  # the median, not the mean (8.4 s)
    assert table.train(64) == pytest.approx(1.5)  # training scales as scoring: 3 * score(64) / score(256)


def test_a_size_timed_rarely_stays_out_of_the_fit_however_long_the_run():
    from sbdata.engine._cost_meter import MIN_SHARE, CostMeter

    seconds = iter([])
    meter = CostMeter(torch.device("cpu"), clock=lambda: next(seconds))
    # 8 epochs of 40 batches of 256 (3 s) and one short last batch of 128 each, every one beside an evaluation (60 s)
    for _ in range(8):
        for n, duration in [(256, 3.0)] * 40 + [(128, 60.0)]:
            seconds = iter([0.0, duration])
            meter.handed(n)
            meter.requested()
    for n, duration in ((64, 1.0), (256, 2.0)) * 5:
        seconds = iter([0.0, duration])
        meter.begin_score()
        meter.end_score(n)
    assert meter.train_times[128][0] == 8 < MIN_SHARE * meter.train_times[256][0]
    table = meter.table()
    assert table.train(256) == pytest.approx(3.0) and table.train(64) == pytest.approx(1.5)  # scaled as scoring


@pytest.mark.parametrize(
    ("options", "lowest"),
    [
        ({}, 0.5),  # top-k, the default: a biased subset, which the estimate does not price
        ({"policy": "importance"}, 0.5),  # sampled, but trained unweighted: biased too
        ({"policy": "importance", "return_weights": True}, 0.1),  # unbiased importance sampling
        ({"policy": "importance", "return_weights": True, "keep": Auto(min_keep=0.3)}, 0.3),  # the user's choice
        ({"keep": Auto(max_keep=0.4)}, 0.4),  # never above max_keep
    ],
)
def test_the_lowest_share_defaults_by_whether_the_policy_is_unbiased(options, lowest):
    table, batches = plan(("conc", 12))
    options = {"keep": Auto(costs=FE, every=2, probes=2, probe_every=1, smoothing=0.0), **options}
    sb = SBLoader(batches, OracleModel(table), ce, **options)
    assert sb.engine.controller.min_keep == lowest
    outputs = list(sb)
    kept = {len(out[0][0] if isinstance(out[0], tuple) else out[0]) for out in outputs}
    assert min(kept) >= math.ceil(lowest * B - 1e-9)  # the controller never keeps fewer


def test_probes_count_the_samples_they_score_quarter_probes_included():
    ticks = iter(range(10**6))
    table, batches = plan(("flat", 8))
    keep = settings(costs=None, clock=lambda: float(next(ticks)), every=100, probes=100)  # no decision: all probes
    sb = SBLoader(batches, OracleModel(table), ce, keep=keep)
    list(sb)
    # probe_every=1: every batch is probed, every second one (off counts 1, 3, 5, 7) on its first quarter only
    assert sb.stats.samples_scored == 4 * B + 4 * (B // 4)
    assert sb.stats.sb_steps == 0 and not sb.stats.auto_on
