"""policy="importance" (ImportanceDraw) and score="gradnorm": known answers, unbiasedness, no side effects, and
every front end resuming exactly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sbdata import ImportanceDraw, LossCache, SBLoader, SelectionEngine, keep_count
from sbdata.policies import POLICIES
from sbdata.policies._sampling import FLOOR, importance_log_weights
from sbdata.scoring import Scorer, _gradnorm
from sbdata.scoring._gradnorm import autograd_gradnorm, closed_form_ignore_index, cross_entropy_gradnorm
from tests.checks.test_syncs import SyncCounter
from tests.helpers import (
    OracleModel,
    ce,
    ids_of,
    oracle_batch,
    roundtrip,
)

CPU = torch.device("cpu")
LOSSES = [0.3, 2.5, 0.1, 1.7, 0.9, 3.2, 0.4, 2.2, 1.1, 0.6, 2.9, 0.2, 1.4, 0.8, 2.0, 0.5, 1.9, 0.7]


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def oracle_gradnorm(losses) -> torch.Tensor:
    """The oracle's logits are [0, z] with target 0 and loss softplus(z): ||softmax - onehot|| = sqrt(2) sigmoid(z)
    and sigmoid(z) = 1 - exp(-loss), so its gradient norm is sqrt(2) (1 - exp(-loss))."""
    return math.sqrt(2) * (1 - torch.exp(-torch.as_tensor(losses, dtype=torch.float32)))


# ----------------------------------------------------------------------------------------------- the shares
def test_shares_are_proportional_to_the_planted_scores():
    shares = importance_log_weights(torch.tensor([1.0, 2.0, 3.0, 4.0])).exp()
    torch.testing.assert_close(shares, torch.tensor([0.1, 0.2, 0.3, 0.4]))


def test_smoothing_mixes_in_a_uniform_share():
    shares = importance_log_weights(torch.tensor([1.0, 2.0, 3.0, 4.0]), smoothing=0.5).exp()
    torch.testing.assert_close(shares, 0.5 * torch.tensor([0.1, 0.2, 0.3, 0.4]) + 0.5 / 4)
    torch.testing.assert_close(
        importance_log_weights(torch.tensor([0.0, 9.0]), smoothing=1.0).exp(), torch.full((2,), 0.5)
    )


def test_zero_negative_and_non_finite_scores_get_the_documented_shares():
    scores = torch.tensor([0.0, -1.0, float("nan"), float("-inf"), float("inf"), 2.0])
    shares = importance_log_weights(scores).exp()
    # NaN, -inf, 0 and negative count as 0 (the floor); +inf as the largest finite score (2.0)
    torch.testing.assert_close(shares, torch.tensor([FLOOR / 6] * 4 + [0.5, 0.5]))
    assert torch.isfinite(importance_log_weights(scores)).all()
    uniform = importance_log_weights(torch.tensor([0.0, float("nan"), -3.0])).exp()  # nothing positive: uniform
    torch.testing.assert_close(uniform, torch.full((3,), 1 / 3))
    torch.testing.assert_close(importance_log_weights(torch.tensor([3, 1])).exp(), torch.tensor([0.75, 0.25]))


def test_select_neither_fails_nor_loses_its_count_on_non_finite_scores():
    scores = torch.tensor([float("nan"), float("inf"), 1.0, float("-inf"), 0.0, float("inf")])
    for keep in (0.2, 0.5, 1.0):
        selection = ImportanceDraw().select(scores, keep, seeded(0))
        assert selection.index.shape == (keep_count(keep, 6),)
        assert torch.equal(selection.index, torch.sort(selection.index).values)
        assert ((selection.prob > 0) & (selection.prob <= 1)).all()
    assert ImportanceDraw().select(torch.full((4,), float("nan")), 0.5, seeded(0)).index.shape == (2,)


def test_smoothing_is_validated():
    for bad in (-0.1, 1.5, "0.1", True):
        with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\]"):
            ImportanceDraw(smoothing=bad)
    assert POLICIES["importance"] is ImportanceDraw
    assert ImportanceDraw.fixed_count and ImportanceDraw.weighted
    assert repr(ImportanceDraw(0.1)) == "ImportanceDraw(smoothing=0.1)"


# ----------------------------------------------------------------------------------------------- the draws
def successive_inclusion(shares: np.ndarray, k: int) -> np.ndarray:
    """Exact inclusion probabilities of k successive draws without replacement, each proportional to the shares
    left (numpy's choice(replace=False, p=shares)), by enumerating every ordered sequence."""
    inclusion = np.zeros(len(shares))
    for sequence in itertools.permutations(range(len(shares)), k):
        p, left = 1.0, 1.0
        for item in sequence:
            p *= shares[item] / left
            left -= shares[item]
        inclusion[list(sequence)] += p
    return inclusion


SCORES = torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0, 8.0])


