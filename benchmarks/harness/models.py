"""The benchmarks' models and their fixed training recipes: the examples' MNIST-1D model families (``cnn``, ``mlp``,
``gru``) with one recipe each. The language model (``ByteLM``) is in :mod:`benchmarks.harness.lm`."""

from __future__ import annotations

from examples.common import MODELS

__all__ = ["MODELS", "RECIPES"]

RECIPES = {  # one fixed recipe per model family: AdamW, one-cycle LR keyed to loader progress, batch B
    "cnn": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
    "mlp": {"lr": 2e-3, "weight_decay": 1e-4, "batch": 256},
    "gru": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
}
