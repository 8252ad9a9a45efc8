import copy
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sbdata import SBLoader
from sbdata.scoring import Scorer, per_sample_loss_fn
from tests.helpers import OracleModel, ce, ids_of, oracle_batch

CPU = torch.device("cpu")


def bn_dropout_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(1, 4, 3, padding=1),
        nn.BatchNorm1d(4),
        nn.ReLU(),
        nn.Dropout(0.3),
        nn.Flatten(),
        nn.Linear(4 * 8, 3),
    )


def toy_batches(count: int = 6, size: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 1, 8, generator=gen), torch.randint(0, 3, (size,), generator=gen)) for _ in range(count)]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    model.train()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("score_mode", ["batch", "eval", "train"])
def test_scoring_leaves_no_trace_on_buffers_params_or_rng(score_mode):
    batches = toy_batches()
    model_a = bn_dropout_model()
    model_b = copy.deepcopy(model_a)
    opt_a = torch.optim.SGD(model_a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(model_b.parameters(), lr=0.1)

    torch.manual_seed(123)
    kept = []
    for x, y in SBLoader(batches, model_a, F.cross_entropy, keep=0.5, score_mode=score_mode):
        kept.append((x.clone(), y.clone()))
        train_step(model_a, opt_a, x, y)

    torch.manual_seed(123)  # the same dropout draws, if scoring consumed none
    for x, y in kept:
        train_step(model_b, opt_b, x, y)

    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        assert torch.equal(state_a[name], state_b[name]), name
    assert state_a["1.num_batches_tracked"].item() == len(batches)


def normed_model() -> nn.Module:
    """BatchNorm, SyncBatchNorm and an InstanceNorm that tracks running statistics, all planted far off (eval-mode
    losses are then far from the training forward's), and dropout."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(1, 4, 3, padding=1), nn.BatchNorm1d(4), nn.ReLU(), nn.SyncBatchNorm(4),
        nn.InstanceNorm1d(4, affine=True, track_running_stats=True), nn.Dropout(0.5), nn.Flatten(), nn.Linear(32, 3),
    )  # fmt: skip
    with torch.no_grad():
        for index in (1, 3, 4):
            model[index].running_mean.fill_(-3.0)
            model[index].running_var.fill_(1e-2)
    return model.train()


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_the_default_scores_as_the_training_forward_normalises_and_changes_nothing(autocast):
    """Known answer: the default pass's losses are the training forward's on the same batch with dropout off (its
    own statistics in every normalisation layer); every parameter and buffer (running statistics, batch counts) is
    bit for bit as before, the modes too; eval mode's losses are far from them (the planted statistics)."""
    model = normed_model()
    x, y = toy_batches(1, 32)[0]
    before = {name: value.clone() for name, value in model.state_dict().items()}
    scorer = Scorer(F.cross_entropy, autocast_dtype=autocast)
    assert scorer.score_mode == "batch"
    scores = scorer(model, x, y, 32, CPU)
    reference = copy.deepcopy(model)
    reference[5].eval()  # dropout off, every norm layer in train mode
    expected = F.cross_entropy(reference(x), y, reduction="none").detach()
    tolerance = 1e-5 if autocast is None else 0.1
    assert torch.allclose(scores, expected, atol=tolerance, rtol=tolerance)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(module.training for module in model.modules())
    assert all(module.track_running_stats for module in (model[1], model[3], model[4]))
    eval_scores = scorer.replace(score_mode="eval")(model, x, y, 32, CPU)
    assert (eval_scores - expected).abs().mean() > 1.0


def test_batch_and_eval_mode_are_one_pass_without_normalisation_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Dropout(0.5), nn.Linear(16, 3)).train()
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    batch, evaluated = (Scorer(F.cross_entropy, score_mode=mode)(model, x, y, 16, CPU) for mode in ("batch", "eval"))
    assert torch.equal(batch, evaluated)


def test_scoring_creates_no_gradients():
    model = bn_dropout_model()
    (x, y), *_ = toy_batches(1)
    list(SBLoader([(x.requires_grad_(), y)], model, F.cross_entropy, keep=0.5))
    assert all(p.grad is None for p in model.parameters())


