"""The language-model benchmark's data and model: the Python standard library as a byte-level corpus, and a small
causal transformer in plain torch.

The corpus's split by file (validation, the irreducible model's hold-out, training), its ``CONTEXT``-byte chunks and
the noise-like proxy (a chunk's zlib ratio; the top 10% of the training chunks): ``benchmarks/lm/README.md``."""

from __future__ import annotations

import hashlib
import math
import os
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

CONTEXT = 128  # bytes per sequence
NOISE_QUANTILE = 0.9  # chunks above this quantile of the training zlib ratios are noise-like
VALIDATION_SEQUENCES = 512


def stdlib_files(root: str | None = None) -> list[Path]:
    """The standard library's ``.py`` files in sorted path order (third-party and cache folders excluded)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__"))
        files += [Path(folder) / name for name in names if name.endswith(".py")]
    return sorted(files)


def chunks_of(files: list[Path], context: int = CONTEXT) -> torch.Tensor:
    """The files' bytes, concatenated with a newline between files, as (N, context) uint8 chunks (tail dropped)."""
    data = b"\n".join(path.read_bytes() for path in files)
    usable = len(data) // context * context
    return torch.frombuffer(bytearray(data[:usable]), dtype=torch.uint8).view(-1, context)


def zlib_ratios(chunks: torch.Tensor) -> torch.Tensor:
    """Compressed over raw size of each chunk (zlib level 9), (N,) float32."""
    rows = chunks.numpy()
    return torch.tensor([len(zlib.compress(row.tobytes(), 9)) / len(row) for row in rows], dtype=torch.float32)


def noise_like(ratios: torch.Tensor, share: float = 1 - NOISE_QUANTILE) -> torch.Tensor:
    """Flags on exactly ``round(share * N)`` chunks with the highest ratios (ties broken by position), (N,) bool."""
    order = torch.sort(ratios, descending=True, stable=True).indices
    flags = torch.zeros(len(ratios), dtype=torch.bool)
    flags[order[: round(share * len(ratios))]] = True
    return flags


@dataclass
class Corpus:
    """The three splits as chunks, the training chunks' zlib ratios and noise-like flags, and what was read."""

    train: torch.Tensor  # (N, CONTEXT) uint8
    validation: torch.Tensor  # (VALIDATION_SEQUENCES, CONTEXT) uint8, evenly spaced over the validation files
    holdout: torch.Tensor  # (M, CONTEXT) uint8: the irreducible model's data
    ratios: torch.Tensor  # (N,) zlib ratio of each training chunk
    noisy: torch.Tensor  # (N,) bool: the top 10% of the training chunks by ratio
    threshold: float  # the smallest ratio of a noise-like chunk
    description: dict

    def subset(self, size: int, seed: int = 7) -> torch.Tensor:
        """``size`` training-chunk indices drawn without replacement by ``seed`` (the data-repeating regime's set)."""
        return torch.randperm(len(self.train), generator=torch.Generator().manual_seed(seed))[:size]


def load_corpus(root: str | None = None, validation: int = VALIDATION_SEQUENCES) -> Corpus:
    """Read, split and chunk the standard library (about 3 s for 30 MB)."""
    files = stdlib_files(root)
    if len(files) < 60:
        raise RuntimeError(f"found only {len(files)} .py files under the standard library at {root!r}")
    val_files = files[0::20]
    holdout_files = files[10::20]
    train_files = [path for i, path in enumerate(files) if i % 20 not in (0, 10)]
    train = chunks_of(train_files)
    val_all = chunks_of(val_files)
    pick = torch.linspace(0, len(val_all) - 1, min(validation, len(val_all))).round().long()
    ratios = zlib_ratios(train)
    noisy = noise_like(ratios)
    threshold = float(ratios[noisy].min())
    listing = "\n".join(str(path.relative_to(files[0].parent.parent)) for path in files)
    description = {
        "root": str(Path(root or sysconfig.get_paths()["stdlib"])),
        "files": {"train": len(train_files), "validation": len(val_files), "holdout": len(holdout_files)},
        "chunks": {"train": len(train), "validation": len(pick), "validation_pool": len(val_all)},
        "train_bytes": len(train) * CONTEXT,
        "context": CONTEXT,
        "noise_threshold_zlib_ratio": round(threshold, 4),
        "files_sha256": hashlib.sha256(listing.encode()).hexdigest()[:16],
    }
    return Corpus(train, val_all[pick], chunks_of(holdout_files), ratios, noisy, threshold, description)


class ByteLM(nn.Module):
    """A pre-norm causal transformer over bytes: embedding plus learned positions, ``layers`` blocks, a linear head.

    Args:
        width: model width. Default 128 (about 0.48M parameters with 2 layers).
        layers: transformer blocks. Default 2.
        heads: attention heads. Default 4.
        context: longest sequence, in bytes. Default ``CONTEXT``.
    """

    def __init__(self, width: int = 128, layers: int = 2, heads: int = 4, context: int = CONTEXT) -> None:
        super().__init__()
        self.width, self.layers, self.context = width, layers, context
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

    def flops_per_token(self) -> float:
        """Forward FLOPs per token (2 per multiply-add): the linear layers, and attention over the full context
        (the causal mask hides half of it but does not skip the work)."""
        linear = self.layers * (4 * self.width**2 + 8 * self.width**2) + 256 * self.width
        attention = self.layers * 2 * self.context * self.width  # scores and weighted sum, causal half of 2*T*W
        return 2.0 * (linear + attention)


def validation_loss(model: nn.Module, chunks: torch.Tensor, batch: int = 128) -> float:
    """Mean next-byte cross-entropy over every target byte of ``chunks``, in nats per byte (eval mode, no grad)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for start in range(0, len(chunks), batch):
                ids = chunks[start : start + batch].long()
                logits = model(ids)[:, :-1]
                loss = nn.functional.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1), reduction="sum")
                total += float(loss)
                count += ids[:, 1:].numel()
    finally:
        model.train(was_training)
    return total / count


def perplexity(nats_per_byte: float) -> float:
    return math.exp(nats_per_byte)
