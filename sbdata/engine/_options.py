"""The engine's keyword options: their types, the checks the engine makes itself, and a saved state's fingerprint.

:class:`EngineOptions` lists every keyword option of :class:`~sbdata.SelectionEngine` with its type; the front ends
take ``**options: Unpack[EngineOptions]``, so editors complete the options and type checkers check them. The
options that a component owns are checked there (the loss and score options by ``Scorer``, the policy, ids and
cache by the selection step, ``sync`` by ``_dist.lockstep_group``); :func:`check_engine_options` checks the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeAlias, TypedDict

import torch
from torch import nn

from sbdata.auto import Auto
from sbdata.cache import LossCache
from sbdata.engine._schedule import Schedule
from sbdata.policies import SelectionPolicy

__all__ = ["EngineOptions", "LossFn"]

LossFn: TypeAlias = Callable[..., torch.Tensor] | nn.Module
"""A per-sample loss: called as ``loss_fn(outputs, targets, reduction="none")``, or a loss module."""
PolicyName: TypeAlias = Literal["topk", "rank", "random", "history", "importance"]
"""The built-in policies by name (``sbdata.policies.POLICIES``)."""
PolicyArg: TypeAlias = PolicyName | SelectionPolicy
"""What ``policy=`` takes: a built-in policy's name or a :class:`~sbdata.SelectionPolicy` instance."""
KeepArg: TypeAlias = float | Literal["auto"] | Auto | None
"""What ``keep=`` takes: a share in (0, 1], ``"auto"`` or :class:`~sbdata.Auto` settings, or None (0.5)."""
SplitFn: TypeAlias = Callable[[Any], tuple[Any, Any]]
"""``split(batch) -> (inputs, targets)``."""
ForwardFn: TypeAlias = Callable[[nn.Module, Any], Any]
"""``forward(model, inputs) -> outputs``."""
ReduceFn: TypeAlias = Callable[[torch.Tensor, Any], torch.Tensor]
"""``reduce(losses, targets) -> (B,)`` per-sample losses."""
IdKey: TypeAlias = str | int | Callable[[Any], Any]
"""Where a batch keeps per-sample ids: a mapping key, a tuple position or ``callable(batch)``."""
ScoreMode: TypeAlias = Literal["batch", "eval", "train"]
"""How the scoring forward runs (``score_mode=``): normalising with each batch's own statistics, in eval mode, or in
train mode."""
ScoreName: TypeAlias = Literal["loss", "gradnorm"]
"""What the scoring pass measures per sample (``score=``): the loss, or its gradient norm w.r.t. the outputs."""
NanPolicy: TypeAlias = Literal["raise", "drop", "keep"]
SyncMode: TypeAlias = Literal["local", "global"]


