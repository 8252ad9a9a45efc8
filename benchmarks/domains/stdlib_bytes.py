"""The Python standard library as bytes (real text): a byte-level language model continued from code onto its docs.

Data: the standard library's ``.py`` files (this Python's, sorted; third-party and cache folders left out) as
128-byte chunks, a newline between files. The old domain is code (every 20th file held out for testing); the new one
``pydoc_data/topics.py``, the documentation text shipped with Python (its last 20% for testing). From a fixed draw
(:data:`DRAW_SEED`), :class:`Sizes` cuts the pretraining set, the continued mix (replayed, fresh and new chunks, in
that order), the mix, new and old test sets and the irreducible model's hold-out (code and docs). Family ``bytelm``:
a pre-norm causal transformer over bytes (0.48M parameters); the user's recipe: AdamW (0.9, 0.95), weight decay 0.01,
batch 16, LR 2e-3, one-cycle. The metric: nats per byte (lower is better).
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from benchmarks.lab._sb import causal_lm
from benchmarks.lab.domain import NATS, Data, Domain

CONTEXT = 128  # bytes per sequence
DOCS = "pydoc_data/topics.py"
DRAW_SEED = 7
HOOKS = causal_lm()  # sbdata's next-token loss, per sequence


@dataclass(frozen=True)
class Sizes:
    """How many 128-byte chunks each part takes."""

    pretrain: int = 3_000
    replay: int = 530
    fresh: int = 270
    new: int = 200
    test_old: int = 192
    test_new: int = 192
    test_mix_new: int = 48  # new test chunks in the mix test set (80/20 with test_old)
    holdout_old: int = 400  # the irreducible model's hold-out: code chunks
    holdout_new: int = 100  # and documentation chunks
    pretrain_epochs: int = 3

    @property
    def mix(self) -> int:
        return self.replay + self.fresh + self.new


SMOKE_SIZES = Sizes(pretrain=96, replay=48, fresh=24, new=24, test_old=16, test_new=16, test_mix_new=4,
                    holdout_old=16, holdout_new=4, pretrain_epochs=1)  # fmt: skip


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files in sorted path order (third-party and cache folders left out)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__"))
        files += [Path(folder) / name for name in names if name.endswith(".py")]
    return sorted(files)


def chunks_of(files: list[Path], context: int = CONTEXT) -> torch.Tensor:
    """The files' bytes, a newline between files, as (N, context) uint8 chunks (the tail dropped)."""
    data = b"\n".join(path.read_bytes() for path in files)
    usable = len(data) // context * context
    return torch.frombuffer(bytearray(data[:usable]), dtype=torch.uint8).view(-1, context)


class ByteLM(nn.Module):
    """A pre-norm causal transformer over bytes: embedding plus learned positions, ``layers`` blocks, a linear head."""

    def __init__(self, width: int = 128, layers: int = 2, heads: int = 4, context: int = CONTEXT) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.randn(context, width) * 0.02)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, 256) of the next byte at every position of ``input_ids`` (B, T), T <= context."""
        length = input_ids.shape[1]
        hidden = self.embed(input_ids.long()) + self.position[:length]
        hidden = self.blocks(hidden, mask=self.causal[:length, :length], is_causal=True)
        return self.head(self.norm(hidden))


class _Table(nn.Module):
    """A language model that does almost nothing: each byte's logits are a row of a table."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(256, 256)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.table(input_ids)


