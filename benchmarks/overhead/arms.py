"""Arms of the overhead benchmark: ways to turn the same loader batches into the same selected batches.

Every arm is a factory ``make(model, batches, keep) -> epoch`` where ``epoch()`` returns an iterator over the
selected ``(x, y)`` batches of one pass over ``batches`` (a list of CPU tensor pairs). All arms run the same scoring
forward (eval mode, no grad, ``F.cross_entropy(reduction='none')``), the same top-k selection (the ``keep_count``
highest losses, ties to the lower index, kept in batch order) and the same ``index_select``.

Where the torchdata node and the WebDataset stage plug in: :func:`optional_arms` registers them only when
``sbdata.nodes`` / ``sbdata.wds`` exist, so this file runs before those modules are merged. Their factories follow
``docs/design.md``; an arm whose construction fails is reported as skipped with the error, not crashed on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness._sb import SBLoader, has_nodes, has_wds, keep_count, sb_select, sb_selector

Epoch = Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]
Factory = Callable[[nn.Module, list, float], Epoch]


def hand_written(model: nn.Module, batches: list, keep: float) -> Epoch:
    """The reference: scoring, selection and indexing written inline, as a user would without sbdata."""

    def epoch() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in batches:
            was_training = model.training
            model.eval()
            with torch.no_grad():
                losses = F.cross_entropy(model(x), y, reduction="none")
            model.train(was_training)
            k = keep_count(keep, len(y))
            index = torch.sort(torch.sort(losses, descending=True, stable=True).indices[:k]).values
            yield x.index_select(0, index), y.index_select(0, index)

    return epoch


def sbloader(model: nn.Module, batches: list, keep: float, **options) -> Epoch:
    """``SBLoader`` with its defaults (``policy='topk'``, ``nan_policy='raise'``) unless ``options`` say otherwise."""
    loader = SBLoader(batches, model, F.cross_entropy, keep=keep, **options)
    return lambda: iter(loader)


def sbloader_nan_keep(model: nn.Module, batches: list, keep: float) -> Epoch:
    """``SBLoader(nan_policy='keep')``: no per-step host read of the non-finite flag."""
    return sbloader(model, batches, keep, nan_policy="keep")


def nodes_arm(model: nn.Module, batches: list, keep: float) -> Epoch:  # pragma: no cover - needs sbdata.nodes
    """``sbdata.nodes.SBSelector`` over a torchdata ``IterableWrapper``, driven by ``torchdata.nodes.Loader``."""
    from torchdata.nodes import IterableWrapper, Loader

    loader = Loader(sb_selector()(IterableWrapper(batches), model, F.cross_entropy, keep=keep))
    return lambda: iter(loader)


def wds_arm(model: nn.Module, batches: list, keep: float) -> Epoch:  # pragma: no cover - needs sbdata.wds
    """``sbdata.wds.sb_select`` as a pipeline stage over an iterator of batches."""
    stage = sb_select()(model, F.cross_entropy, keep=keep)
    return lambda: iter(stage(iter(batches)))


ARMS: dict[str, Factory] = {
    "hand-written": hand_written,
    "SBLoader": sbloader,
    "SBLoader nan_policy=keep": sbloader_nan_keep,
}


def optional_arms() -> dict[str, Factory]:
    """The front ends being written elsewhere: added here when their modules exist (PLUG-IN POINT)."""
    found: dict[str, Factory] = {}
    if has_nodes():
        found["nodes.SBSelector"] = nodes_arm
    if has_wds():
        found["wds.sb_select"] = wds_arm
    return found


def all_arms() -> dict[str, Factory]:
    return {**ARMS, **optional_arms()}
