"""keep="auto": trials on the live run turn selection on where it measurably pays per second, and leave it off where
it does not; the trial's routing is exact, its measurement has no side effects, it resumes exactly, decides alike
on every front end and every rank, and makes no host-device synchronisation per step.

Every test gives the controller a fixed cost table (forward-equivalents: scoring a sample costs 1, training one 3)
or a fixed clock: no verdict reads a clock. The planted model's loss is ``1 - theta`` for every sample and the test's
loop moves ``theta`` after each step by a planted amount per arm, so each arm's progress per window is known
exactly: the quality sbdata measures is minus the loss, ``theta - 1``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch
from torch import nn
from torchdata.nodes import IterableWrapper, Loader

import sbdata
from sbdata import Auto, CostTable, SBCollator, SBLoader, Schedule, SelectionEngine, keep_count
from sbdata.auto import FixedKeep
from sbdata.auto._control import Route
from sbdata.nodes import SBSelector
from sbdata.wds import sb_select
from tests.helpers import OracleModel, ce, check_save_load, oracle_batch, roundtrip
from tests.launch import launch_ranks

FE = CostTable.forward_equivalents()
B = 16
SMALL = {"keeps": (0.25,), "window": 4, "settle": 2, "cycles": 2, "warmup": 2, "every": 1000, "costs": FE,
         "run": 10_000}  # fmt: skip
# the trial: windows plain, 0.25, 0.25, plain, plain, 0.25, 0.25, plain of 2 + 4 batches, from routed batch 2; the
# last window's average is measured over batches 50-51, and the decision lands a window later, at batch 56
ORDER = [0, 1, 1, 0, 0, 1, 1, 0]
DECISION = 2 + 8 * 6 + 2 + 4
# How every trial's reason opens (windows of 2 + 4 batches), and what the one warning adds
TRIAL_1 = "Trial 1 compared whole batches with keeping 0.25 of each batch, in alternating windows of 6 loader batches. "
LATEST = "said once; loader.stats.auto_reason has the latest"


def auto_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    """The warnings ``keep="auto"`` gave among ``caught``."""
    return [w for w in caught if "keep='auto'" in str(w.message)]


def assert_said_once_at_this_line(caught: list[warnings.WarningMessage], reason: str) -> None:
    """``reason`` said once, in one warning, at this file's line (the user's loop): the only ``keep="auto"`` warning."""
    messages = auto_warnings(caught)
    assert [str(w.message) for w in messages] == [f"sbdata keep='auto': {reason} ({LATEST})"]
    assert [w.filename for w in messages] == [__file__]


PER_SECOND = 48 / 28  # FE at B=16: a plain step costs train(16) = 48, a selection step score(16) + train(4) = 28
pytestmark = pytest.mark.filterwarnings("ignore:sbdata keep='auto'")


def settings(**overrides: Any) -> Auto:
    return Auto(**{**SMALL, **overrides})


class Planted(nn.Module):
    """Every sample's loss is ``1 - theta`` (outputs are that loss, read by :func:`planted_loss`)."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.zeros(()))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return (1.0 - self.theta).expand(x.shape[0]) + 0.0 * x[:, 0]


def planted_loss(outputs: torch.Tensor, targets: torch.Tensor, reduction: str = "none") -> torch.Tensor:
    return outputs if reduction == "none" else outputs.mean()


def batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [oracle_batch(range(i * B, (i + 1) * B)) for i in range(count)]


def train(outputs: Iterable[Any], model: Planted, plain: float, selected: float) -> list[int]:
    """The test's training loop: after each output, ``theta`` moves by ``plain`` (a whole batch) or ``selected``."""
    sizes = []
    for out in outputs:
        n = out[0].shape[0]
        sizes.append(n)
        with torch.no_grad():
            model.theta += plain if n == B else selected
    return sizes


def run(plain: float, selected: float, count: int = 64, **overrides: Any) -> tuple[SBLoader, list[int]]:
    model = Planted()
    sb = SBLoader(batches(count), model, planted_loss, keep=settings(**overrides))
    return sb, train(sb, model, plain, selected)


def trial_sizes(keep: float = 0.25) -> list[int]:
    """The sizes of the first ``DECISION`` outputs: warm-up, the trial's windows, the wait for the decision."""
    window = [[B] * 6, [keep_count(keep, B)] * 6]
    return [B] * 2 + [n for arm in ORDER for n in window[arm]] + [B] * 6


# ----------------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("keeps", (0.25, 1.0), r"Auto.keeps got \(0.25, 1.0\): pass a tuple of distinct shares in \(0, 1\)"),
        ("keeps", [0.25], r"Auto.keeps got \[0.25\]"),
        ("keeps", (0.5, 0.5), r"Auto.keeps got \(0.5, 0.5\)"),
        ("keeps", (), r"Auto.keeps got \(\)"),
        ("z", -1.0, r"Auto.z got -1.0: pass a finite number >= 0"),
        ("margin", math.inf, r"Auto.margin got inf"),
        ("window", 0, r"Auto.window must be an int >= 1, got 0"),
        ("settle", 0, r"Auto.settle must be an int >= 1, got 0"),
        ("cycles", 1.5, r"Auto.cycles must be an int >= 1, got 1.5"),
        ("warmup", True, r"Auto.warmup must be an int >= 0, got True"),
        ("every", 0, r"Auto.every must be an int >= 1, got 0"),
        ("decisions_kept", None, r"Auto.decisions_kept must be an int >= 1, got None"),
        ("min_kept", 0, r"Auto.min_kept must be an int >= 1, got 0"),
        ("trial_share", 0.0, r"Auto.trial_share got 0.0: pass a share in \(0, 1\]"),
        ("trial_share", 1.5, r"Auto.trial_share got 1.5"),
        ("stop_z", 0, r"Auto.stop_z got 0: pass a number > 0 \(math.inf: never stop\)"),
        ("stop_z", math.nan, r"Auto.stop_z got nan"),
        ("run", 0, r"Auto.run must be the loader batches of the whole run, an int >= 1, or None, got 0"),
        ("run", 3.0, r"Auto.run must be .* got 3.0: pass e.g. run=epochs \* len\(loader\)"),
        ("epochs", 0, r"Auto.epochs must be the epochs of the whole run, an int >= 1, or None, got 0"),
        ("epochs", -3, r"Auto.epochs must be .* got -3: pass e.g. Auto\(epochs=10\)"),
        ("epochs", 2.5, r"Auto.epochs must be .* got 2.5"),
        ("epochs", True, r"Auto.epochs must be .* got True"),
    ],
)
def test_settings_are_checked_at_construction_naming_field_and_value(field, value, message):
    with pytest.raises(ValueError, match=message):
        Auto(**{field: value})