@pytest.mark.parametrize("seed", [0, 1])
def test_one_draw_is_proportional_to_the_score(seed):
    draws, policy, gen = 6000, ImportanceDraw(), seeded(seed)
    counts = np.zeros(6)
    for _ in range(draws):
        counts[policy.select(SCORES, 1 / 6, gen).index.numpy()] += 1  # keep_count(1/6, 6) == 1
    expected = draws * (SCORES / SCORES.sum()).numpy()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 25.7  # chi-square, 5 degrees of freedom: P(chi2 > 25.7) = 1e-4


@pytest.mark.parametrize(("seed", "smoothing"), [(0, 0.0), (1, 0.0), (2, 0.3)])
def test_inclusion_frequencies_and_reported_probabilities_are_exact(seed, smoothing):
    draws, k, policy, gen = 8000, 3, ImportanceDraw(smoothing), seeded(seed)
    counts, horvitz_thompson = np.zeros(6), np.zeros(6)
    for _ in range(draws):
        selection = policy.select(SCORES, 0.5, gen)
        assert selection.index.shape == (k,) and selection.expected == 0.5
        counts[selection.index.numpy()] += 1
        horvitz_thompson[selection.index.numpy()] += 1 / selection.prob.numpy()
    shares = importance_log_weights(SCORES, smoothing).exp().double().numpy()
    inclusion = successive_inclusion(shares / shares.sum(), k)
    # z-test per sample: 5 standard errors of a frequency over `draws` Bernoulli draws
    np.testing.assert_array_less(np.abs(counts / draws - inclusion), 5 * np.sqrt(inclusion * (1 - inclusion) / draws))
    assert counts[5] > counts[0]  # the highest score is the most likely to be kept
    # Priority sampling: 1{i kept} / prob_i has mean 1 for every i (the sample variance bounds the error)
    assert np.abs(horvitz_thompson / draws - 1).max() < 0.15


def test_same_seed_same_draw():
    scores = torch.rand(64, generator=seeded(9))
    a, b = (ImportanceDraw().select(scores, 0.25, seeded(3)) for _ in range(2))
    assert torch.equal(a.index, b.index) and torch.equal(a.prob, b.prob)
    assert not torch.equal(a.index, ImportanceDraw().select(scores, 0.25, seeded(4)).index)
    full = ImportanceDraw().select(scores, 1.0, seeded(0))
    assert full.index.tolist() == list(range(64)) and torch.equal(full.prob, torch.ones(64))


# ----------------------------------------------------------------------------------------------- unbiasedness
def linear_problem(n: int = 12):
    """A tiny float64 linear classifier, a batch with an index field, and each sample's exact parameter gradient."""
    torch.manual_seed(0)
    model = nn.Linear(3, 3).double()
    x = torch.randn(n, 3, dtype=torch.float64) * torch.linspace(0.2, 3.0, n, dtype=torch.float64)[:, None]
    y = torch.randint(0, 3, (n,))
    per_sample = []
    for i in range(n):
        grads = torch.autograd.grad(F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]), list(model.parameters()))
        per_sample.append(torch.cat([g.flatten() for g in grads]))
    return model, {"input": x, "target": y, "index": torch.arange(n)}, torch.stack(per_sample)


