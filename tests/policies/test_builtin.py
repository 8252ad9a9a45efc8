import dataclasses
import itertools
import random

import numpy as np
import pytest
import torch

from sbdata import RandomK, RankWeighted, SBLoader, TopK, keep_count
from sbdata.policies import POLICIES, Selection, SelectionPolicy, gumbel_top_k, rank_log_weights, resolve_policy
from tests.helpers import OracleModel, ce, ids_of, oracle_batch


def seeded(seed: int) -> torch.Generator:
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


@pytest.mark.parametrize(
    ("keep", "n", "expected"),
    [(0.5, 256, 128), (0.3, 10, 3), (0.33, 256, 85), (0.5, 1, 1), (0.01, 5, 1), (1.0, 7, 7), (0.5, 0, 0)],
)
def test_keep_count(keep, n, expected):
    assert keep_count(keep, n) == expected


def test_topk_keeps_highest_in_batch_order():
    scores = torch.tensor([0.1, 0.9, 0.3, 0.8, 0.2, 0.7])
    sel = TopK().select(scores, 0.5, seeded(0))
    assert sel.index.tolist() == [1, 3, 5]
    assert sel.prob is None and sel.expected == 0.5


def test_topk_ties_go_to_the_lower_index():
    scores = torch.tensor([1.0, 2.0, 2.0, 2.0, 0.0])
    assert TopK().select(scores, 0.4, seeded(0)).index.tolist() == [1, 2]


def test_topk_infinite_scores_are_kept_first():
    scores = torch.tensor([0.1, float("inf"), 0.3])
    assert TopK().select(scores, 0.3, seeded(0)).index.tolist() == [1]


def composer_inclusion_probabilities(n: int, keep: float, k: int) -> np.ndarray:
    """Exact inclusion probability per ascending rank under Composer's np.random.choice(replace=False, p=probs).

    Enumerates every ordered sequence of k successive draws (numpy renormalises after each draw).
    """
    percs = np.arange(0.5, n, 1) / n
    probs = percs ** (1.0 / keep - 1.0)
    probs = probs / probs.sum()
    inclusion = np.zeros(n)
    for seq in itertools.permutations(range(n), k):
        p, left = 1.0, 1.0
        for item in seq:
            p *= probs[item] / left
            left -= probs[item]
        for item in seq:
            inclusion[item] += p
    return inclusion


def test_rank_frequencies_match_composer():
    n, keep, draws = 6, 0.5, 30000
    scores = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7, 0.2])
    rank_of = torch.argsort(torch.argsort(scores)).tolist()  # ascending rank of each position
    policy, gen = RankWeighted(), seeded(1)
    counts = np.zeros(n)
    for _ in range(draws):
        for pos in policy.select(scores, keep, gen).index.tolist():
            counts[rank_of[pos]] += 1
    expected = composer_inclusion_probabilities(n, keep, keep_count(keep, n))
    # tolerance: 6 standard errors of a frequency estimate at p ~ 0.5 over 30k draws (~0.017)
    np.testing.assert_allclose(counts / draws, expected, atol=0.017)
    assert counts[n - 1] > counts[0]  # the highest loss is the most likely to be kept


def test_rank_same_seed_same_selection_different_seed_differs():
    scores = torch.rand(64, generator=seeded(9))
    a = [RankWeighted().select(scores, 0.25, seeded(3)).index for _ in range(2)]
    b = RankWeighted().select(scores, 0.25, seeded(4)).index
    assert torch.equal(a[0], a[1])
    assert not torch.equal(a[0], b)
    assert a[0].shape == (16,) and torch.equal(a[0], torch.sort(a[0]).values)


def test_rank_keep_one_keeps_all_with_probability_one():
    sel = RankWeighted().select(torch.rand(5), 1.0, seeded(0))
    assert sel.index.tolist() == [0, 1, 2, 3, 4] and torch.equal(sel.prob, torch.ones(5))


def test_random_is_uniform_and_exact_count():
    n, keep, draws = 10, 0.3, 20000
    counts = np.zeros(n)
    gen = seeded(2)
    for _ in range(draws):
        sel = RandomK().select(torch.zeros(n), keep, gen)
        assert sel.index.shape == (3,)
        counts[sel.index.numpy()] += 1
    np.testing.assert_allclose(counts / draws, 0.3, atol=0.02)  # ~6 standard errors


@pytest.mark.parametrize("policy", [RankWeighted(), RandomK()])
def test_horvitz_thompson_estimate_is_unbiased(policy):
    # sum(L_i / (N * prob_i)) over the kept samples must average to mean(L) over many seeded draws.
    losses = torch.tensor([0.05, 0.2, 0.4, 0.8, 1.5, 3.0, 0.1, 2.2, 0.6, 1.1])
    gen, draws, estimates = seeded(5), 40000, []
    for _ in range(draws):
        sel = policy.select(losses, 0.3, gen)
        estimates.append((losses[sel.index] / (len(losses) * sel.prob)).sum().item())
    estimates = np.asarray(estimates)
    standard_error = estimates.std() / np.sqrt(draws)
    # tolerance: 4 standard errors of the Monte Carlo mean
    assert abs(estimates.mean() - losses.mean().item()) < 4 * standard_error


def test_gumbel_top_k_matches_target_distribution_for_one_draw():
    # k=1 is a single categorical draw: frequencies must equal the normalised weights.
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    gen, counts = seeded(11), np.zeros(4)
    for _ in range(20000):
        index, _ = gumbel_top_k(torch.log(weights), 1, gen)
        counts[index.item()] += 1
    np.testing.assert_allclose(counts / 20000, (weights / weights.sum()).numpy(), atol=0.02)


