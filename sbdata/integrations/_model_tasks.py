"""Which per-sample loss fits a Transformers model: read from its class, as the Auto classes map them.

Shapes cannot tell the tasks apart (a causal LM and a token classifier both give (B, T, C) logits for (B, T)
labels, the one shifted, the other not), so the model's class decides: the class names of Transformers'
``AutoModelForCausalLM``, ``...ForSequenceClassification`` and ``...ForTokenClassification`` mappings, then the
suffixes those names share (for models outside Transformers, e.g. PEFT's ``PeftModelForCausalLM``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers.models.auto import modeling_auto

from sbdata.tasks import causal_lm, logits_of, sequence_classification, token_classification

__all__ = ["TASKS", "task_hooks", "task_of"]

TASKS = ("causal_lm", "sequence_classification", "token_classification")
_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
)
_SUFFIXES = (("ForCausalLM", "LMHeadModel"), ("ForSequenceClassification",), ("ForTokenClassification",))


def _class_names(mapping: str) -> set[str]:
    names: set[str] = set()
    for value in getattr(modeling_auto, mapping, {}).values():
        names.update([value] if isinstance(value, str) else value)
    return names


def task_of(model: Any) -> str | None:
    """``"causal_lm"``, ``"sequence_classification"``, ``"token_classification"`` or None (not known)."""
    name = type(model).__name__
    for task, mapping in zip(TASKS, _MAPPINGS, strict=True):
        if name in _class_names(mapping):
            return task
    for task, suffixes in zip(TASKS, _SUFFIXES, strict=True):
        if name.endswith(suffixes):
            return task
    return None


def task_hooks(model: Any, options: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """The task hooks for ``model``'s task, which ``options`` (the user's ``sb_options``) then override.

    Raises:
        ValueError: for a model of no known task when ``options`` has no ``loss_fn``, naming the fix.
    """
    task = task_of(model)
    if task == "causal_lm":
        return causal_lm()
    if task == "token_classification":
        return token_classification()
    if task == "sequence_classification":
        return sequence_classification(getattr(getattr(model, "config", None), "problem_type", None))
    if "loss_fn" in options:  # the user's loss: split off the labels and score the logits, nothing more assumed
        return {"split": causal_lm()["split"], "forward": logits_of}
    raise ValueError(
        f"SBTrainer cannot tell which per-sample loss fits a {type(model).__name__}: it knows causal language "
        "models (*ForCausalLM, *LMHeadModel), *ForSequenceClassification and *ForTokenClassification. Pass "
        'sb_options["loss_fn"] (with "split", "forward" and "reduce" as your batches need), e.g. '
        "sb_options={**sbdata.tasks.causal_lm(), 'keep': 0.5} for a causal LM of your own"
    )
