"""One SB step: split a batch, score it (or reuse cached losses), rank, screen, select, and subset every field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata.cache import LossCache
from sbdata.engine._finite import FiniteCheck
from sbdata.engine._options import make_generator
from sbdata.engine._precision import DEFAULT_CHECK_EVERY, PrecisionCheck
from sbdata.engine._score_mode import ScoreModeCheck
from sbdata.engine._stats import StatsTracker
from sbdata.policies import (
    PolicyOptions,
    RandomK,
    RankWeighted,
    ScoreContext,
    SelectionPolicy,
    TopK,
    keep_count,
    resolve_policy,
)
from sbdata.scoring import Scorer, dropout_seed

NAN_POLICIES = ("raise", "drop", "keep")


class Kept(NamedTuple):
    """What one SB step keeps of a batch.

    Attributes:
        subset: the kept samples, every field subset alike.
        size: how many were kept.
        ratio: per kept sample ``expected / prob`` (for importance weights), or None without ``return_weights``.
        candidates: how many samples the policy chose from (the finite ones under ``nan_policy="drop"``).
        expected: the policy's expected kept share of the candidates.
        scores: the (N,) scores the policy ranked (after ``adjust``, before the non-finite screen), on the device.
    """

    subset: Any
    size: int
    ratio: torch.Tensor | None
    candidates: int
    expected: float | torch.Tensor
    scores: torch.Tensor


class SBStep:
    """Runs the SB step for a :class:`~sbdata.SelectionEngine`; the options are the engine's (see there).

    Args:
        model: the module the scoring pass calls (``model.module`` for DDP).
        scorer: the side-effect-free scoring pass.
        keep: the share to keep, in (0, 1], when a step is not given one (``keep="auto"`` gives one per step);
            ``keep_given`` says whether the user set it.
        policy: a policy name or :class:`~sbdata.SelectionPolicy`.
        device: the scoring device.
        tracker: the engine's statistics, updated here.
        lockstep: the engine's coordinator under ``torch.distributed``, or None.
        lazy_columns: list/tuple columns of a subset become :class:`~sbdata.KeptColumn` (no synchronisation)
            instead of lists/tuples (one per SB step that has a column).
        autocast_check_every: with an ``autocast_dtype`` scorer, SB steps between checks against full precision
            (:class:`~sbdata.engine._precision.PrecisionCheck`); 0: none.
    """

    def __init__(
        self,
        model: nn.Module,
        scorer: Scorer,
        *,
        keep: float,
        keep_given: bool,
        policy: Any,
        device: torch.device,
        generator: torch.Generator | int | None,
        split: Callable[[Any], tuple[Any, Any]] | None,
        nan_policy: str,
        return_weights: bool,
        id_key: str | int | Callable[[Any], Any] | None,
        cache: LossCache | None,
        sync: str,
        tracker: StatsTracker,
        lockstep: Any,
        lazy_columns: bool = False,
        autocast_check_every: int = DEFAULT_CHECK_EVERY,
    ) -> None:
        if nan_policy not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
        if split is not None and not callable(split):
            raise TypeError(f"split must be callable(batch) -> (inputs, targets), got {type(split).__name__}")
        if id_key is not None and not isinstance(id_key, (str, int)) and not callable(id_key):
            raise TypeError(f"id_key must be a key, a position or callable(batch), got {type(id_key).__name__}")
        if cache is not None and not isinstance(cache, LossCache):
            raise TypeError(f"cache must be a sbdata.LossCache or None, got {type(cache).__name__}")
        if cache is not None and id_key is None:
            raise ValueError("cache= needs id_key= naming the per-sample id field (e.g. 'index' or '__key__')")
        if device.type == "meta" and not isinstance(generator, torch.Generator):  # a Generator: make_generator names it
            raise ValueError(
                "the model's parameters are on the meta device (no data), so sbdata cannot tell where to score: "
                "pass device= naming the device its forward takes inputs on (e.g. device='cuda:0' for a model "
                "dispatched with offloading), with forward=lambda m, x: ... if it needs a custom call; a model built "
                "on meta (torch.device('meta'), init_empty_weights) must be materialised first "
                "(model.to_empty(device=...), then load its weights)"
            )
        self.model = model
        self.precision = PrecisionCheck(scorer, autocast_check_every, tracker)
        self.scorer = scorer  # the precision check's scorer of the moment (full precision after a fallback)
        self.mode_check = ScoreModeCheck(scorer, model, tracker)
        self.keep = keep
        self.keep_given = keep_given
        self.policy = resolve_policy(policy)
        self.device = device
        self.generator = make_generator(generator, device)
        if generator is None and lockstep is not None:
            self.generator.manual_seed(lockstep.rank)  # independent draws on each rank
        self.split = split if split is not None else _batch.default_split
        self.nan_policy = nan_policy
        self.return_weights = bool(return_weights)
        self.id_key = id_key
        self.cache = cache
        self.sync = sync
        self.tracker = tracker
        self.lockstep = lockstep
        self.lazy_columns = bool(lazy_columns)
        self.finite_check = FiniteCheck()
        # Fixed per engine, read per loader batch (plain attributes: no call on the hot path):
        self.reads_ids = id_key is not None  # a step needs the batch's ids, read before the device move
        self.cache_unit = None if cache is None else cache.unit  # the cache's unit of age, or None without one
        if cache is not None:
            cache.bind(device)
        if self.return_weights and not self.policy.weighted:
            raise ValueError(
                f"return_weights=True needs a sampling policy, but {self.policy!r} is deterministic: samples below "
                "its cut have probability 0, so no unbiased weight exists; use policy='rank', 'random' or "
                "HistoryPercentile(min_prob=0.05)"
            )
        self.policy.bind(PolicyOptions(self.keep, self.keep_given, self.return_weights, id_key, device))
        # Fixed per engine, so decided here rather than per SB step:
        policy_type = type(self.policy)
        self._adjusts = policy_type.adjust is not SelectionPolicy.adjust or "adjust" in vars(self.policy)
        self._seeded = scorer.score_mode == "train" or self._adjusts  # else the seed is never read
        self._trusted = policy_type in (TopK, RandomK, RankWeighted)  # built-ins keep their declared contract

    def ids(self, batch: Any) -> Any:
        """The per-sample ids at ``id_key``, or None without one."""
        if self.id_key is None:
            return None
        if callable(self.id_key):
            return self.id_key(batch)
        try:
            return batch[self.id_key]
        except (KeyError, IndexError, TypeError):
            found = sorted(map(str, batch)) if isinstance(batch, Mapping) else f"{type(batch).__name__}"
            raise ValueError(
                f"id_key={self.id_key!r} is not in the batch ({found}); pass the key of the id field"
            ) from None

    def quality_pass(self, step: int) -> tuple[Callable[[Any], tuple[Any, Any]], Callable[..., torch.Tensor]]:
        """``(split, quality)`` for measuring a model on a batch before it is trained on, at loader batch ``step``
        (``keep="auto"``'s trials): ``quality(model, inputs, targets, n)`` is
        :meth:`~sbdata.scoring.Scorer.quality`, with dropout seeded as an SB step's."""
        seed = dropout_seed(self.generator.initial_seed(), step)

        def quality(model: nn.Module, inputs: Any, targets: Any, n: int) -> torch.Tensor:
            return self.scorer.quality(model, inputs, targets, n, self.device, seed)

        return self.split, quality

    @property
    def score_name(self) -> str:
        """What the scoring pass measures per sample (``score=``): ``"loss"`` or ``"gradnorm"``."""
        return self.scorer.score

    def __call__(self, batch: Any, n: int, ids: Any, now: int, step: int, keep: float | None = None) -> Kept:
        """Select from ``batch`` (``n`` samples on the scoring device; ``ids`` read before the move), keeping the
        share ``keep`` (default: the step's own ``keep``)."""
        keep = self.keep if keep is None else keep
        self.tracker.sb_step_started()
        inputs, targets = self.split(batch)  # the default split takes an (x, y, ...) batch apart at once
        seed = None
        if self._seeded:  # train-mode dropout, or a policy that may score again: a stream of this step's own
            seed = dropout_seed(self.generator.initial_seed(), step)
        losses = self._score(inputs, targets, n, ids, now, seed)
        if self.precision.due(self.tracker.sb_steps):  # every autocast_check_every-th SB step, with autocast_dtype only
            low = losses if self.cache is None else None  # with a cache some losses were not scored: rescore all
            if self.precision.check(low, self.model, inputs, targets, n, self.device, seed, keep):
                self.scorer = self.precision.scorer  # full precision for the rest of the run
        if self._adjusts:
            context = ScoreContext(
                inputs, targets, ids, n, self.device,
                score=lambda other: self.scorer(other, inputs, targets, n, self.device, seed),
            )  # fmt: skip
            scores = self.policy.adjust(losses, context)
        else:
            scores = losses  # SelectionPolicy.adjust is the identity
        ranked = scores
        candidates, scores = self._screen(scores, step)
        population = None
        if self.lockstep is not None and self.sync == "global" and self.policy.uses_population:
            population = self.lockstep.gather(scores)  # on every rank, even one with no candidate left
        if candidates is not None:
            losses = losses.index_select(0, candidates)
        count = scores.shape[0]
        if count == 0:  # every loss was non-finite and nan_policy='drop'
            nothing = torch.empty(0, dtype=torch.long, device=self.device)
            ratio = nothing.to(torch.float32) if self.return_weights else None
            return Kept(_batch.select(batch, nothing, self.lazy_columns), 0, ratio, 0, 1.0, ranked)
        if population is None:
            selection = self.policy.select(scores, keep, self.generator)
        else:
            selection = self.policy.select_global(scores, keep, self.generator, *population)
        if not self._trusted:
            self._check_contract(selection, count, keep)
        self.tracker.record_selection(losses, selection.index)
        index = selection.index if candidates is None else candidates.index_select(0, selection.index)
        ratio = None if selection.prob is None or not self.return_weights else selection.expected / selection.prob
        subset = _batch.select(batch, index, self.lazy_columns)
        return Kept(subset, index.shape[0], ratio, count, selection.expected, ranked)

    def _check_contract(self, selection: Any, n: int, keep: float) -> None:
        """Hold a policy to what it declared (host-side shapes only: no synchronisation)."""
        if self.return_weights and selection.prob is None:
            raise TypeError(
                f"return_weights=True needs each kept sample's inclusion probability, but {self.policy!r} returned "
                "Selection.prob=None although it declares weighted=True: return the probabilities in "
                "Selection(index, prob, expected), or declare weighted = False"
            )
        if self.policy.fixed_count and selection.index.shape[0] != keep_count(keep, n):
            raise ValueError(
                f"{self.policy!r} declares fixed_count=True but kept {selection.index.shape[0]} of {n} samples, not "
                f"keep_count(keep={keep}, {n}) = {keep_count(keep, n)}: declare fixed_count = False for a "
                "policy whose count varies (ranks under torch.distributed agree on batch counts through it)"
            )

    def _score(self, inputs: Any, targets: Any, n: int, ids: Any, now: int, seed: int | None) -> torch.Tensor:
        """Per-sample losses of the live model: scored, or taken from the cache where still fresh.

        With a cache, the stale samples are scored in a bucket of a few fixed sizes (:func:`~sbdata.cache.bucket_size`)
        filled up with the batch's stalest fresh samples; which ones is known on the host, so nothing waits.
        """
        if self.cache is None:
            self.tracker.scored(n)
            return self.scorer(self.model, inputs, targets, n, self.device, seed)
        known = self.cache.lookup(ids, now)
        count = known.count
        self.tracker.scored(count, reused=n - count)
        if count == 0 and self.lockstep is None:  # in lockstep every rank scores, if only zero samples (FSDP)
            return known.losses
        if count == n:
            fresh = self.scorer(self.model, inputs, targets, n, self.device, seed)
            self.cache.store(known, fresh, now)
            return fresh
        lazy = self.lazy_columns
        sub_inputs = _batch.select(inputs, known.positions, lazy)
        sub_targets = _batch.select(targets, known.positions, lazy)
        fresh = self.scorer(self.model, sub_inputs, sub_targets, count, self.device, seed)
        self.cache.store(known, fresh, now)
        return known.losses.to(fresh.dtype).index_copy(0, known.positions, fresh)  # cached: float32

    def _screen(self, scores: torch.Tensor, step: int) -> tuple[torch.Tensor | None, torch.Tensor]:
        if self.nan_policy == "keep":
            if scores.is_floating_point():  # NaN and -inf become +inf, the hardest, as the where() below: one op
                return None, torch.nan_to_num(scores, nan=torch.inf, posinf=torch.inf, neginf=torch.inf)
            return None, torch.where(torch.isfinite(scores), scores, torch.inf)
        if self.nan_policy == "drop":
            candidates = torch.nonzero(torch.isfinite(scores)).squeeze(1)  # the count varies: one synchronisation
            return candidates, scores.index_select(0, candidates)
        self.finite_check.add(scores, step)  # read once it reaches the host: no synchronisation
        return None, scores

    def settle(self) -> None:
        """Report anything still in flight: a non-finite loss of an SB step whose flag has not been read yet."""
        self.finite_check.settle()

    def settle_cache(self) -> None:
        """Send the cache's observed ids still on the device to the host and apply those landed (never waits; nothing
        without a cache)."""
        if self.cache is not None:
            self.cache.settle(wait=False)

    def observe(self, batch: Any, losses: torch.Tensor, now: int) -> None:
        """Take per-sample training losses of a yielded ``batch`` (detached, no sync): recorded into the cache, if
        any (refused with a cache unless ``score="loss"``: the cache holds the scores); and, on the first observed
        batches of an eval-mode scored model with running statistics, compared with the scoring pass's losses
        (:class:`~sbdata.engine._score_mode.ScoreModeCheck`)."""
        if self.cache is None and not self.mode_check.applies:  # nothing would use the losses: say so, not drop them
            raise ValueError(
                "observe() records losses into a LossCache (and, for a model with BatchNorm-like running statistics "
                "scored in eval mode, compares its first batches with the scoring pass), and this loader has neither: "
                "pass cache=LossCache(...) with id_key= to the loader, or drop the observe() call"
            )
        if self.cache is not None and self.scorer.score != "loss":
            raise ValueError(
                f"observe() records training losses, but this loader scores by score={self.scorer.score!r} and its "
                "LossCache holds those scores, which losses would mix with: leave observe() out (the cache reuses "
                "the scores until they are stale), or score by loss (score='loss')"
            )
        if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
            shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
            raise ValueError(f"observe needs per-sample losses of shape (B,), got {shape}: use reduction='none'")
        n = _batch.sample_count(batch)
        if losses.shape[0] != n:
            raise ValueError(f"observe got {losses.shape[0]} losses for a batch of {n} samples")
        if self.mode_check.left:  # the first few observed batches only
            inputs, targets = self.split(batch)
            self.mode_check.check(self.scorer, self.model, inputs, targets, n, self.device, losses)
        elif self.mode_check.in_flight:
            self.mode_check.settle_landed()
        if self.cache is not None:
            self.cache.observe(self.ids(batch), losses, now)

    def state_dict(self) -> dict[str, Any]:
        """The generator's, the policy's and the cache's state (after reporting any non-finite loss in flight)."""
        self.settle()
        return {
            "generator": self.generator.get_state(),
            "policy": self.policy.state_dict(),
            "cache": None if self.cache is None else self.cache.state_dict(),
            "precision": self.precision.state_dict(),
            "score_mode": self.mode_check.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["cache"] is None) != (self.cache is None):
            raise ValueError("state was saved with a different cache setting (with vs without a LossCache)")
        self.generator.set_state(state["generator"])
        self.policy.load_state_dict(state["policy"])
        if self.cache is not None:
            self.cache.load_state_dict(state["cache"])
        self.precision.load_state_dict(state["precision"])
        self.mode_check.load_state_dict(state["score_mode"])
        self.scorer = self.precision.scorer