@pytest.mark.parametrize(("score", "smoothing"), [("gradnorm", 0.0), ("loss", 0.1)])
def test_weighted_subset_gradient_is_unbiased_for_the_full_batch_gradient(score, smoothing):
    model, batch, per_sample = linear_problem()
    full = per_sample.mean(0)  # the gradient of the full batch's mean loss
    engine = SelectionEngine(model, F.cross_entropy, keep=0.25, policy=ImportanceDraw(smoothing), score=score,
                             return_weights=True, generator=7)  # fmt: skip
    draws = 3000
    weighted, plain = [], []
    for _ in range(draws):
        subset, weights = engine.process(batch)
        kept = per_sample[subset["index"]]
        weighted.append((weights[:, None].double() * kept).sum(0))  # the gradient of (w * loss).sum()
        plain.append(kept.mean(0))
    for estimates, unbiased in ((torch.stack(weighted), True), (torch.stack(plain), False)):
        z = (estimates.mean(0) - full) / (estimates.std(0) / math.sqrt(draws))
        if unbiased:
            assert z.abs().max() < 5, z  # every coordinate within 5 standard errors of the Monte Carlo mean
        else:
            assert z.abs().max() > 10, z  # the unweighted subset is biased: the test can tell
    assert [p.grad for p in model.parameters()] == [None, None]


# ----------------------------------------------------------------------------------------------- gradnorm
def test_closed_form_is_taken_only_for_plain_cross_entropy():
    assert closed_form_ignore_index(F.cross_entropy) == -100
    assert closed_form_ignore_index(nn.CrossEntropyLoss()) == -100
    assert closed_form_ignore_index(nn.CrossEntropyLoss(ignore_index=2)) == 2
    assert closed_form_ignore_index(nn.CrossEntropyLoss(label_smoothing=0.1)) is None
    assert closed_form_ignore_index(nn.CrossEntropyLoss(weight=torch.ones(3))) is None
    assert closed_form_ignore_index(type("Sub", (nn.CrossEntropyLoss,), {})()) is None
    assert closed_form_ignore_index(ce) is None and closed_form_ignore_index(F.nll_loss) is None


def test_autograd_path_equals_the_cross_entropy_closed_form():
    torch.manual_seed(1)
    logits, targets = torch.randn(10, 4) * 3, torch.randint(0, 4, (10,))
    targets[3] = -100  # ignored: loss 0, gradient 0
    closed = cross_entropy_gradnorm(logits, targets)
    by_autograd = autograd_gradnorm(logits, targets, lambda z, y: F.cross_entropy(z, y, reduction="none"))
    torch.testing.assert_close(closed, by_autograd)
    hand = torch.linalg.vector_norm(torch.softmax(logits, 1) - F.one_hot(targets.clamp_min(0), 4), dim=1)
    torch.testing.assert_close(closed[targets != -100], hand[targets != -100])
    assert closed[3] == 0
    ignoring = nn.CrossEntropyLoss(ignore_index=2)
    torch.testing.assert_close(
        cross_entropy_gradnorm(logits, targets.clamp_min(0), 2),
        autograd_gradnorm(logits, targets.clamp_min(0), lambda z, y: nn.CrossEntropyLoss(ignore_index=2,
                          reduction="none")(z, y)),
    )  # fmt: skip
    assert closed_form_ignore_index(ignoring) == 2


def test_scorer_gradnorm_agrees_across_paths_and_with_the_oracle(monkeypatch):
    model = OracleModel(LOSSES)
    x, y = oracle_batch(range(18))
    by_autograd = Scorer(ce, score="gradnorm")(model, x, y, 18, CPU)  # ce is a wrapper: the autograd path
    torch.testing.assert_close(by_autograd, oracle_gradnorm(LOSSES))
    monkeypatch.setattr(_gradnorm, "autograd_gradnorm", None)  # the closed form must not need it
    for loss_fn in (F.cross_entropy, nn.CrossEntropyLoss()):
        torch.testing.assert_close(Scorer(loss_fn, score="gradnorm")(model, x, y, 18, CPU), by_autograd)


