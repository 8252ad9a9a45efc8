"""The scoring-mode check at ``observe``, for a model scored in eval mode (``score_mode="eval"``): a BatchNorm model
whose running statistics are planted far off warns once, naming the default ``score_mode="batch"``; one whose
statistics match, a model without running statistics, and the modes that score with the batch's own statistics
(``"batch"``, the default, and ``"train"``) are left alone. Known answers: the planted statistics make every
eval-mode loss large."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from sbdata import SBLoader
from tests.helpers import roundtrip


def data(count=8, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count * size, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return [(x[i : i + size], y[i : i + size]) for i in range(0, count * size, size)]


def bn_model(planted: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 2))  # fmt: skip
    if planted:  # running statistics far from any batch's: eval-mode activations blow up
        with torch.no_grad():
            model[1].running_mean.fill_(-5.0)
            model[1].running_var.fill_(1e-3)
    else:  # running statistics set to the data's own: eval and train mode agree
        with torch.no_grad():
            h = model[0](torch.cat([x for x, _ in data()]))
            model[1].running_mean.copy_(h.mean(0))
            model[1].running_var.copy_(h.var(0))
    return model.train()


def train(loader, model, observe=True):
    """The user's loop: per-sample training losses, and observe() with them (no optimizer step: the model stays)."""
    for x, y in loader:
        losses = F.cross_entropy(model(x), y, reduction="none")
        if observe:
            loader.observe((x, y), losses)


def test_far_off_running_statistics_warn_once_naming_the_fix():
    model = bn_model(planted=True)
    loader = SBLoader(data(), model, F.cross_entropy, keep=0.5, score_mode="eval")
    with pytest.warns(UserWarning, match='Pass score_mode="batch"') as caught:
        train(loader, model)
    said = [w for w in caught if "score_mode" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__  # once, at the user's line
    stats = loader.stats
    assert stats.score_mode_checks == 3 and stats.score_mode_ratio > 3
    assert stats.samples_checked == 3 * 16  # three observed batches of 16 kept samples, scored once more


@pytest.mark.parametrize(
    ("planted", "options"), [(False, {"score_mode": "eval"}), (True, {"score_mode": "train"}), (True, {})]
)  # fmt: skip
def test_matching_statistics_or_batch_statistics_scoring_do_not_warn(planted, options):
    model = bn_model(planted)
    loader = SBLoader(data(), model, F.cross_entropy, keep=0.5, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if options.get("score_mode") != "eval":  # never compared, and without a cache nothing else uses the losses
            with pytest.raises(ValueError, match="drop the observe"):
                train(loader, model)
        else:
            train(loader, model)
    checks = loader.stats.score_mode_checks
    assert checks == (3 if options.get("score_mode") == "eval" else 0)
    if checks:
        assert loader.stats.score_mode_ratio == pytest.approx(1.0, abs=0.2)


def test_a_model_without_running_statistics_is_not_checked():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 2)).train()
    loader = SBLoader(data(), model, F.cross_entropy, keep=0.5, score_mode="eval")
    with pytest.raises(ValueError, match="drop the observe"):  # without a cache nothing would use the losses
        train(loader, model)
    assert loader.stats.score_mode_checks == 0 and loader.stats.samples_checked == 0


def test_the_check_survives_a_resume_and_does_not_warn_twice():
    model = bn_model(planted=True)
    loader = SBLoader(data(), model, F.cross_entropy, keep=0.5, score_mode="eval")
    it = iter(loader)
    with pytest.warns(UserWarning, match="score_mode"):
        for _ in range(3):
            x, y = next(it)
            loader.observe((x, y), F.cross_entropy(model(x), y, reduction="none"))
    state = roundtrip(loader.state_dict())
    resumed = SBLoader(data(), model, F.cross_entropy, keep=0.5, score_mode="eval")
    resumed.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(resumed, model)
    assert resumed.stats.score_mode_checks == 3  # no checks left after the resume
