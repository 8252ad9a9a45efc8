"""Per-task hooks (split, forward, per-sample loss) for models whose batches are not ``(x, y)``: causal language
models, sequence classification and token classification.
"""

from sbdata.tasks._hooks import causal_lm, logits_of, pad_right, sequence_classification, token_classification

__all__ = [
    "causal_lm",
    "logits_of",
    "pad_right",
    "sequence_classification",
    "token_classification",
]