def nats_per_byte(model: nn.Module, chunks: torch.Tensor, batch: int = 128) -> float:
    """Mean next-byte cross-entropy over every target byte of ``chunks`` (eval mode, no grad; the mode restored)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for start in range(0, len(chunks), batch):
                ids = chunks[start : start + batch].long()
                logits = model(ids)[:, :-1]
                total += float(nn.functional.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1),
                                                           reduction="sum"))  # fmt: skip
                count += ids[:, 1:].numel()
    finally:
        model.train(was_training)
    return total / count


def split_batch(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """sbdata's ``split=``: the model's inputs and the labels of a dict batch; ``ids`` ride along unscored."""
    return {"input_ids": batch["input_ids"]}, batch["input_ids"]


def _spaced(chunks: torch.Tensor, count: int) -> torch.Tensor:
    if count > len(chunks):
        raise ValueError(f"asked for {count} chunks of {len(chunks)}: lower the Sizes")
    return chunks[torch.linspace(0, len(chunks) - 1, count).round().long()]


class StdlibBytes(Domain):
    name = "stdlib_bytes"
    kind = "real"
    metric = NATS
    families: ClassVar[dict[str, Callable[[], nn.Module]]] = {"bytelm": ByteLM}
    recipes: ClassVar[dict[str, dict[str, Any]]] = {
        "bytelm": {"lr": 2e-3, "weight_decay": 0.01, "batch": 16, "betas": (0.9, 0.95)}
    }
    id_key = "ids"

    def data(self, *, smoke: bool, pretrained_dir: Path | None = None, root: Path | None = None,
             continued: bool = True) -> Data:  # fmt: skip
        s = SMOKE_SIZES if smoke else Sizes()
        base = Path(root or sysconfig.get_paths()["stdlib"])
        files = stdlib_files(base)
        docs = base / DOCS
        if docs not in files:
            raise SystemExit(f"no {docs}: the new domain is the documentation text shipped with Python")
        code = [path for path in files if path != docs]
        train_files = [path for i, path in enumerate(code) if i % 20]
        old_train, old_test = chunks_of(train_files), chunks_of(code[0::20])
        doc_chunks = chunks_of([docs])
        cut = int(0.8 * len(doc_chunks))
        new_train, new_test = doc_chunks[:cut], doc_chunks[cut:]
        draw = torch.Generator().manual_seed(DRAW_SEED)
        order = torch.randperm(len(old_train), generator=draw)
        used = s.pretrain + s.fresh
        if used + s.holdout_old > len(order) or s.replay > s.pretrain or s.new + s.holdout_new > len(new_train):
            raise ValueError(f"{s}: needs replay <= pretrain, pretrain + fresh + holdout_old <= {len(order)} code "
                             f"chunks and new + holdout_new <= {len(new_train)} documentation chunks")  # fmt: skip
        pre, fresh = old_train[order[: s.pretrain]], old_train[order[s.pretrain : used]]
        docs_order = torch.randperm(len(new_train), generator=draw)
        new = new_train[docs_order[: s.new]]
        holdout = torch.cat([old_train[order[used : used + s.holdout_old]],
                             new_train[docs_order[s.new : s.new + s.holdout_new]]])  # fmt: skip
        test_old, test_new = _spaced(old_test, s.test_old), _spaced(new_test, s.test_new)
        id_map = torch.full((s.pretrain,), -1, dtype=torch.long)
        id_map[: s.replay] = torch.arange(s.replay)
        tests = {"mix": (torch.cat([test_old, test_new[: s.test_mix_new]]),), "new": (test_new,), "old": (test_old,)}
        description = {"root": str(base), "sizes": vars(s), "code_files": len(code), "new_share": s.new / s.mix}
        return Data((torch.cat([pre[: s.replay], fresh, new]),), tests, pretrain=(pre,), id_map=id_map,
                    holdout=(holdout,), description=description, pretrained_dir=pretrained_dir)  # fmt: skip

    def batch(self, fields: tuple[torch.Tensor, ...], index: torch.Tensor, ids: bool) -> Any:
        return {"input_ids": fields[0][index].long(), "ids": index}  # the ids always ride (the warm cache's key)

    def loss(self, model: nn.Module, batch: Any, reduction: str = "none") -> torch.Tensor:
        inputs, labels = split_batch(batch)
        losses = HOOKS["reduce"](HOOKS["loss_fn"](HOOKS["forward"](model, inputs), labels), labels)
        return losses.mean() if reduction == "mean" else losses

    def sb_options(self) -> dict[str, Any]:
        return {"loss_fn": HOOKS["loss_fn"], "forward": HOOKS["forward"], "reduce": HOOKS["reduce"],
                "split": split_batch}  # fmt: skip

    def evaluate(self, model: nn.Module, data: Data) -> dict[str, float]:
        return {f"nats_{name}": nats_per_byte(model, fields[0]) for name, fields in data.tests.items()}

    def tiny(self) -> nn.Module:
        return _Table()

    def pretraining(self, family: str) -> dict[str, Any]:
        return {"batch": 16, "lr": 4e-3, "epochs": Sizes().pretrain_epochs}


DOMAIN = StdlibBytes()