class EngineOptions(TypedDict, total=False):
    """Every keyword option of :class:`~sbdata.SelectionEngine` and of each front end (the user guide's options table,
    docs/guide/wrap_a_loader.md).

    Attributes:
        keep: share of each SB batch to keep, in (0, 1]. Default 0.5. For ``"history"`` it sets
            ``beta = 1/keep - 1``. ``"auto"`` (or ``sbdata.Auto(...)`` for its settings) selects only where a
            trial on the live run measures more progress per second than whole batches, at the share that
            measured best (``docs/method_card.md``).
        policy: ``"topk"``, ``"rank"``, ``"random"``, ``"history"``, ``"importance"`` or a
            :class:`~sbdata.SelectionPolicy`. Default ``"topk"``.
        schedule: a :class:`~sbdata.Schedule`; None selects on every batch. Default None.
        scale_factor: downsampling of the inputs for scoring only, in (0, 1]. Default 1.
        device: scoring device; None uses the model's. Tensor fields are moved there. Default None.
        score_mode: how the scoring forward runs. ``"batch"``: as training normalises, dropout off (the model in
            eval mode, but BatchNorm-like layers use the batch's own statistics and update no running statistics:
            nothing in the model changes). ``"eval"``: the model's eval mode (running statistics; on its first 3
            ``observe`` calls sbdata compares the scoring losses with the training losses and warns when the
            running statistics are far off). ``"train"``: train mode, dropout drawn from a seeded stream, every
            buffer restored. Without BatchNorm-like layers ``"batch"`` and ``"eval"`` are the same pass.
            Default ``"batch"``.
        autocast_dtype: dtype for ``torch.autocast`` around the scoring pass (e.g. ``torch.bfloat16``: a cheaper
            pass); None disables. Checked while it runs (``autocast_check_every``). Default None.
        autocast_check_every: with ``autocast_dtype``, every this many SB steps one batch is also scored at full
            precision and the two kept sets compared (``|A ∩ B| / k`` at the step's ``keep``; the first check at
            SB step ``autocast_check_every``); their running mean is ``stats.precision_agreement``. When it falls
            below 0.9, sbdata warns once and scores at full precision for the rest of the run
            (``stats.precision_fallback``, kept in ``state_dict``). Each check costs one more scoring pass (two
            with a ``cache``), counted in ``stats.samples_checked``; its result is read once it has reached the host
            (at a later check, on the CPU at once): no synchronisation. An int >= 0; 0 turns the check off.
            Default 100 (about 1% more scoring).
        score: what the policy ranks each sample by: ``"loss"`` (its per-sample loss) or ``"gradnorm"`` (the L2
            norm of its loss's gradient with respect to the model's outputs, Katharopoulos & Fleuret 2018: one
            ``torch.autograd.grad`` on the detached outputs, no weight gradients; a closed form for plain
            cross-entropy on (B, C) logits). With a ``cache`` the cache then holds gradient norms, and ``observe``
            (which records training losses) is refused. Default ``"loss"``.
        split: ``split(batch) -> (inputs, targets)``; default takes a 2-sequence or ``input``/``target`` keys.
        forward: ``forward(model, inputs) -> outputs``; default ``model(inputs)``.
        reduce: ``reduce(losses, targets) -> (B,)`` for losses with extra dims; default mean over them.
        generator: ``torch.Generator`` on the scoring device, or an int seed; None seeds 0 (under
            ``torch.distributed``, the rank, so that ranks draw independently). Default None.
        nan_policy: for non-finite losses, ``"raise"`` (naming the loader batch and positions; no sync: the flag is
            read once it reaches the host, on CUDA normally at the next SB step, at the latest at the epoch's end
            or in ``state_dict``), ``"drop"`` (never keep them; one sync) or ``"keep"`` (treat them as the hardest;
            no sync). Default ``"raise"``.
        batch_size: emit SB batches of exactly this many samples through a pool; None emits each subset as it
            is. Default None.
        drop_last: with ``batch_size``, drop the short last batch of an epoch. Default False.
        return_weights: emit ``(batch, weights)`` where ``(weights * per_sample_loss).sum()`` estimates the
            candidates' mean loss without bias; not available with ``"topk"``. Default False.
        id_key: where a batch keeps per-sample ids (a mapping key, a tuple position or ``callable(batch)``),
            needed by id-keyed policies and the cache. Default None.
        cache: a :class:`~sbdata.LossCache`: samples whose cached loss is fresh skip the scoring forward; needs
            ``id_key``. Default None.
        sync: under ``torch.distributed``, ``"local"`` (each rank ranks its own batch) or ``"global"`` (ranks'
            policies see every rank's candidate scores; each still keeps its own share). Default ``"local"``.
            See ``docs/distributed.md``.
        process_group: the ranks that train together; None is the default group. With an initialised group of
            more than one rank, the engine runs in lockstep with them. Default None.
        lazy_columns: how a list or tuple column (``__key__`` strings, raw text, per-sample records) of an SB step's
            subset arrives. False: as the type it came in (a list stays a list, a tuple a tuple), which copies the
            kept indices to the host once per SB step that has such a column (one host-device synchronisation on
            a GPU). True: as a :class:`~sbdata.KeptColumn`, a read-only sequence that reads the indices only when
            an item is first read (no synchronisation when the column goes back to ``observe`` unread), but is not
            a ``list``: ``json.dumps``, ``isinstance(x, list)`` and ``keys + more`` need ``.values()``.
            Default False.
    """

    keep: KeepArg
    policy: PolicyArg
    schedule: Schedule | None
    scale_factor: float
    device: torch.device | str | None
    score_mode: ScoreMode
    autocast_dtype: torch.dtype | None
    autocast_check_every: int
    score: ScoreName
    split: SplitFn | None
    forward: ForwardFn | None
    reduce: ReduceFn | None
    generator: torch.Generator | int | None
    nan_policy: NanPolicy
    batch_size: int | None
    drop_last: bool
    return_weights: bool
    id_key: IdKey | None
    cache: LossCache | None
    sync: SyncMode
    process_group: Any  # a torch.distributed.ProcessGroup, or None for the default group
    lazy_columns: bool