def test_label_smoothing_takes_autograd_and_gets_the_smoothed_residual():
    torch.manual_seed(2)
    logits, targets, eps = torch.randn(6, 5), torch.randint(0, 5, (6,)), 0.2
    loss_fn = nn.CrossEntropyLoss(label_smoothing=eps)
    got = Scorer(loss_fn, score="gradnorm", forward=lambda m, x: x)(nn.Identity(), logits, targets, 6, CPU)
    smoothed = (1 - eps) * F.one_hot(targets, 5) + eps / 5
    torch.testing.assert_close(got, torch.linalg.vector_norm(torch.softmax(logits, 1) - smoothed, dim=1))


def test_mse_gradnorm_equals_the_hand_computed_value_with_and_without_reduce():
    torch.manual_seed(3)
    outputs, targets = torch.randn(5, 4), torch.randn(5, 4)
    forward = {"forward": lambda m, x: x}
    mean = Scorer(F.mse_loss, score="gradnorm", **forward)(nn.Identity(), outputs, targets, 5, CPU)
    # loss_b = mean_d (o - t)^2 (the default reduction over the extra dimension): gradient 2 (o - t) / D
    torch.testing.assert_close(mean, 2 * torch.linalg.vector_norm(outputs - targets, dim=1) / 4)
    summed = Scorer(F.mse_loss, score="gradnorm", reduce=lambda losses, t: losses.sum(1), **forward)
    torch.testing.assert_close(
        summed(nn.Identity(), outputs, targets, 5, CPU), 2 * torch.linalg.vector_norm(outputs - targets, dim=1)
    )
    one_dim = Scorer(F.mse_loss, score="gradnorm", **forward)(nn.Identity(), outputs[:, 0], targets[:, 0], 5, CPU)
    torch.testing.assert_close(one_dim, 2 * (outputs[:, 0] - targets[:, 0]).abs())


def test_per_token_losses_reduce_to_a_per_sample_gradnorm():
    torch.manual_seed(4)
    logits, tokens = torch.randn(3, 7, 5), torch.randint(0, 5, (3, 7))  # (B, T, V) and (B, T)
    loss_fn = lambda z, y, reduction: F.cross_entropy(z.transpose(1, 2), y, reduction=reduction)  # noqa: E731
    got = Scorer(loss_fn, score="gradnorm", forward=lambda m, x: x)(nn.Identity(), logits, tokens, 3, CPU)
    # loss_b = mean_t CE(z_bt, y_bt): the gradient of each token is (softmax - onehot) / T
    residual = torch.softmax(logits, -1) - F.one_hot(tokens, 5)
    torch.testing.assert_close(got, torch.linalg.vector_norm(residual.flatten(1), dim=1) / 7)


class BNNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.3))
        self.head = nn.Linear(4, 3)
        self.head.bias.requires_grad_(False)  # a frozen parameter stays frozen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean((2, 3)))


@pytest.mark.parametrize(
    "options",
    [{}, {"score_mode": "train"}, {"autocast_dtype": torch.bfloat16}, {"scale_factor": 0.5}],
    ids=["eval", "train", "autocast", "scaled"],
)
def test_gradnorm_scoring_has_no_side_effects(options):
    torch.manual_seed(5)
    model = BNNet().train()
    model.head.eval()  # mixed flags come back as they were
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    flags = [p.requires_grad for p in model.parameters()]
    modes = [m.training for m in model.modules()]
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 3, (8,))
    rng = torch.random.get_rng_state()
    norms = Scorer(F.cross_entropy, score="gradnorm", **options)(model, x, y, 8, CPU, seed=3)
    assert norms.shape == (8,) and norms.dtype == torch.float32 and not norms.requires_grad
    assert torch.isfinite(norms).all() and (norms > 0).all()
    assert all(torch.equal(buffers[name], b) for name, b in model.named_buffers())  # BatchNorm stats untouched
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters())
    assert [m.training for m in model.modules()] == modes
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_score_is_validated_at_construction():
    with pytest.raises(ValueError, match=r"score must be one of \('loss', 'gradnorm'\), got 'grad'"):
        SBLoader([], nn.Linear(2, 2), F.cross_entropy, score="grad")