def test_scoring_does_not_consume_global_rngs():
    model = bn_dropout_model()
    torch_state, np_state, py_state = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    list(SBLoader(toy_batches(), model, F.cross_entropy, keep=0.5, policy="rank", score_mode="train"))
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.random.get_state()[1].tolist() == np_state[1].tolist()
    assert random.getstate() == py_state


class Exploding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frozen_bn = nn.BatchNorm1d(1)
        self.linear = nn.Linear(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("forward exploded")


@pytest.mark.parametrize("score_mode", ["batch", "eval", "train"])
def test_forward_exception_propagates_and_modes_are_restored(score_mode):
    model = Exploding().train()
    model.frozen_bn.eval()  # a user's deliberate mix of modes must survive
    before = copy.deepcopy(model.state_dict())
    sb = SBLoader([oracle_batch(range(4))], model, ce, score_mode=score_mode)
    with pytest.raises(RuntimeError, match="forward exploded"):
        next(iter(sb))
    assert model.training and model.linear.training and not model.frozen_bn.training
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name])


def test_scale_factor_scores_downsampled_but_yields_full_size():
    seen = []

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(1, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(tuple(x.shape))
            return self.linear(x.mean(dim=(2, 3))[:, :1])

    batch = (torch.randn(4, 1, 8, 8), torch.zeros(4, dtype=torch.long))
    ((x, _y),) = list(SBLoader([batch], Probe(), F.cross_entropy, keep=0.5, scale_factor=0.5))
    assert seen == [(4, 1, 4, 4)]
    assert x.shape == (2, 1, 8, 8)


def test_scale_factor_on_flat_inputs_is_a_clear_error():
    model = OracleModel([1.0] * 4)
    with pytest.raises(ValueError, match=r"scale_factor=0.5 needs inputs of 3, 4 or 5 dims.*\(4, 1\)"):
        list(SBLoader([oracle_batch(range(4))], model, ce, scale_factor=0.5))


def test_autocast_dtype_applies_to_the_scoring_pass():
    dtypes = []

    class Probe(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = super().forward(x)
            dtypes.append(out.dtype)
            return out

    model = Probe(4, 3)
    batch = (torch.randn(6, 4), torch.randint(0, 3, (6,)))
    ((x, _),) = list(SBLoader([batch], model, F.cross_entropy, autocast_dtype=torch.bfloat16))
    assert dtypes == [torch.bfloat16] and x.dtype == torch.float32


def test_token_losses_reduce_hook_ignores_padding():
    # Per-token losses (B, T) with -100 padding: the hook averages over real tokens only.
    vocab = 3

    class TokenOracle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return torch.zeros(*tokens.shape, vocab) + self.w  # uniform logits: each real token costs log(3)

    def token_loss(logits, targets, reduction="mean"):
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction=reduction, ignore_index=-100)

    def mean_over_real_tokens(losses, targets):
        real = (targets != -100).to(losses.dtype)
        return (losses * real).sum(1) / real.sum(1).clamp(min=1)

    tokens = torch.zeros(3, 4, dtype=torch.long)
    targets = torch.tensor([[0, 1, -100, -100], [2, -100, -100, -100], [0, 0, 0, 0]])
    scorer = Scorer(token_loss, reduce=mean_over_real_tokens)
    losses = scorer(TokenOracle(), tokens, targets, 3, CPU)
    torch.testing.assert_close(losses, torch.full((3,), float(np.log(vocab))))
    default = Scorer(token_loss)(TokenOracle(), tokens, targets, 3, CPU)  # the plain mean counts padding as 0
    torch.testing.assert_close(default, torch.log(torch.tensor(3.0)) * torch.tensor([0.5, 0.25, 1.0]))


def test_forward_hook_and_split_for_mapping_batches():
    class HFStyle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(2, 2)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
            return {"logits": self.proj(input_ids.float() * attention_mask[:, :1])}

    batch = {"input_ids": torch.randn(6, 2), "attention_mask": torch.ones(6, 2), "labels": torch.zeros(6).long()}
    sb = SBLoader(
        [batch],
        HFStyle(),
        F.cross_entropy,
        split=lambda b: ({k: v for k, v in b.items() if k != "labels"}, b["labels"]),
        forward=lambda m, inputs: m(**inputs)["logits"],
    )
    (out,) = list(sb)
    assert set(out) == {"input_ids", "attention_mask", "labels"} and out["labels"].shape == (3,)


def test_loss_module_is_used_per_sample():
    fn = per_sample_loss_fn(nn.CrossEntropyLoss())
    out = fn(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long))
    assert out.shape == (4,)


