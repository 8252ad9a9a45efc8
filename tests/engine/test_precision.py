"""The live check of ``autocast_dtype=`` scoring: a scorer planted to disagree is caught once, named, and replaced by
full precision for the rest of the run (and after a resume); one that agrees is left alone. Known answers: the oracle
model's losses are its table, so top-k's kept sets are known both ways."""

import warnings

import pytest
import torch

from sbdata import SBLoader
from tests.helpers import OracleModel, ce, ids_of, oracle_batch, roundtrip

TABLE = [float(i % 16) / 4 + 0.1 for i in range(128)]  # distinct within each batch of 16: top-k is known


class Disagrees(OracleModel):
    """Under autocast the losses are reversed within the table's range (the hardest become the easiest): top-k
    keeps disjoint sets in low and full precision."""

    def forward(self, x):
        if torch.is_autocast_enabled("cpu"):
            ids = x[:, 0].round().long()
            flipped = self.table.max() + self.table.min() - self.table[ids]
            z = torch.log(torch.expm1(flipped)) * self.scale
            return torch.stack([torch.zeros_like(z), z], dim=1)
        return super().forward(x)


def batches(count=8, size=16):
    return [oracle_batch(range(i * size, (i + 1) * size)) for i in range(count)]


def top(ids, keep=0.25):
    """The ids top-k keeps at full precision: the highest table losses."""
    return sorted(sorted(ids, key=lambda i: -TABLE[i])[: int(len(ids) * keep)])


def test_a_disagreeing_low_precision_scorer_warns_once_and_falls_back():
    loader = SBLoader(batches(), Disagrees(TABLE), ce, keep=0.25, autocast_dtype=torch.bfloat16,
                      autocast_check_every=2)  # fmt: skip
    kept = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for out in loader:
            kept.append(sorted(ids_of(out)))
    said = [w for w in caught if "autocast_dtype=torch.bfloat16" in str(w.message)]
    assert len(said) == 1 and "autocast_check_every=0" in str(said[0].message)
    assert said[0].filename == __file__  # at the user's line
    stats = loader.stats
    assert stats.precision_checks == 1 and stats.precision_agreement == 0.0 and stats.precision_fallback
    assert stats.samples_checked == 16  # one full-precision pass of the checked batch
    assert stats.samples_scored == 8 * 16  # the check's samples are counted apart
    # the first two SB steps scored in (planted) low precision and kept the easiest; from the check on, full precision
    assert kept[0] == sorted(sorted(range(16), key=lambda i: TABLE[i])[:4])
    assert kept[2:] == [top(range(i * 16, (i + 1) * 16)) for i in range(2, 8)]


def test_an_agreeing_scorer_is_checked_and_left_alone():
    loader = SBLoader(batches(), OracleModel(TABLE), ce, keep=0.5, autocast_dtype=torch.bfloat16,
                      autocast_check_every=3)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = [sorted(ids_of(out)) for out in loader]
    stats = loader.stats
    assert stats.precision_checks == 2 and stats.precision_agreement == 1.0 and not stats.precision_fallback
    assert stats.samples_checked == 2 * 16
    assert kept == [top(range(i * 16, (i + 1) * 16), 0.5) for i in range(8)]


@pytest.mark.parametrize(
    "options", [{"autocast_check_every": 1}, {"autocast_dtype": torch.bfloat16, "autocast_check_every": 0}]
)
def test_without_autocast_or_with_the_check_off_nothing_is_scored_twice(options):
    loader = SBLoader(batches(), Disagrees(TABLE), ce, keep=0.25, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(loader)
    assert loader.stats.samples_checked == 0 and loader.stats.precision_checks == 0


def test_the_fallback_and_the_running_mean_survive_a_resume():
    model = Disagrees(TABLE)
    loader = SBLoader(batches(), model, ce, keep=0.25, autocast_dtype=torch.bfloat16, autocast_check_every=2)
    it = iter(loader)
    with pytest.warns(UserWarning, match="autocast_check_every=0"):
        for _ in range(3):
            next(it)
    state = roundtrip(loader.state_dict())
    resumed = SBLoader(batches(), model, ce, keep=0.25, autocast_dtype=torch.bfloat16, autocast_check_every=2)
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning: it fell back before the state was saved
        kept = [sorted(ids_of(out)) for out in resumed]
    assert kept == [top(range(i * 16, (i + 1) * 16)) for i in range(3, 8)]  # full precision from the start
    stats = resumed.stats
    assert stats.precision_fallback and stats.precision_checks == 1 and stats.precision_agreement == 0.0
    assert stats.samples_checked == 16


@pytest.mark.parametrize("every", [-1, 1.5, True])
def test_a_bad_check_interval_is_refused_naming_the_option(every):
    with pytest.raises(ValueError, match="autocast_check_every must be an int >= 0"):
        SBLoader(batches(), OracleModel(TABLE), ce, autocast_dtype=torch.bfloat16, autocast_check_every=every)