def test_gradnorm_names_the_fix_for_outputs_that_are_not_a_tensor():
    model = nn.Linear(2, 3)
    scorer = Scorer(F.cross_entropy, score="gradnorm", forward=lambda m, x: {"logits": m(x)})
    with pytest.raises(TypeError, match=r"score='gradnorm'.*forward=lambda m, x: m\(x\)\[0\]"):
        scorer(model, torch.randn(4, 2), torch.zeros(4, dtype=torch.long), 4, CPU)


def test_topk_on_gradnorm_keeps_the_largest_gradnorms():
    model = OracleModel(LOSSES)
    sb = SBLoader([oracle_batch(range(18))], model, ce, keep=0.25, score="gradnorm")
    (batch,) = list(sb)
    top = torch.topk(oracle_gradnorm(LOSSES), keep_count(0.25, 18)).indices
    assert ids_of(batch) == sorted(top.tolist())


# ----------------------------------------------------------------------------------------------- cache and state
def test_the_cache_holds_gradnorms_and_observe_is_refused():
    batches = [{"input": oracle_batch(ids)[0], "target": torch.zeros(6, dtype=torch.long), "index": torch.tensor(ids)}
               for ids in (range(0, 6), range(6, 12), range(12, 18))]  # fmt: skip
    cache = LossCache(staleness=3, size=18)
    sb = SBLoader(batches, OracleModel(LOSSES), ce, policy="importance", score="gradnorm", cache=cache,
                  id_key="index", return_weights=True)  # fmt: skip
    for _ in range(2):
        outputs = list(sb)
    assert sb.stats.samples_scored == 18 and sb.stats.samples_reused == 18
    values, _ = cache.dense_entries()
    torch.testing.assert_close(values, oracle_gradnorm(LOSSES))
    batch, _ = outputs[0]
    with pytest.raises(ValueError, match=r"observe\(\) records training losses.*score='gradnorm'.*leave observe"):
        sb.observe(batch, ce(OracleModel(LOSSES)(batch["input"]), batch["target"], reduction="none"))


def test_a_gradnorm_state_refuses_a_loss_scored_loader_and_the_reverse():
    model = OracleModel(LOSSES)
    gradnorm = SBLoader([oracle_batch(range(6))], model, ce, policy="importance", score="gradnorm")
    state = roundtrip(gradnorm.state_dict())
    assert gradnorm.engine.fingerprint()["score"] == "gradnorm"
    with pytest.raises(ValueError, match=r"score='gradnorm' but this loader has score='loss'"):
        SBLoader([oracle_batch(range(6))], model, ce, policy="importance").load_state_dict(state)
    loss = SelectionEngine(model, ce, policy="importance").state_dict()
    with pytest.raises(ValueError, match=r"score='loss' but this loader has score='gradnorm'"):
        SelectionEngine(model, ce, policy="importance", score="gradnorm").load_state_dict(loss)


def test_no_host_sync_on_the_closed_form_path():
    model = OracleModel(LOSSES)
    batches = [oracle_batch(range(start, start + 6)) for start in (0, 6, 12)] * 3
    counter = SyncCounter()
    counter.host.update((id(t), t) for batch in batches for t in batch)
    sb = SBLoader(batches, model, F.cross_entropy, policy="importance", score="gradnorm", return_weights=True)
    with counter.active():
        outputs = iter(sb)
        for _ in range(len(batches) - 1):  # the epoch's end may read what is still in flight
            next(outputs)
    assert counter.calls == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_no_sync_on_cuda():  # pragma: no cover - runs where a GPU is lent
    device = torch.device("cuda")
    model = OracleModel(LOSSES).to(device)
    for loss_fn in (ce, F.cross_entropy):  # the autograd path and the closed form
        batches = [tuple(t.pin_memory() for t in oracle_batch(range(s, s + 6))) for s in (0, 6, 12)] * 2
        sb = SBLoader(batches, model, loss_fn, policy="importance", score="gradnorm", return_weights=True)
        outputs = iter(sb)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(len(batches) - 1):  # every step but the epoch's end, which reads what is in flight
                next(outputs)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        list(outputs)