def test_loss_without_reduction_is_rejected_at_construction():
    def bad_loss(outputs, targets):
        return F.cross_entropy(outputs, targets)

    with pytest.raises(
        TypeError, match=r"bad_loss must take a keyword argument `reduction`\..*add a reduction parameter"
    ):
        SBLoader([], OracleModel([1.0]), bad_loss)


def test_non_callable_loss_is_rejected():
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        SBLoader([], OracleModel([1.0]), "cross_entropy")


def test_a_loss_that_ignores_reduction_is_told_what_is_wrong_and_the_fix():
    def ignores_reduction(outputs, targets, reduction="none"):
        return F.cross_entropy(outputs, targets)

    with pytest.raises(ValueError) as error:
        list(SBLoader([oracle_batch(range(4))], OracleModel([1.0] * 4), ignores_reduction))
    message = str(error.value)
    assert message.startswith("loss_fn returned one number (shape ()), expected one loss per sample (4,)")
    assert "already calls it with reduction='none', and it returned a reduced loss anyway" in message
    assert "Make loss_fn honour reduction (pass it on" in message
    assert "pass reduction='none'" not in message  # sbdata did: the old message told the user to do what it did


def test_wrong_length_loss_is_an_error():
    def one_too_many(outputs, targets, reduction="none"):
        return torch.zeros(outputs.shape[0] + 1)

    with pytest.raises(ValueError, match=r"shape \(5,\), expected one loss per sample \(4,\) first"):
        list(SBLoader([oracle_batch(range(4))], OracleModel([1.0] * 4), one_too_many))


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"score_mode": "inference"}, ValueError, "score_mode must be one of"),
        ({"scale_factor": 1.5}, ValueError, r"scale_factor must be in \(0, 1\]"),
        ({"scale_factor": 0}, ValueError, r"scale_factor must be in \(0, 1\]"),
        ({"autocast_dtype": torch.int8}, TypeError, "autocast_dtype must be a floating torch.dtype"),
        ({"forward": 3}, TypeError, "forward must be callable"),
        ({"reduce": "mean"}, TypeError, "reduce must be callable"),
    ],
)
def test_scorer_option_errors(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        Scorer(F.cross_entropy, **kwargs)


def spectral_model(new_api: bool) -> nn.Module:
    torch.manual_seed(0)
    norm = torch.nn.utils.parametrizations.spectral_norm if new_api else torch.nn.utils.spectral_norm
    return nn.Sequential(norm(nn.Linear(8, 16)), nn.ReLU(), nn.Dropout(0.2), norm(nn.Linear(16, 3)))


@pytest.mark.parametrize("new_api", [True, False], ids=["parametrizations", "hook"])
def test_train_mode_scoring_restores_spectral_norm_buffers_bit_for_bit(new_api):
    model = spectral_model(new_api).train()
    before = {name: buffer.clone() for name, buffer in model.named_buffers()}
    assert any(name.endswith("_u") for name in before)  # the power-iteration vectors a train forward updates
    gen = torch.Generator().manual_seed(2)
    batches = [(torch.randn(16, 8, generator=gen), torch.randint(0, 3, (16,), generator=gen)) for _ in range(3)]
    out = list(SBLoader(batches, model, F.cross_entropy, keep=0.5, score_mode="train"))
    assert len(out) == 3
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, before[name]), name


def test_a_forward_that_rebinds_a_buffer_gets_the_original_back():
    class Rebinding(OracleModel):
        def forward(self, x):
            self.table = self.table * 2  # a new tensor bound to the buffer's name
            return super().forward(x)

    model = Rebinding([1.0, 2.0, 3.0, 4.0])
    table = model.table
    list(SBLoader([oracle_batch(range(4))], model, ce, score_mode="train"))
    assert model.table is table and table.tolist() == [1.0, 2.0, 3.0, 4.0]


def dropout_batches():
    gen = torch.Generator().manual_seed(4)
    return [(torch.randn(32, 8, generator=gen), torch.randint(0, 3, (32,), generator=gen)) for _ in range(8)]


def dropout_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))


