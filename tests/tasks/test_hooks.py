"""sbdata.tasks.causal_lm: the causal shift, -100 and padding masking, a per-sequence mean over real tokens, and
selection that padding cannot bias."""

import itertools
import math

import pytest
import torch
from torch import nn

from sbdata import SBLoader, SelectionEngine
from sbdata.tasks import causal_lm

VOCAB = 5
PAD = 0


class BigramOracle(nn.Module):
    """Logits at position t depend only on token t: ``table[token]``, so every per-token loss is known by hand."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.table = nn.Parameter(torch.randn(VOCAB, VOCAB, generator=generator) * 2)

    def forward(self, input_ids, attention_mask=None):
        return (self.table[input_ids],)  # a tuple, as Transformers models return with return_dict=False


def token_loss(model: BigramOracle, current: int, following: int) -> float:
    return -torch.log_softmax(model.table[current].detach().double(), 0)[following].item()


def sequence_loss(model: BigramOracle, tokens: list[int]) -> float:
    pairs = list(itertools.pairwise(tokens))
    return sum(token_loss(model, a, b) for a, b in pairs) / len(pairs) if pairs else 0.0


def padded_batch(sequences: list[list[int]], extra: int = 0, labels: bool = False) -> dict:
    width = max(map(len, sequences)) + extra
    ids = torch.full((len(sequences), width), PAD)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for row, tokens in enumerate(sequences):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    batch = {"input_ids": ids, "attention_mask": mask}
    if labels:
        batch["labels"] = ids.masked_fill(mask == 0, -100)
    return batch


SEQUENCES = [[1, 2, 3], [4, 4, 4, 4, 4, 4, 1], [2, 1], [3, 3, 2, 1, 4, 2], [1, 4, 3, 2, 1, 3, 4, 2]]


def scores(model: nn.Module, batch: dict) -> torch.Tensor:
    adapter = causal_lm()
    engine = SelectionEngine(model, adapter["loss_fn"], **{k: v for k, v in adapter.items() if k != "loss_fn"})
    inputs, targets = adapter["split"](batch)
    return engine.sb_step.scorer(model, inputs, targets, len(SEQUENCES), torch.device("cpu"))


@pytest.mark.parametrize("labels", [False, True])
def test_per_sequence_loss_is_the_mean_over_real_next_tokens(labels):
    model = BigramOracle()
    got = scores(model, padded_batch(SEQUENCES, extra=3, labels=labels))
    expected = [sequence_loss(model, tokens) for tokens in SEQUENCES]
    assert got.tolist() == pytest.approx(expected, rel=1e-5)


def test_ignore_index_labels_carry_no_loss():
    model = BigramOracle()
    batch = padded_batch(SEQUENCES)
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    batch["labels"][1, 4:] = -100  # a prompt-masked example: only targets 1..3 of sequence 1 count
    got = scores(model, batch)
    tokens = SEQUENCES[1]
    expected = sum(token_loss(model, tokens[t], tokens[t + 1]) for t in range(3)) / 3
    assert got[1].item() == pytest.approx(expected, rel=1e-5)


def test_padding_does_not_bias_selection():
    """The same sequences padded by 0 or 12 extra positions get the same scores and the same selection; the
    default reduce (a mean over every position, padding included) would rank long sequences as harder."""
    model = BigramOracle()
    adapter = causal_lm()
    selections = []
    for extra in (0, 12):
        batch = padded_batch(SEQUENCES, extra=extra)
        (kept,) = list(SBLoader([batch], model, keep=0.4, **adapter))
        selections.append(kept["input_ids"][:, :3].tolist())
    assert selections[0] == selections[1]
    losses = [sequence_loss(model, tokens) for tokens in SEQUENCES]
    hardest = sorted(sorted(range(len(SEQUENCES)), key=lambda i: -losses[i])[: math.ceil(0.4 * len(SEQUENCES))])
    assert selections[0] == [SEQUENCES[i][:3] for i in hardest]
    padded = scores(model, padded_batch(SEQUENCES, extra=12))
    assert padded.tolist() == pytest.approx(scores(model, padded_batch(SEQUENCES)).tolist(), rel=1e-6)


def test_a_real_causal_lm_scores_padded_sequences_alike():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    short, long = scores(model, padded_batch(SEQUENCES)), scores(model, padded_batch(SEQUENCES, extra=9))
    assert torch.allclose(short, long, atol=1e-5)
    alone = torch.cat([scores(model, padded_batch([tokens] * len(SEQUENCES)))[:1] for tokens in SEQUENCES])
    assert torch.allclose(short, alone, atol=1e-5)  # padding in a batch scores like no padding at all


def test_non_mapping_batches_are_refused_naming_the_fix():
    with pytest.raises(ValueError, match="pass your own split="):
        causal_lm()["split"]((torch.zeros(2, 3), torch.zeros(2)))
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        causal_lm(ignore_index=None)


def test_the_default_reduce_would_let_padding_bias_selection():
    """The control: without the adapter's reduce, the padded positions dilute short sequences' losses."""
    model = BigramOracle()
    adapter = {key: value for key, value in causal_lm().items() if key != "reduce"}
    batch = padded_batch(SEQUENCES)
    (kept,) = list(SBLoader([batch], model, keep=0.4, **adapter))
    losses = [sequence_loss(model, tokens) for tokens in SEQUENCES]
    hardest = sorted(sorted(range(len(SEQUENCES)), key=lambda i: -losses[i])[: math.ceil(0.4 * len(SEQUENCES))])
    assert kept["input_ids"][:, :3].tolist() != [SEQUENCES[i][:3] for i in hardest]


def test_pad_right_builds_the_batch_causal_lm_expects():
    from sbdata.tasks import pad_right

    batch = pad_right([{"input_ids": [5, 6, 7], "index": 0}, {"input_ids": torch.tensor([8])}], pad_id=1)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 1, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7], [8, -100, -100]]
    with pytest.raises(ValueError, match="no 'input_ids'"):
        pad_right([{"tokens": [1]}])
    with pytest.raises(ValueError, match="expected one sequence"):
        pad_right([{"input_ids": [[1, 2]]}])
    with pytest.raises(ValueError, match="at least one"):
        pad_right([])


def test_sequence_classification_losses_per_problem_type_by_hand():
    from sbdata.tasks import sequence_classification

    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, -2.0]])
    loss_fn = sequence_classification()["loss_fn"]
    single = loss_fn(logits, torch.tensor([0, 2]))  # integer labels: cross-entropy
    expected = [-torch.log_softmax(row, 0)[label].item() for row, label in zip(logits, [0, 2], strict=True)]
    assert torch.allclose(single, torch.tensor(expected))
    multi = loss_fn(logits, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))  # float labels: BCE, mean per sample
    probs, targets = torch.sigmoid(logits), torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    by_hand = -(targets * probs.log() + (1 - targets) * (1 - probs).log()).mean(1)
    assert torch.allclose(multi, by_hand)
    regression = loss_fn(torch.tensor([[1.5], [-0.5]]), torch.tensor([1.0, 0.5]))  # one logit: squared error
    assert torch.allclose(regression, torch.tensor([0.25, 1.0]))
    forced = sequence_classification("regression")["loss_fn"](logits, torch.zeros(2, 3))
    assert torch.allclose(forced, logits.square().mean(1))
    with pytest.raises(ValueError, match="problem_type must be None or one of"):
        sequence_classification("ranking")


def test_token_classification_scores_labelled_tokens_without_a_shift():
    from sbdata.tasks import token_classification

    hooks = token_classification()
    logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[1, 2, 3], [0, -100, -100]])
    per_token = hooks["loss_fn"](logits, labels)
    losses = hooks["reduce"](per_token, labels)
    log_probs = torch.log_softmax(logits, -1)
    first = -(log_probs[0, 0, 1] + log_probs[0, 1, 2] + log_probs[0, 2, 3]) / 3
    assert torch.allclose(losses, torch.stack([first, -log_probs[1, 0, 0]]))
    with pytest.raises(ValueError, match="needs 'labels'"):
        hooks["split"]({"input_ids": labels})


def test_causal_lm_refuses_class_logits_naming_sequence_classification():
    with pytest.raises(ValueError, match=r"got logits \(2, 3\) and labels \(2,\).*sequence_classification\(\)"):
        causal_lm()["loss_fn"](torch.zeros(2, 3), torch.tensor([0, 1]))