def check_engine_options(model: Any, schedule: Any, batch_size: Any, drop_last: Any) -> None:
    """Check the options the engine uses itself (``keep`` is checked where it is decoded: ``Keep.from_input``).

    Raises:
        TypeError: for a model that is not an ``nn.Module`` or a schedule without ``is_active``.
        ValueError: for a ``batch_size`` that is not an int >= 1, or ``drop_last`` without ``batch_size``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be the torch.nn.Module being trained, got {type(model).__name__}")
    if schedule is not None and not callable(getattr(schedule, "is_active", None)):
        raise TypeError(f"schedule must be a sbdata.Schedule or None, got {type(schedule).__name__}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be an int >= 1 (samples per output batch) or None, got {batch_size!r}")
    if drop_last and batch_size is None:
        raise ValueError("drop_last=True applies to the pooled path only: pass batch_size= as well, or drop it")


def fingerprint(
    policy: SelectionPolicy,
    cache: LossCache | None,
    batch_size: int | None,
    return_weights: bool,
    score: str = "loss",
    auto: Auto | None = None,
    lazy_columns: bool = False,
) -> dict[str, Any]:
    """The options a saved state depends on: the policy's own :meth:`~sbdata.SelectionPolicy.fingerprint`, the cache
    layout and its ``refresh``, ``batch_size``, ``return_weights``, ``score`` (what cached scores and a policy's
    history hold), ``keep="auto"``'s settings (None for a fixed share) and ``lazy_columns`` (the type of the list
    columns in held batches)."""
    layout = None
    if cache is not None:
        layout = f"dense size={cache.size}" if cache.dense else f"keyed capacity={cache.capacity}"
        layout += f" refresh={cache.refresh!r}"
    return {
        "policy": policy.fingerprint(),
        "cache": layout,
        "batch_size": batch_size,
        "return_weights": return_weights,
        "score": score,
        "keep": None if auto is None else auto.describe(),
        "lazy_columns": lazy_columns,
    }


def check_fingerprint(saved: Any, current: dict[str, Any]) -> None:
    """Refuse a state saved with other options than ``current`` (a :func:`fingerprint`).

    Raises:
        ValueError: if ``saved`` is missing (not an engine state) or an option differs, naming it.
    """
    if saved is None:
        raise ValueError("this is not a SelectionEngine state (it has no 'options'): pass the state_dict() of one")
    for name, value in current.items():
        was = saved.get(name)
        if was != value:
            raise ValueError(
                f"the state was saved with {name}={was!r} but this loader has {name}={value!r}: "
                f"build it with the same {name} to resume"
            )


def make_generator(generator: torch.Generator | int | None, device: torch.device) -> torch.Generator:
    """The random policies' generator: the user's (on the scoring device), or a new one seeded by ``generator``."""
    if isinstance(generator, torch.Generator):
        if generator.device.type != device.type:
            raise ValueError(
                f"generator is on {generator.device} but scoring runs on {device}: create it with "
                f"torch.Generator(device='{device}') or pass an int seed"
            )
        return generator
    if generator is not None and (isinstance(generator, bool) or not isinstance(generator, int)):
        raise TypeError(f"generator must be a torch.Generator, an int seed or None, got {type(generator).__name__}")
    made = torch.Generator(device=device)
    made.manual_seed(0 if generator is None else generator)
    return made