def test_train_mode_selection_does_not_depend_on_the_global_rng():
    runs = []
    for global_seed in (1, 2):
        model = dropout_model()
        torch.manual_seed(global_seed)
        runs.append([y for _, y in SBLoader(dropout_batches(), model, F.cross_entropy, score_mode="train")])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def test_train_mode_dropout_draws_a_new_mask_every_step():
    model = dropout_model()
    (x, y), *_ = dropout_batches()
    selections = [out[1] for out in SBLoader([(x, y)] * 6, model, F.cross_entropy, keep=0.25, score_mode="train")]
    assert any(not torch.equal(selections[0], other) for other in selections[1:])


def test_train_mode_dropout_resumes_exactly_in_fresh_objects():
    def make():
        model = dropout_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        return model, opt, SBLoader(dropout_batches(), model, F.cross_entropy, keep=0.5, score_mode="train")

    def train(model, opt, x, y):  # deterministic (dropout off), so only scoring could tell the runs apart
        model.eval()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        model.train()

    model, opt, sb = make()
    torch.manual_seed(10)
    reference, state = [], None
    for x, y in sb:
        reference.append(y.clone())
        train(model, opt, x, y)
        if len(reference) == 3:
            state = copy.deepcopy((model.state_dict(), opt.state_dict(), sb.state_dict()))

    model, opt, sb = make()
    torch.manual_seed(99)  # a fresh process: another global RNG state (a shuffling DataLoader draws from it too)
    model.load_state_dict(state[0])
    opt.load_state_dict(state[1])
    sb.load_state_dict(state[2])
    tail = []
    for x, y in sb:
        tail.append(y.clone())
        train(model, opt, x, y)
    assert len(tail) == len(reference) - 3
    assert all(torch.equal(a, b) for a, b in zip(tail, reference[3:], strict=True))


def test_a_model_on_the_meta_device_names_the_fix():
    with torch.device("meta"):
        model = nn.Linear(4, 3)
    with pytest.raises(ValueError, match=r"meta device.*pass device=.*forward=.*to_empty"):
        SBLoader([oracle_batch(range(4))], model, ce)


def test_an_offloaded_model_whose_parameters_read_as_meta_scores_with_device():
    class Offloaded(nn.Module):  # a dispatched model: a meta placeholder first, real weights used in forward
        def __init__(self, table):
            super().__init__()
            self.placeholder = nn.Parameter(torch.empty(3, device="meta"))
            self.oracle = OracleModel(table)

        def forward(self, x):
            return self.oracle(x)

    model = Offloaded([0.5, 2.0, 1.0, 3.0])
    assert next(model.parameters()).device.type == "meta"
    (out,) = SBLoader([oracle_batch(range(4))], model, ce, keep=0.5, device="cpu")
    assert ids_of(out) == [1, 3]


class TwoOutputs(OracleModel):
    def forward(self, x):
        return super().forward(x), x  # (logits, aux), like many models


def test_a_model_that_returns_a_tuple_names_the_forward_hook():
    sb = SBLoader([oracle_batch(range(4))], TwoOutputs([0.5, 2.0, 1.0, 3.0]), ce, keep=0.5)
    with pytest.raises(
        TypeError, match=r"model returned, a tuple rather than a tensor.*forward=lambda m, x: m\(x\)\[0\]"
    ):
        next(iter(sb))
    fixed = SBLoader(
        [oracle_batch(range(4))], TwoOutputs([0.5, 2.0, 1.0, 3.0]), ce, keep=0.5, forward=lambda m, x: m(x)[0]
    )
    assert ids_of(next(iter(fixed))) == [1, 3]