def test_settings_type_errors():
    with pytest.raises(TypeError, match="Auto.costs must be a sbdata.CostTable or None, got dict"):
        Auto(costs={"score": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Auto.clock must be callable"):
        Auto(clock=3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"got 'fast'"):
        SBLoader([], OracleModel([1.0]), ce, keep="fast")  # type: ignore[arg-type]


def test_sbloader_sizes_the_trials_to_the_epoch():
    # 12 loader batches per epoch (the digits suite): windows of 2 + 2, a trial within 3 epochs, re-trials 8 apart
    sized = SBLoader(batches(12), Planted(), planted_loss, keep="auto").engine.controller.settings
    assert sized == Auto(window=2, settle=2, warmup=12, every=96)
    assert Auto().sized(313) == Auto(window=16, settle=47, warmup=64, every=1024)  # MNIST-1D 80k at batch 256
    assert Auto().sized(120) == Auto(window=6, settle=18, warmup=64, every=960)
    assert Auto().sized(400) == Auto(window=16, settle=48, warmup=64, every=1024)  # the caps
    assert Auto(window=3).sized(12) == Auto(window=3, settle=2, warmup=12, every=96)  # a size given stays
    with pytest.raises(ValueError, match="epoch must be the loader batches per epoch, an int >= 1, or None; got 0"):
        Auto().sized(0)
    # the run's length fills Auto.run where it is None (a Schedule's total_steps, at the door); one given stands
    assert Auto().sized(12, 100) == Auto(window=2, settle=2, warmup=12, every=96, run=100)
    assert Auto(run=50).sized(12, 100).run == 50 and Auto().sized(12).run is None
    with pytest.raises(ValueError, match="run must be the loader batches of the whole run, an int >= 1, or None"):
        Auto().sized(12, 0)
    assert Auto(run=378).describe().endswith("run=378, trial_share=0.125, stop_z=2.0)")


def test_keep_is_decoded_and_sized_once_from_sbloader_to_the_first_batch(monkeypatch):
    # issues 41 and 49: keep= and the run's length are decoded at one door (the engine's Keep.from_input) and the
    # trials sized there (Auto.sized), once each; the options check and the controller never derive them again
    from sbdata.auto import Keep

    calls = {"decode": 0, "size": 0}
    decode, size = Keep.from_input.__func__, Auto.sized

    def counted_decode(cls, keep, epoch=None, run=None):
        calls["decode"] += 1
        return decode(cls, keep, epoch, run)

    def counted_size(self, epoch=None, run=None):
        calls["size"] += 1
        return size(self, epoch, run)

    monkeypatch.setattr(Keep, "from_input", classmethod(counted_decode))
    monkeypatch.setattr(Auto, "sized", counted_size)
    sb = SBLoader(batches(12), Planted(), planted_loss, keep="auto")
    next(iter(sb))
    assert calls == {"decode": 1, "size": 1}
    controller = sb.engine.controller
    # the epoch of 12 loader batches: windows of round(12 / 20) -> 2, settling round(0.15 * 12) -> 2, warm-up 12
    assert (controller.window, controller.settle, controller.warmup, controller.every) == (2, 2, 12, 96)
    assert sb.engine.keep == Keep(0.25, True, Auto(window=2, settle=2, warmup=12, every=96))
    assert controller.keep == 0.25 and sb.engine.fixed_keep is None


def test_keep_decodes_every_spelling_into_one_value():
    from sbdata.auto import Keep

    assert Keep.from_input(None) == Keep(0.5, False)
    assert Keep.from_input(0.3) == Keep(0.3, True) and Keep.from_input(1) == Keep(1.0, True)
    assert Keep.from_input("auto", 12) == Keep(0.25, True, Auto().sized(12))
    assert Keep.from_input(Auto(keeps=(0.5, 0.25))) == Keep(0.5, True, Auto(keeps=(0.5, 0.25)).sized())
    for bad in (0, 1.5, True, "fast", [0.5], Keep(0.3, True)):  # a decoded Keep is not decoded again
        with pytest.raises(ValueError, match=r"keep must be in \(0, 1\]"):
            Keep.from_input(bad)


def test_epochs_count_the_run_in_the_loaders_batches():
    # Auto(epochs=N) is N * len(loader) loader batches; it excludes run=; a loader without len() cannot count it
    sb = SBLoader(batches(12), Planted(), planted_loss, keep=Auto(epochs=5))
    assert sb.engine.keep.auto is not None and sb.engine.keep.auto.run == 5 * 12
    assert Auto(epochs=5).sized(12) == Auto(window=2, settle=2, warmup=12, every=96, run=60)
    assert Auto(epochs=5).sized(12, 1000).run == 60  # the user's epochs stand over a Schedule's or a trainer's length
    with pytest.raises(ValueError, match="Auto takes epochs or run, not both"):
        Auto(epochs=5, run=60)
    stream = iter(batches(4))  # an iterator has no len()
    with pytest.raises(ValueError, match=r"Auto\(epochs=5\) needs the loader's len\(\).* pass Auto\(run=N\)"):
        SBLoader(stream, Planted(), planted_loss, keep=Auto(epochs=5))
    with pytest.raises(ValueError, match=r"Auto\(epochs=5\) needs the loader's len\(\)"):
        SBCollator(Planted(), planted_loss, keep=Auto(epochs=5))


def test_an_untold_run_trains_exactly_as_a_plain_loop_and_says_once_how_to_tell_it():
    # decision 2 of issue 49: without the run's length no trial runs; the batches and the weights are a plain loop's
    def fit(wrap: Callable[[Any, nn.Module], Iterable[Any]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        torch.manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(96, 4), torch.randint(0, 3, (96,)))
        loader = torch.utils.data.DataLoader(
            data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1)
        )
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        source, seen = wrap(loader, model), []
        for _ in range(3):
            for x, y in source:
                seen.append(x)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return seen, [p.detach().clone() for p in model.parameters()]

    plain_batches, plain_weights = fit(lambda loader, model: loader)
    made: list[SBLoader] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auto_batches, auto_weights = fit(
            lambda loader, model: (
                made.append(SBLoader(loader, model, nn.functional.cross_entropy, keep="auto")) or made[-1]
            )
        )
    assert len(auto_batches) == len(plain_batches) == 36
    assert all(torch.equal(a, b) for a, b in zip(auto_batches, plain_batches, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(auto_weights, plain_weights, strict=True))
    stats = made[0].stats
    assert stats.auto_trials == 0 and stats.sb_steps == 0 and stats.samples_scored == 0 and not stats.auto_on
    messages = auto_warnings(caught)
    assert len(messages) == 1 and "\n" not in str(messages[0].message)
    assert "runs no trial" in str(messages[0].message) and "Auto(epochs=" in str(messages[0].message)
    assert messages[0].filename == __file__  # the user's line: the one to change
    assert stats.auto_reason in str(messages[0].message)
    # told the run, the same loader is trialled
    sb, sizes = run(plain=0.01, selected=0.02)
    assert sb.stats.auto_trials == 1 and sizes[:DECISION] == trial_sizes()


def test_a_schedule_with_a_window_says_once_that_auto_trials_inside_it():
    schedule = Schedule(total_steps=640)  # the default window: start 0.5, end 0.9, every second batch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SBLoader(batches(64), Planted(), planted_loss, keep="auto", schedule=schedule)
        SBLoader(batches(64), Planted(), planted_loss, keep=settings(), schedule=Schedule(start=0.0, end=1.0,
                 interrupt=0, total_steps=640))  # fmt: skip
    assert [str(w.message) for w in auto_warnings(caught)] == [
        f"sbdata keep='auto' under {schedule!r} trials and selects only on the batches the schedule selects on "
        "(inside its window, not on its interrupt batches); to let auto decide over the whole run, drop the Schedule "
        "and pass keep=Auto(epochs=N)"
    ]


def test_a_loader_without_a_length_gets_a_streams_sizes():
    class Stream(torch.utils.data.IterableDataset):  # a DataLoader over it has __len__ that raises TypeError
        def __iter__(self):
            return iter(zip(torch.randn(64, 4), [i % 3 for i in range(64)], strict=True))

    loader = torch.utils.data.DataLoader(Stream(), batch_size=8)
    with pytest.raises(TypeError):
        len(loader)
    settings_ = SBLoader(loader, nn.Linear(4, 3), torch.nn.functional.cross_entropy, keep="auto").engine.controller
    assert settings_.settings == Auto().sized()
    assert SBLoader([], Planted(), planted_loss, keep="auto").engine.controller.settings == Auto().sized()


def test_auto_string_is_the_default_settings_and_a_fixed_keep_routes_through_the_no_op_route():
    assert SelectionEngine(OracleModel([1.0]), ce, keep="auto").controller.settings == Auto().sized()
    assert Auto().sized() == Auto(window=16, settle=48, warmup=64, every=1024)  # a stream's sizes
    assert isinstance(SelectionEngine(OracleModel([1.0]), ce, keep=0.5).controller, FixedKeep)


# ----------------------------------------------------------------------------------------------- routing
def test_the_trial_routes_windows_in_order_and_measures_after_settling():
    sb = SBLoader(batches(4), Planted(), planted_loss, keep=settings())
    controller = sb.engine.controller
    routes = [controller.route(step, B) for step in range(DECISION)]
    arms = [0, 0] + [arm for arm in ORDER for _ in range(6)] + [0] * 6
    assert [r.select for r in routes] == [arm == 1 for arm in arms]
    assert {r.keep for r in routes if r.select} == {0.25}
    # the average of window w is measured on the settling batches of window w + 1 (and after the last window)
    measured = [i for i, r in enumerate(routes) if r.measure]
    assert measured == [2 + 6 * w + o for w in range(1, 9) for o in range(2)]
    assert routes[0] == Route(False, 0.25, False)


def test_planted_win_turns_selection_on_with_the_exact_measured_speedup():
    # both arms make the same progress per batch; a selection step costs 28 against 48: 12/7 the progress per second
    sb, sizes = run(plain=0.01, selected=0.01)
    assert sizes[:DECISION] == trial_sizes()
    assert sizes[DECISION:] == [keep_count(0.25, B)] * (64 - DECISION)  # on from the decision
    stats = sb.stats
    assert stats.auto_on and stats.auto_keep == 0.25 and stats.auto_trials == 1
    assert stats.auto_speedup == pytest.approx(PER_SECOND, rel=1e-4)
    assert stats.auto_decisions[0][:3] == (DECISION, 1.0, 0.25)
    assert stats.auto_reason.startswith(f"{TRIAL_1}Decided: select, keeping 0.25 of each batch. Keeping 0.25 learned "
                                        "1.71x as fast per second as whole batches")  # fmt: skip
    assert stats.auto_trial_share == pytest.approx(48 / 64) and stats.auto_on_share == pytest.approx(8 / 64)


@pytest.mark.parametrize(
    ("selected", "speedup"),
    [
        (-0.01, -PER_SECOND),  # flipped labels: training on the hard part undoes progress
        (0.005, 0.5 * PER_SECOND),  # half the progress per batch: 0.86x per second, below 1.05
        (0.0, 0.0),  # incompressible: no progress at all
    ],
    ids=["flipped", "slower", "nothing-learnable"],
)
def test_planted_loss_keeps_selection_off_and_says_why_once(selected, speedup):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb, sizes = run(plain=0.01, selected=selected, stop_z=math.inf)  # the full trial's verdict (no early stop)
    assert sizes[DECISION:] == [B] * (64 - DECISION)  # whole batches after the trial
    stats = sb.stats
    assert not stats.auto_on and stats.auto_keep == 1.0
    assert stats.auto_speedup == pytest.approx(speedup, abs=1e-4)
    assert stats.auto_reason.startswith(f"{TRIAL_1}Decided: train on whole batches. Keeping 0.25 ")
    assert "Selection turns on only when it beats 1.05x by more than 1 standard error" in stats.auto_reason
    assert stats.auto_reason.endswith("Next trial in 2000 batches")
    assert_said_once_at_this_line(caught, stats.auto_reason)


def test_a_share_that_keeps_fewer_than_min_kept_samples_is_not_trialled_and_says_why_once():
    # keep 0.25 of 16 keeps 4: with min_kept=5 no trial runs (where selection would have paid), whole batches all along
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb, sizes = run(plain=0.01, selected=0.01, min_kept=5)
    stats = sb.stats
    assert sizes == [B] * 64 and not stats.auto_on and stats.auto_trials == 0 and stats.auto_trial_share == 0.0
    assert stats.auto_reason == (
        "Whole batches, no trial: keep 0.25 keeps 4 sample(s) of 16 per batch, fewer than min_kept=5. A step on so "
        "few samples is noise, and breaks BatchNorm. Pass Auto(keeps=...) with larger shares, or a larger batch. "
        "Next check in 2000 batches"
    )
    assert [d[:2] for d in stats.auto_decisions] == [(2.0, 0.0)]  # at the warm-up's end
    assert_said_once_at_this_line(caught, stats.auto_reason)
    sb, sizes = run(plain=0.01, selected=0.01, min_kept=4)  # 4 is enough: the trial runs and selection pays
    assert sizes[:DECISION] == trial_sizes() and sb.stats.auto_on


def test_a_selection_window_that_loses_ground_stops_the_trial_at_once():
    # flipped labels, planted: selection undoes progress. Window 1 (keep 0.25, batches 8-13) averages theta 0.045
    # against window 0's 0.055; its level is measured on window 2's settling batches (14, 15) and read a window
    # later, at batch 20: below whole batches' (every sample alike: no spread, infinitely many standard errors), so
    # the trial stops there. Selection took 12 batches instead of the full trial's 24.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb, sizes = run(plain=0.01, selected=-0.01)
    assert sizes == [B] * 8 + [keep_count(0.25, B)] * 12 + [B] * (64 - 20)
    stats = sb.stats
    assert not stats.auto_on and stats.auto_trials == 1 and stats.auto_trial_share == pytest.approx(18 / 64)
    assert [d[:2] for d in stats.auto_decisions] == [(20.0, 0.0)]
    assert stats.auto_reason.startswith(
        f"{TRIAL_1}Decided: train on whole batches, without finishing the trial: in window 2 of 8, the model trained "
        "keeping 0.25 of each batch measured "
    )
    # the next trial comes when it would have after the full trial's verdict (batch 56): 56 + 2 * 1000 - 20
    assert stats.auto_reason.endswith(
        "below whole batches' last window, past the limit of stop_z=2, so the trial stopped there to bound its harm. "
        "Next trial in 2036 batches"
    )
    assert_said_once_at_this_line(caught, stats.auto_reason)
    # on a run of 300 the next trial would come after its end (20 + 2036 >= 300): no number past the end is named
    sb, _ = run(plain=0.01, selected=-0.01, run=300)
    assert sb.stats.auto_reason.endswith("bound its harm. No trial is left in this run (280 batches left)")
    # selection that makes less progress than whole batches but gains ground is not stopped: the verdict decides
    sb, sizes = run(plain=0.01, selected=0.005)
    assert sizes[:DECISION] == trial_sizes() and sb.stats.auto_decisions[0][:2] == (DECISION, 0.0)


def test_a_trial_whose_selection_windows_would_take_too_much_of_the_run_left_is_not_run():
    # the trial's 4 selection windows are 24 loader batches; at its start (loader batch 2) a run of 194 leaves 192,
    # of which trial_share=0.125 is exactly 24: it runs; a run of 193 (191 left) is too short: whole batches all along
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb, sizes = run(plain=0.01, selected=0.01, run=193)
    stats = sb.stats
    assert sizes == [B] * 64 and not stats.auto_on and stats.auto_trials == 0 and stats.auto_trial_share == 0.0
    assert stats.auto_reason == (
        "Whole batches, no trial: a trial's selection windows (24 loader batches) would take more than "
        "trial_share=0.125 of the 191 batches left in this run of 193. Where selection hurts, the batches after a "
        "trial must repair what its selection windows did, and these are too few. Pass Auto(trial_share=...) to "
        "allow more. No check is left in this run (191 batches left)"
    )
    assert [d[:2] for d in stats.auto_decisions] == [(2.0, 0.0)]
    assert [str(w.message) for w in auto_warnings(caught)] == [f"sbdata keep='auto': {stats.auto_reason} ({LATEST})"]
    sb, sizes = run(plain=0.01, selected=0.01, run=194)
    assert sizes[:DECISION] == trial_sizes() and sb.stats.auto_on
    sb, sizes = run(plain=0.01, selected=0.01, run=193, trial_share=0.13)  # 24 <= 0.13 * 191
    assert sizes[:DECISION] == trial_sizes() and sb.stats.auto_on
    # fewer batches left than the selection windows (18 < 24): no share would allow a trial, and none is advised
    sb, _ = run(plain=0.01, selected=0.01, count=20, run=20)
    assert sb.stats.auto_reason.endswith("these are too few. No check is left in this run (18 batches left)")
    # the run's length comes through the door from a Schedule's total_steps (every loader batch routed here)
    model = Planted()
    schedule = Schedule(start=0.0, end=1.0, interrupt=0, total_steps=193)
    sb = SBLoader(batches(64), model, planted_loss, keep=settings(run=None), schedule=schedule)
    assert sb.engine.keep.auto is not None and sb.engine.keep.auto.run == 193
    assert train(sb, model, 0.01, 0.01) == [B] * 64 and sb.stats.auto_reason.startswith("Whole batches, no trial")
    bare = SelectionEngine(Planted(), planted_loss, keep=settings(run=None), schedule=schedule)  # a bare engine alike
    assert bare.keep.auto is not None and bare.keep.auto.run == 193


@pytest.mark.parametrize("measured_win_first", [False, True], ids=["off", "on"])
def test_a_trial_that_measures_nothing_leaves_the_last_verdict_standing_and_says_so(measured_win_first):
    """From batch ``nan_from`` every loss is NaN (kept by ``nan_policy="keep"``): a trial then has no finite quality
    to measure, and decides nothing. Selection that a first trial measured as a win stays on (as the exit test keeps
    it through a noisy trial); training that never measured a win stays on whole batches."""
    model, nan_from = Planted(), 60 if measured_win_first else 0
    seen = 0

    def loss(outputs: torch.Tensor, targets: torch.Tensor, reduction: str = "none") -> torch.Tensor:
        return outputs * (math.nan if seen >= nan_from else 1.0)

    sb = SBLoader(batches(200), model, loss, keep=settings(every=20), nan_policy="keep")
    for seen, out in enumerate(sb):  # noqa: B007 (read by loss)
        with torch.no_grad():
            model.theta += 0.01
    decisions = [(int(step), on) for step, on, *_ in sb.stats.auto_decisions]
    standing = "Selection stays on at keep 0.25" if measured_win_first else "Training stays on whole batches"
    assert sb.stats.auto_on is measured_win_first and decisions[-1][1] == float(measured_win_first)
    trial = TRIAL_1.replace("Trial 1", f"Trial {sb.stats.auto_trials}")
    assert sb.stats.auto_reason.startswith(f"{trial}Could not decide: a trial window measured")
    assert f". {standing}. Next trial in 20 batches" in sb.stats.auto_reason
    if measured_win_first:
        assert decisions[0] == (DECISION, 1.0) and sb.stats.auto_trials >= 2


def test_a_noisy_trial_that_cannot_tell_stays_plain():
    # plain and selection alternate between big gains and losses: no arm's rate is known to a standard error
    model = Planted()
    sb = SBLoader(batches(64), model, planted_loss, keep=settings())
    noise = iter((0.2 * torch.randn(64, generator=torch.Generator().manual_seed(0))).tolist())
    for out in sb:
        with torch.no_grad():
            model.theta += next(noise) + (0.01 if out[0].shape[0] == B else 0.011)
    assert not sb.stats.auto_on and "standard error" in sb.stats.auto_reason


@pytest.mark.parametrize("stop_z", [math.inf, 2.0], ids=["no-early-stop", "early-stop"])
def test_retrials_recheck_the_decision(stop_z):
    # selection pays until batch 80, then undoes progress: the exit test (from batch 56 + 2 * 40) turns it off at
    # its verdict (54 batches after it starts). Its selection windows lose ground, but selection is what the run
    # does while it is on: the early stop is for trials while it is off, and does not cut this one short
    model = Planted()
    sb = SBLoader(batches(240), model, planted_loss, keep=settings(every=40, stop_z=stop_z))
    for seen, out in enumerate(sb):
        gain = 0.01 if out[0].shape[0] == B else (0.01 if seen < 80 else -0.01)
        with torch.no_grad():
            model.theta += gain
    decisions = [(step, on) for step, on, *_ in sb.stats.auto_decisions]
    assert decisions[0] == (DECISION, 1.0) and decisions[1] == (DECISION + 80 + DECISION - 2, 0.0)
    assert sb.stats.auto_reason.startswith(
        "Trial 2 compared whole batches with keeping 0.25 of each batch, in "
        "alternating windows of 6 loader batches. Decided: train on whole batches"
    )
    assert sb.stats.auto_trials >= 2


def test_the_exit_test_keeps_a_measured_win_unless_selection_measures_below_plain():
    # selection pays by 1.71x per second until batch 90, then makes 0.6x plain's progress per batch (1.03x per
    # second: not a win by the entry's bar of 1.05x, not below plain: it stays on), then from batch 180 none (below
    # plain: off)
    model = Planted()
    sb = SBLoader(batches(300), model, planted_loss, keep=settings(every=20))
    reasons: list[str] = []
    for seen, out in enumerate(sb):
        gain = 0.01 if out[0].shape[0] == B else (0.01 if seen < 90 else 0.006 if seen < 180 else 0.0)
        with torch.no_grad():
            model.theta += gain
        if sb.stats.auto_reason and sb.stats.auto_reason not in reasons:
            reasons.append(sb.stats.auto_reason)
    decisions = [(int(step), on) for step, on, *_ in sb.stats.auto_decisions]
    # on at 56; a repeated verdict doubles the wait: the exit tests start 40, then 80 batches after a decision
    assert decisions[:3] == [(DECISION, 1.0), (DECISION + 40 + 54, 1.0), (DECISION + 40 + 54 + 80 + 54, 0.0)]
    assert reasons[0].startswith(f"{TRIAL_1}Decided: select, keeping 0.25")
    trial = TRIAL_1.replace("Trial 1", "Trial {}")
    assert reasons[1].startswith(f"{trial.format(2)}Decided: keep selecting at keep 0.25. Keeping 0.25 learned 1.03x")
    assert reasons[2].startswith(f"{trial.format(3)}Decided: train on whole batches. Keeping 0.25 learned 0.00x")


def test_each_verdict_for_whole_batches_in_a_row_doubles_the_wait():
    model = Planted()
    sb = SBLoader(batches(300), model, planted_loss, keep=settings(every=10, run=10_000))
    sizes = train(sb, model, plain=0.01, selected=-0.01)  # selection always undoes progress
    steps = [step for step, *_ in sb.stats.auto_decisions]
    # each trial stops 18 batches after it starts (its first selection window's level lands below whole batches', a
    # window after it was made); trial n + 1 starts 20, 40, 80 batches after the batch where trial n's verdict
    # would have landed (54 after its start): trials from 2, 76 and 170, stopped at 20, 94 and 188, the next at 304
    assert steps == [2 + 18, 2 + 54 + 20 + 18, 2 + 54 + 20 + 54 + 40 + 18]
    assert all(on == 0.0 for _, on, *_ in sb.stats.auto_decisions)
    assert sb.stats.auto_reason.endswith(f"Next trial in {304 - 188} batches") and len(sizes) == 300


def test_measurement_has_no_side_effects_on_the_model_or_the_rngs():
    model = Planted()
    sb = SBLoader(batches(64), model, planted_loss, keep=settings())
    before = (torch.get_rng_state(), {k: v.clone() for k, v in model.state_dict().items()})
    outputs = list(sb)  # no training: the trial measures, averages and decides on a model that never moves
    assert len(outputs) == 64 and torch.equal(torch.get_rng_state(), before[0])
    assert all(torch.equal(v, before[1][k]) for k, v in model.state_dict().items())
    shadow = sb.engine.controller.shadow
    assert shadow is not model and not any(p.requires_grad for p in shadow.parameters())
    # the live model runs the scoring pass of the 24 selection steps only; the averaged copy measures 16 batches
    assert model.calls == 24 and shadow.calls == 16
    assert sb.stats.samples_scored == 24 * B + 16 * B


def test_a_model_that_cannot_be_copied_is_refused_naming_the_fix():
    class Uncopyable(Planted):
        def __deepcopy__(self, memo: dict) -> Any:
            raise TypeError("cannot pickle '_thread.lock' object")

    sb = SBLoader(batches(64), Uncopyable(), planted_loss, keep=settings())
    with pytest.raises(RuntimeError, match=r"copy.deepcopy\(Uncopyable\) failed: cannot pickle.*pass a fixed keep="):
        list(sb)


def test_composes_with_the_schedule():
    model = Planted()
    sb = SBLoader(batches(140), model, planted_loss, keep=settings(), schedule=Schedule(interrupt=2))
    sizes = train(sb, model, 0.01, 0.01)
    assert sizes[1::2] == [B] * 70  # the schedule's plain steps stay plain and are not routed
    assert sizes[0::2][:DECISION] == trial_sizes() and set(sizes[0::2][DECISION:]) == {4}


def test_pooled_layout_emits_fixed_size_batches():
    model = Planted()
    sb = SBLoader(batches(64), model, planted_loss, keep=settings(), batch_size=8)
    sizes = train(sb, model, 0.01, 0.02)  # an output of 8 holds two loader batches' picks: 0.01 per loader batch
    assert sb.stats.auto_on and set(sizes) == {B, 8}
    assert sb.stats.auto_speedup == pytest.approx(PER_SECOND, rel=0.05)  # the pool's lag blurs the windows


def test_live_costs_from_a_fixed_clock():
    ticks = iter(range(10**6))
    clock = lambda: float(next(ticks))  # noqa: E731  every call one second later: each timed call lasts 1 s
    model = Planted()
    sb = SBLoader(batches(64), model, planted_loss, keep=settings(costs=None, clock=clock))
    train(sb, model, 0.01, 0.01)
    costs = sb.engine.controller.meter.table()
    # every scoring call lasts 1 s, timed at 16 only (a line through the origin); every training step 1 s, at 16
    # and at 4 (all fixed cost): a selection step (score 16 + train 4) costs twice a plain one, and the same
    # progress per batch is 0.5x per second
    assert costs == CostTable(score_per_sample=1 / 16, train_per_sample=0.0, score_fixed=0.0, train_fixed=1.0)
    assert not sb.stats.auto_on and sb.stats.auto_speedup == pytest.approx(0.5, rel=1e-4)


# ----------------------------------------------------------------------------------------------- state
def test_exact_resume_before_inside_and_after_a_trial():
    def make() -> SBLoader:
        return SBLoader(batches(30), Planted(), planted_loss, keep=settings(every=20), policy="rank", generator=3)

    reference = check_save_load(make, epochs=3, at=[1, 2, 3, 5, 8, 13, 21, 34, 50, 53, 55, 56, 57, 70, 89])
    assert sum(map(len, reference)) == 90


def test_exact_resume_across_verdicts_for_whole_batches_keeps_the_doubling_wait():
    # a model that never moves: every trial chooses whole batches, so trial n + 1 waits 4 * 2**n batches; decisions at
    # 56, 118 and 188 (the next at 274, past the run), so a state saved between them must carry the run of verdicts
    def make() -> SBLoader:
        return SBLoader(batches(30), Planted(), planted_loss, keep=settings(every=4))

    reference = check_save_load(make, epochs=9, at=[57, 100, 119, 150, 189, 230], initial=False)
    steps = [step for step, *_ in _decisions(make, epochs=9)]
    assert steps == [56, 118, 188]
    assert sum(map(len, reference)) == 270


def _decisions(make: Callable[[], SBLoader], epochs: int) -> tuple[tuple[float, ...], ...]:
    sb = make()
    for _ in range(epochs):
        for _ in sb:
            pass
    return sb.stats.auto_decisions


def test_state_loads_weights_only_and_holds_the_trial():
    sb = SBLoader(batches(64), Planted(), planted_loss, keep=settings())
    iterator = iter(sb)
    for _ in range(20):  # inside window 3: two windows measured, the third window averaging
        next(iterator)
    state = roundtrip(sb.state_dict())["engine"]["auto"]
    assert state["routed"] == 20 and state["trial_start"] == 2 and len(state["windows"]) == 2
    assert state["shadow"] is not None and state["averaged"] == 20 - 2 - 2 * 6 - 2
    assert state["sums"].dtype == torch.float64


def test_a_state_saved_with_another_keep_mode_refuses_to_load():
    fixed = SBLoader(batches(2), OracleModel([1.0] * 32), ce, keep=0.5)
    auto = SBLoader(batches(2), OracleModel([1.0] * 32), ce, keep="auto")
    with pytest.raises(ValueError, match=r"saved with keep=None but this loader has keep='auto\(keeps=\(0.25,\)"):
        auto.load_state_dict(roundtrip(fixed.state_dict()))
    with pytest.raises(ValueError, match=r"saved with keep='auto\(.*\)' but this loader has keep=None"):
        fixed.load_state_dict(roundtrip(auto.state_dict()))


def test_a_state_saved_with_other_bounds_on_a_trials_harm_refuses_to_load():
    # the bounds are in the options fingerprint (Auto.describe): a resumed run decides under the settings it saved
    saved = SBLoader(batches(2), Planted(), planted_loss, keep=settings(run=100)).state_dict()
    for other in ({"run": 200}, {"trial_share": 0.25}, {"stop_z": 3.0}):
        name, value = next(iter(other.items()))
        loader = SBLoader(batches(2), Planted(), planted_loss, keep=settings(**{"run": 100, **other}))
        with pytest.raises(
            ValueError, match=rf"saved with keep='auto\(.*\)' but this loader has keep='auto\(.*{name}={value}"
        ):
            loader.load_state_dict(roundtrip(saved))
    SBLoader(batches(2), Planted(), planted_loss, keep=settings(run=100)).load_state_dict(roundtrip(saved))


# ----------------------------------------------------------------------------------------------- front ends
def front_end_run(make: Callable[[Planted], Iterable[Any]]) -> tuple[list[int], Any]:
    model = Planted()
    outputs = make(model)
    return train(outputs, model, 0.01, 0.01), model


def test_every_front_end_decides_alike():
    data = batches(64)
    made: dict[str, Any] = {}

    def loader(model: Planted) -> Iterable[Any]:
        made["SBLoader"] = SBLoader(data, model, planted_loss, keep=settings())
        return made["SBLoader"]

    def node(model: Planted) -> Iterable[Any]:
        made["SBSelector"] = SBSelector(IterableWrapper(data), model, planted_loss, keep=settings())
        return Loader(made["SBSelector"])

    def stage(model: Planted) -> Iterable[Any]:
        made["sb_select"] = sb_select(model, planted_loss, keep=settings())
        return made["sb_select"](iter(data))

    def collator(model: Planted) -> Iterable[Any]:
        made["SBCollator"] = SBCollator(model, planted_loss, keep=settings(), collate_fn=lambda batch: batch)
        return (made["SBCollator"](batch) for batch in data)

    runs = {name: front_end_run(make)[0] for name, make in
            {"SBLoader": loader, "SBSelector": node, "sb_select": stage, "SBCollator": collator}.items()}  # fmt: skip
    assert all(sizes == runs["SBLoader"] for sizes in runs.values())
    decisions = {name: front.stats.auto_decisions for name, front in made.items()}
    assert len({str(d) for d in decisions.values()}) == 1 and decisions["SBLoader"][0][1] == 1.0


def test_accelerate_wrap_passes_keep_auto_through():
    accelerate = pytest.importorskip("accelerate")
    from sbdata.integrations.accelerate import wrap

    accelerator = accelerate.Accelerator(cpu=True)
    model = accelerator.prepare(Planted())
    sb = wrap(accelerator, batches(64), model, planted_loss, keep=settings())
    sizes = train(sb, model, 0.01, 0.01)
    assert sizes[:DECISION] == trial_sizes() and sb.stats.auto_on


# ----------------------------------------------------------------------------------------------- synchronisation
def test_no_sync_per_step_with_keep_auto():
    from tests.checks.test_syncs import LOSSES, SyncCounter
    from tests.checks.test_syncs import batches as sync_batches

    counter = SyncCounter()
    epochs = [sync_batches(e, keys=False) for e in range(4)]  # no list column: its copy is allowed per SB step
    for epoch in epochs:
        for batch in epoch:
            counter.host.update((id(v), v) for v in batch.values())
    for pooled in ({"batch_size": 8}, {}):
        auto = Auto(keeps=(0.5,), window=1, settle=1, cycles=1, warmup=1, every=2, costs=FE, run=1000)
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
        assert steps > 8 and sb.stats.auto_trials >= 1


# ----------------------------------------------------------------------------------------------- distributed
def decide_on_rank(rank: int) -> dict[str, Any]:
    """On one of 2 gloo ranks: selection gains on rank 0 and loses on rank 1, so only the pooled sums decide."""
    model = Planted()
    sb = SBLoader(batches(64), model, planted_loss, keep=settings())
    sizes = train(sb, model, 0.01, 0.02 if rank == 0 else -0.01)
    return {"sizes": sizes, "history": sb.stats.auto_decisions, "reason": sb.stats.auto_reason}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ranks_decide_alike():
    first, second = launch_ranks(decide_on_rank, world=2, timeout=120)  # 120 s: a hang guard only
    assert first["history"] == second["history"] and first["sizes"] == second["sizes"]
    assert first["reason"] == second["reason"]
    # pooled: selection gains (0.02 - 0.01) / 2 = 0.005 per batch against plain's 0.01: half, 0.86x per second
    assert first["history"][0][1] == 0.0 and first["history"][0][4] == pytest.approx(0.5 * PER_SECOND, rel=1e-4)


def stop_on_rank(rank: int) -> dict[str, Any]:
    """On one of 2 gloo ranks: selection loses ground fast on rank 0 (-0.05 a batch) and gains on rank 1 (+0.01)."""
    model = Planted()
    sb = SBLoader(batches(64), model, planted_loss, keep=settings())
    sizes = train(sb, model, 0.01, -0.05 if rank == 0 else 0.01)
    return {"sizes": sizes, "history": sb.stats.auto_decisions, "reason": sb.stats.auto_reason}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ranks_stop_a_trial_alike():
    # window 1's averaged theta is -0.095 on rank 0 and 0.115 on rank 1 (levels -1.095 and -0.885 over 32 samples
    # each: -0.99, standard error 0.013) against whole batches' 0.055 on both (-0.945): 3.4 standard errors below,
    # so both ranks stop at batch 20, although rank 1 alone gains ground
    first, second = launch_ranks(stop_on_rank, world=2, timeout=120)  # 120 s: a hang guard only
    assert first["sizes"] == second["sizes"] == [B] * 8 + [keep_count(0.25, B)] * 12 + [B] * 44
    assert [d[:2] for d in first["history"]] == [d[:2] for d in second["history"]] == [(20.0, 0.0)]
    assert first["reason"] == second["reason"] and "without finishing the trial: in window 2 of 8" in first["reason"]


def skip_on_rank(rank: int) -> dict[str, Any]:
    """On one of 2 gloo ranks: rank 1's batches hold 8 samples (keep 0.25 keeps 2, fewer than min_kept=3), rank 0's
    16 (4 kept): neither rank trials."""
    model = Planted()
    count = B if rank == 0 else 8
    data = [oracle_batch(range(i * count, (i + 1) * count)) for i in range(64)]
    sb = SBLoader(data, model, planted_loss, keep=settings(min_kept=3))
    sizes = train(sb, model, 0.01, 0.01)
    return {"sizes": sizes, "history": sb.stats.auto_decisions, "reason": sb.stats.auto_reason}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ranks_skip_a_trial_alike_when_one_keeps_too_few():
    first, second = launch_ranks(skip_on_rank, world=2, timeout=120)  # 120 s: a hang guard only
    assert first["sizes"] == [B] * 64 and second["sizes"] == [8] * 64  # whole batches on both
    assert [d[:3] for d in first["history"]] == [d[:3] for d in second["history"]] == [(2.0, 0.0, 0.25)]
    what = "Whole batches, no trial: keep 0.25 keeps fewer than min_kept=3 samples per batch on 1 of 2 ranks"
    assert first["reason"].startswith(f"{what} (here 4 of 16). A step on so few samples is noise")
    assert second["reason"].startswith(f"{what} (here 2 of 8)")


def test_auto_is_exported():
    assert sbdata.Auto is Auto and sbdata.CostTable is CostTable


@pytest.mark.slow
def test_transformers_trainer_passes_keep_auto_through(tmp_path):
    pytest.importorskip("transformers")
    from tests.integrations.test_transformers import BATCH, make_trainer

    # the Trainer tells auto its 12 loader batches; trial_share=1 lets a trial take what the run has left
    auto = Auto(keeps=(0.5,), window=1, settle=1, cycles=1, warmup=1, every=2, costs=FE, trial_share=1.0)
    trainer = make_trainer(tmp_path, sb_options={"keep": auto})
    trainer.train()
    assert trainer.sb.engine.keep.auto.run == 12
    stats = trainer.sb.stats
    assert stats.auto_trials >= 1 and stats.steps == len(trainer.seen)  # a trial ran, every batch trained
    assert {len(step) for step in trainer.seen} <= {BATCH, keep_count(0.5, BATCH)}


def test_the_live_meter_takes_medians_and_ignores_sizes_timed_too_rarely():
    from sbdata.auto._meter import MIN_CALLS, CostMeter

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
    from sbdata.auto._meter import MIN_SHARE, CostMeter

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
