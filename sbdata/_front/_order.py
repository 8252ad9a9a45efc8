"""The order of a wrapped loader without state of its own: record its sampler's generators, so a resume replays it.

A ``DataLoader(ds, shuffle=True, generator=g)`` draws each epoch's permutation (and, on ``iter()``, its workers'
base seed) from ``g``, so each ``iter()`` advances ``g``. A fresh process resuming in epoch ``e`` must therefore
set ``g`` to the state it had when epoch ``e`` began (then re-iterate and skip what was consumed), or, when the
saved epoch's loader had run out, to the state it had then (the start of the next epoch).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import RandomSampler, SequentialSampler

from sbdata._util import warn_from_user_code

__all__ = ["SamplerOrder"]

_FIX = "pass generator=torch.Generator().manual_seed(seed) to the DataLoader (or to its sampler)"


# Batch samplers that only deal the batches of the one they wrap out to the ranks, adding no randomness of their own:
# the order is the wrapped one's. Accelerate's prepare wraps a DataLoader's batch sampler in one (several processes).
_SHARDING_BATCH_SAMPLERS = ("BatchSamplerShard",)


def _unshard(batch_sampler: Any) -> Any:
    """The batch sampler that decides the order: ``batch_sampler``, or the one a sharding wrapper holds."""
    while type(batch_sampler).__name__ in _SHARDING_BATCH_SAMPLERS and hasattr(batch_sampler, "batch_sampler"):
        batch_sampler = batch_sampler.batch_sampler  # type(): a name check, as accelerate is not imported
    return batch_sampler


def _samplers(loader: Any) -> list[Any]:
    batch_sampler = _unshard(getattr(loader, "batch_sampler", None))
    found = [getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)]
    if batch_sampler is not None and not hasattr(batch_sampler, "sampler"):
        found.append(batch_sampler)  # a custom batch sampler decides the order itself
    unique: dict[int, Any] = {}
    for sampler in found:
        if sampler is not None:
            unique.setdefault(id(sampler), sampler)
    return list(unique.values())


def _unobservable(sampler: Any) -> str | None:
    """Why the order of ``sampler`` cannot be replayed, or None when it can (or does not shuffle)."""
    if isinstance(sampler, SequentialSampler) or type(sampler).__name__ == "_InfiniteConstantSampler":
        return None
    if hasattr(sampler, "generator"):
        if sampler.generator is None:
            return f"its {type(sampler).__name__} has no generator, so the global RNG decides the order"
        return None
    if callable(getattr(sampler, "set_epoch", None)) or callable(getattr(sampler, "state_dict", None)):
        return None  # seeded by epoch (e.g. DistributedSampler) or restores itself
    return f"its sampler {type(sampler).__name__} has no generator attribute that sbdata could record"


def _stateful_problem(loader: Any, samplers: list[Any]) -> str | None:
    """Why a loader with its own state (torchdata's StatefulDataLoader) does not resume in the same order."""
    for sampler in samplers:
        reason = _unobservable(sampler)
        if reason is not None:
            return f"{reason}; {_FIX}"
        generator = getattr(sampler, "generator", None)
        if generator is None:
            continue
        if type(sampler) is RandomSampler:  # torch's: its iterator keeps no state (torchdata's RandomSampler does)
            return (
                f"its {type(sampler).__name__} is not stateful, so its generator is not in the loader's state; pass "
                "sampler=torchdata.stateful_dataloader.sampler.RandomSampler(dataset, generator=g)"
            )
        if generator is getattr(loader, "generator", None) and getattr(loader, "num_workers", 1) == 0:
            return (
                "with num_workers=0 its iterator draws a seed from the sampler's own generator (shuffle=True with "
                "generator=), which its state does not account for (a torchdata behaviour); pass "
                "sampler=torchdata.stateful_dataloader.sampler.RandomSampler(dataset, generator=g) instead of "
                "shuffle=True/generator="
            )
    return None


def _restores_itself(sampler: Any) -> bool:
    return callable(getattr(sampler, "state_dict", None)) and callable(getattr(sampler, "load_state_dict", None))


class SamplerOrder:
    """Records and restores the states of the generators that order a stateless loader's epochs.

    For a loader with its own state (``stateful``) nothing is saved (its state restores its order), but the
    configurations known not to resume in the same order are warned about, once, at the first checkpoint.

    Args:
        loader: the wrapped loader (anything; only a DataLoader-like one with samplers is recorded).
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.samplers = _samplers(loader)
        generators = [getattr(loader, "generator", None), *(getattr(s, "generator", None) for s in self.samplers)]
        unique: dict[int, torch.Generator] = {}
        for generator in generators:
            if isinstance(generator, torch.Generator):
                unique.setdefault(id(generator), generator)
        self.generators = list(unique.values())
        self.stateful_samplers = [s for s in self.samplers if _restores_itself(s)]  # e.g. PruningSampler's plan
        self._start: list[torch.Tensor] | None = None  # the generators' states when this epoch's iter() began
        self._saved: list[torch.Tensor] | None = None  # states loaded, to apply before the next iter()
        self._warned = False

    def before_iter(self, continues: bool, source_ended: bool) -> None:
        """Call before ``iter(loader)``: applies a loaded state, then records the epoch's start."""
        if self._saved is not None:
            for generator, state in zip(self.generators, self._saved, strict=True):
                generator.set_state(state)
            self._saved = None
        if not (continues and source_ended):
            self._start = [generator.get_state() for generator in self.generators]

    def state(self, source_ended: bool, stateful: bool) -> list[torch.Tensor] | None:
        """The states to restore on resume: the epoch's start, or the current ones once its loader ran out (None
        for a ``stateful`` loader, whose own state holds its order)."""
        if not self._warned:
            self._warned = True
            if stateful:
                problem = _stateful_problem(self.loader, self.samplers)
            else:
                reason = next(filter(None, map(_unobservable, self.samplers)), None)
                problem = None if reason is None else f"{reason}; {_FIX}"
            if problem is not None:
                warn_from_user_code(
                    f"SBLoader cannot make this checkpoint resume in the same order (a resumed run would see other "
                    f"batches than the uninterrupted one): {problem}"
                )
        if stateful or not self.generators:
            return None
        if self._start is None or source_ended:
            return [generator.get_state() for generator in self.generators]
        return [state.clone() for state in self._start]

    def sampler_states(self, stateful: bool) -> list[Any] | None:
        """The ``state_dict()`` of each sampler that has one (e.g. a ``PruningSampler``'s epoch plan, which the
        cache it was planned from no longer gives back), for a stateless loader; None for a ``stateful`` one."""
        if stateful or not self.stateful_samplers:
            return None
        return [sampler.state_dict() for sampler in self.stateful_samplers]

    def load_sampler_states(self, states: list[Any] | None) -> None:
        if states is None:
            return
        if len(states) != len(self.stateful_samplers):
            raise ValueError(
                f"the state holds {len(states)} sampler states but this loader has {len(self.stateful_samplers)} "
                "samplers with load_state_dict: resume with a loader built the same way (same sampler)"
            )
        for sampler, state in zip(self.stateful_samplers, states, strict=True):
            sampler.load_state_dict(state)

    def load(self, states: list[torch.Tensor] | None) -> None:
        if states is None:
            return
        if len(states) != len(self.generators):
            raise ValueError(
                f"the state records {len(states)} sampler generators but this loader has {len(self.generators)}: "
                "resume with a loader built the same way (same shuffle/generator/sampler)"
            )
        self._saved = list(states)