def _compiled_run(dynamic: bool | None) -> dict:
    """A cached, observed SB run of a compiled tiny model, scoring and training through the same compiled module;
    the ``eager`` backend counts Dynamo's graphs without paying for inductor's code generation."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from sbdata import LossCache, SBLoader

    torch._dynamo.reset()
    counters.clear()
    n, batch = 300, 32  # a short last batch of 12
    generator = torch.Generator().manual_seed(0)
    x_all, y_all = torch.randn(n, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    compiled = torch.compile(model, backend="eager", dynamic=dynamic)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cache = LossCache(staleness=1, size=n)
    sb = SBLoader([], compiled, F.cross_entropy, keep=0.25, cache=cache, id_key=-1)
    for _ in range(6):
        order = torch.randperm(n, generator=generator)
        sb.loader = [(x_all[i], y_all[i], i) for i in (order[s : s + batch] for s in range(0, n, batch))]
        for x, y, index in sb:
            losses = F.cross_entropy(compiled(x), y, reduction="none")
            sb.observe((x, y, index), losses)
            optimizer.zero_grad()
            losses.mean().backward()
            optimizer.step()
    assert sb.stats.samples_reused > 0
    return {name: dict(values) for name, values in counters.items()}


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [None, False])
def test_compiled_model_scores_without_falling_back_to_eager(dynamic):
    import torch._dynamo

    found = _compiled_run(dynamic)
    graphs = found["stats"]["unique_graphs"]
    assert found["frames"]["total"] == found["frames"]["ok"]  # every frame compiled: no eager fallback
    assert not any("recompile limit" in reason for reason in found.get("unimplemented", {}))
    if dynamic is None:  # no-grad scoring, grad training, then one dynamic batch dimension
        assert graphs <= 3, found
    else:  # scoring in 4 bucket sizes + the short batch, training at 2 sizes: under the recompile limit
        assert graphs <= torch._dynamo.config.recompile_limit, found


def test_quality_is_accuracy_for_class_logits_and_minus_the_loss_otherwise():
    import torch.nn.functional as F

    from sbdata.scoring import Scorer

    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [5.0, 0.0, 0.0]])
    targets = torch.tensor([0, 1, 0, 2])
    model = torch.nn.Identity()
    scorer = Scorer(F.cross_entropy)
    assert scorer.quality(model, logits, targets, 4, torch.device("cpu")).tolist() == [1.0, 1.0, 0.0, 0.0]
    # a sequence (N, T, C) against (N, T): minus the per-sample loss, averaged over the tokens
    tokens = torch.randn(2, 3, 5)
    labels = torch.randint(0, 5, (2, 3))
    seq = Scorer(lambda out, y, reduction="none": F.cross_entropy(out.transpose(1, 2), y, reduction=reduction))
    expected = -F.cross_entropy(tokens.transpose(1, 2), labels, reduction="none").mean(1)
    assert torch.allclose(seq.quality(model, tokens, labels, 2, torch.device("cpu")), expected)
    # regression: minus the loss as well
    mse = Scorer(F.mse_loss)
    out = mse.quality(model, torch.tensor([1.0, 2.0]), torch.tensor([1.5, 2.0]), 2, torch.device("cpu"))
    assert out.tolist() == [-0.25, -0.0]
    # the pass leaves the model's mode alone
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5)).train()
    scorer.quality(net, torch.randn(4, 3), targets, 4, torch.device("cpu"))
    assert net.training


@pytest.mark.slow
def test_a_compiled_batchnorm_model_scores_with_batch_statistics_in_one_graph_and_updates_nothing():
    """The default pass on a compiled BatchNorm model: every frame compiled, one graph for scoring and one for
    training, and the running statistics count the training steps alone."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    compiled = torch.compile(model, backend="eager", dynamic=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(0)
    data = [
        (torch.randn(32, 8, generator=generator), torch.randint(0, 3, (32,), generator=generator)) for _ in range(5)
    ]
    sb = SBLoader(data, compiled, F.cross_entropy, keep=0.25)
    for _ in range(3):
        for x, y in sb:
            optimizer.zero_grad()
            F.cross_entropy(compiled(x), y).backward()
            optimizer.step()
    assert model[1].num_batches_tracked.item() == 15  # training steps only: scoring updated nothing
    assert counters["frames"]["total"] == counters["frames"]["ok"] and counters["stats"]["unique_graphs"] <= 2


def test_a_batch_of_one_is_scored_with_the_running_statistics_by_default():
    """One sample has no statistics of its own (BatchNorm refuses to normalise it by them): the default pass scores it
    as eval mode does, with or without autocast, rather than raising."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)).train()
    x, y = torch.randn(1, 4), torch.tensor([1])
    for autocast in (None, torch.bfloat16):
        one = Scorer(F.cross_entropy, autocast_dtype=autocast)(model, x, y, 1, CPU)
        evaluated = Scorer(F.cross_entropy, score_mode="eval", autocast_dtype=autocast)(model, x, y, 1, CPU)
        assert torch.equal(one, evaluated)