def test_rank_log_weights_follow_composer_formula():
    scores = torch.tensor([3.0, 1.0, 2.0])
    got = rank_log_weights(scores, 0.5).exp()
    ranks = torch.tensor([2.0, 0.0, 1.0])
    torch.testing.assert_close(got, ((ranks + 0.5) / 3) ** 1.0)


def test_policies_leave_global_rngs_alone():
    torch_state, np_state, py_state = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    gen = seeded(0)
    for name in POLICIES:
        policy = resolve_policy(name)
        policy.select(torch.rand(32, generator=gen), 0.5, gen)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.random.get_state()[1].tolist() == np_state[1].tolist()
    assert random.getstate() == py_state


def test_resolve_policy_errors():
    with pytest.raises(
        ValueError, match=r"unknown policy 'biggest'.*\['history', 'importance', 'random', 'rank', 'topk'\]"
    ):
        resolve_policy("biggest")
    with pytest.raises(TypeError, match="policy must be a name"):
        resolve_policy(3)


def test_stateless_policy_rejects_foreign_state():
    with pytest.raises(ValueError, match="stateless"):
        TopK().load_state_dict({"buffer": 1})


# ----------------------------------------------------------------- the policy contract
def define_above_mean(**declared):
    """The 6-line custom policy of issue 10: keep the samples whose loss is above the batch mean."""
    return type(
        "AboveMean",
        (SelectionPolicy,),
        {
            **declared,
            "select": lambda self, scores, keep, generator: Selection(
                torch.nonzero(scores > scores.mean()).squeeze(1), None, 0.5
            ),
        },
    )


def test_a_policy_that_does_not_declare_its_contract_is_refused_when_defined():
    with pytest.raises(
        TypeError, match=r"AboveMean must declare fixed_count and weighted.*keep_count.*Selection\.prob"
    ):
        define_above_mean()
    with pytest.raises(TypeError, match=r"AboveMean must declare weighted \(.*inclusion probability"):
        define_above_mean(fixed_count=False)


def test_a_declared_variable_count_policy_works_unpooled_and_pooled():
    policy_class = define_above_mean(fixed_count=False, weighted=False)
    x, y = oracle_batch(range(8))
    losses = [0.1, 3.0, 0.2, 2.5, 0.3, 0.4, 2.0, 0.5]  # mean 1.125: ids 1, 3, 6 are above it
    (out,) = SBLoader([(x, y)], OracleModel(losses), ce, policy=policy_class())
    assert ids_of(out) == [1, 3, 6]
    pooled = list(SBLoader([(x, y)] * 3, OracleModel(losses), ce, policy=policy_class(), batch_size=4))
    assert [ids_of(b) for b in pooled] == [[1, 3, 6, 1], [3, 6, 1, 3], [6]]


def test_a_policy_that_breaks_its_declarations_is_named_at_the_batch():
    x, y = oracle_batch(range(8))
    losses = [0.1, 3.0, 0.2, 2.5, 0.3, 0.4, 2.0, 0.5]
    weighted = define_above_mean(fixed_count=False, weighted=True)()
    sb = SBLoader([(x, y)], OracleModel(losses), ce, policy=weighted, return_weights=True)
    with pytest.raises(TypeError, match=r"Selection\.prob=None although it declares weighted=True"):
        next(iter(sb))
    fixed = define_above_mean(fixed_count=True, weighted=False)()
    with pytest.raises(ValueError, match=r"declares fixed_count=True but kept 3 of 8 samples.*fixed_count = False"):
        next(iter(SBLoader([(x, y)], OracleModel(losses), ce, policy=fixed)))


def test_built_in_policies_declare_their_contract():
    from sbdata import HistoryPercentile, ReducibleSelect

    declared = {
        type(policy).__name__: (policy.fixed_count, policy.weighted)
        for policy in (TopK(), RankWeighted(), RandomK(), HistoryPercentile(), ReducibleSelect(torch.zeros(3), "rank"))
    }
    assert declared == {
        "TopK": (True, False),
        "RankWeighted": (True, True),
        "RandomK": (True, True),
        "HistoryPercentile": (False, True),
        "ReducibleSelect": (True, True),
    }


def test_a_third_party_policy_needs_only_public_names_and_gets_typed_options():
    import sbdata
    from sbdata import policies  # the policy writer's surface

    seen = []

    class Every2nd(policies.SelectionPolicy):  # the public names of sbdata.policies only
        fixed_count = False
        weighted = False

        def bind(self, options: policies.PolicyOptions) -> None:
            seen.append(options)

        def adjust(self, losses: torch.Tensor, context: policies.ScoreContext) -> torch.Tensor:
            assert context.batch_size == losses.shape[0]
            return losses

        def select(self, scores, keep, generator):
            index = torch.arange(0, scores.shape[0], 2, device=scores.device)
            return policies.Selection(index, None, index.shape[0] / scores.shape[0])

    from tests.helpers import OracleModel, ce, ids_of, oracle_batch

    sb = sbdata.SBLoader([oracle_batch(range(6))], OracleModel([1.0] * 6), ce, keep=0.5, policy=Every2nd())
    assert [ids_of(out) for out in sb] == [[0, 2, 4]]
    assert seen == [policies.PolicyOptions(0.5, True, False, None, torch.device("cpu"))]
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].keep = 0.25  # type: ignore[misc]
