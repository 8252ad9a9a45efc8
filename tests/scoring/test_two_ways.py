"""One batch scored two ways: the kept sets' agreement and the median ratio are known answers, and both passes leave
the model as it was (modes, BatchNorm statistics, RNG, no gradients)."""

import math

import pytest
import torch
import torch.nn.functional as F

from sbdata.scoring import Scorer, compare

CPU = torch.device("cpu")


def test_the_agreement_is_the_shared_share_of_the_two_kept_sets():
    first = torch.tensor([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    assert compare(first, first, 0.5).agreement.item() == 1.0
    # top 4 under the second: 0, 1, 4, 5 -> shares 0 and 1 with the first's 0..3
    second = torch.tensor([8.0, 7.0, 1.0, 2.0, 6.0, 5.0, 3.0, 4.0])
    two = compare(first, second, 0.5)
    assert two.agreement.item() == pytest.approx(2 / 4)
    assert compare(first, -first, 0.25).agreement.item() == 0.0  # reversed: top-2 and bottom-2 are disjoint
    assert compare(first, second, 1.0).agreement.item() == 1.0  # every sample kept either way
    assert two.agreement.dtype == torch.float32 and two.agreement.dim() == 0


def test_the_ratio_of_the_means_and_non_finite_scores():
    first = torch.tensor([2.0, 4.0, 30.0, 1.0, 5.0, float("inf")])
    second = torch.tensor([1.0, 1.0, 1.0, 1.0, 6.0, 1.0])
    assert compare(first, second, 0.4).ratio.item() == pytest.approx(42 / 10)  # the finite pairs' means: 8.4 / 2
    nan_first = torch.tensor([1.0, float("nan"), 3.0, 2.0])  # a NaN ranks highest, as nan_policy="keep"
    assert compare(nan_first, torch.tensor([0.0, 9.0, 3.0, 1.0]), 0.5).agreement.item() == 1.0
    empty = compare(torch.empty(0), torch.empty(0), 0.5)
    assert empty.agreement.item() == 1.0 and math.isnan(empty.ratio.item())


@pytest.mark.parametrize(
    ("first", "second", "keep", "message"),
    [
        (torch.ones(3), torch.ones(4), 0.5, r"two \(N,\) score vectors"),
        (torch.ones(3, 2), torch.ones(3, 2), 0.5, r"two \(N,\) score vectors"),
        (torch.ones(3), torch.ones(3), 0.0, r"keep must be a share in \(0, 1\]"),
    ],
)
def test_bad_input_is_refused(first, second, keep, message):
    with pytest.raises(ValueError, match=message):
        compare(first, second, keep)


class Planted(torch.nn.Module):
    """Logits whose low-precision pass is perturbed: under autocast the class-0 logit is reversed along the batch,
    so the rankings of the losses flip (a scorer planted to disagree)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        logits = x * self.scale
        if torch.is_autocast_enabled("cpu"):
            logits = logits.flip(0)
        return logits


def test_two_scorers_on_one_batch_and_the_model_left_as_it_was():
    torch.manual_seed(0)
    x = torch.randn(16, 4)
    y = torch.zeros(16, dtype=torch.long)
    scorer = Scorer(F.cross_entropy, autocast_dtype=torch.bfloat16)
    full = scorer.replace(autocast_dtype=None)
    assert full.autocast_dtype is None and scorer.autocast_dtype is torch.bfloat16 and full.score == "loss"
    two = compare(scorer(Planted(), x, y, 16, CPU), full(Planted(), x, y, 16, CPU), 0.25)
    expected = F.cross_entropy(x, y, reduction="none")
    assert torch.allclose(two.second, expected)
    assert torch.allclose(two.first, F.cross_entropy(x.flip(0), y, reduction="none"), atol=0.05)
    assert two.agreement.item() < 0.5  # the planted flip moves the kept set
    same = compare(full(Planted(), x, y, 16, CPU), full(Planted(), x, y, 16, CPU), 0.25)
    assert same.agreement.item() == 1.0 and same.ratio.item() == pytest.approx(1.0)
    with pytest.raises(TypeError, match="Scorer.replace takes"):
        scorer.replace(mode="train")


def test_eval_against_batch_statistics_restores_batchnorm_and_rng():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3)).train()
    with torch.no_grad():
        model[1].running_mean.fill_(-5.0)  # far-off running statistics: eval-mode losses far above train-mode ones
        model[1].running_var.fill_(1e-3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    rng = torch.get_rng_state()
    scorer = Scorer(F.cross_entropy, score_mode="eval")
    for other in ("batch", "train"):
        two = compare(scorer(model, x, y, 32, CPU), scorer.replace(score_mode=other)(model, x, y, 32, CPU), 0.5)
        assert two.ratio.item() > 3
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and model.training
    assert torch.equal(torch.get_rng_state(), rng) and all(p.grad is None for p in model.parameters())
    assert not two.first.requires_grad and not two.second.requires_grad
