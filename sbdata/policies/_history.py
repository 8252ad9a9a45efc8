"""The loss-history percentile policy of Jiang et al. (2019)."""

from __future__ import annotations

from typing import Any

import torch

from sbdata.policies._base import PolicyOptions, Selection, SelectionPolicy

__all__ = ["HistoryPercentile"]


class HistoryPercentile(SelectionPolicy):
    """Keep each sample independently with a probability given by its loss percentile (Jiang et al. 2019).

    A ring buffer holds the last ``history`` scores seen, on the scoring device. Each batch is first added to
    it; then each sample's percentile ``pct`` is the share of the buffer strictly below its score
    (``torch.searchsorted`` on a sorted copy), and it is kept with probability ``max(min_prob, pct ** beta)`` by an
    independent Bernoulli draw from the engine's generator. With i.i.d. losses the expected kept fraction is
    ``1 / (beta + 1)``, so by default ``beta = 1 / keep - 1`` (keep=0.5 gives the paper's beta=1; keep=0.25 gives
    beta=3, the largest the paper used).

    The number kept varies per batch, so this policy is meant for the engine's fixed-size pool (``batch_size=``);
    without one, each SB step yields however many samples were kept, and nothing when none was. It costs one small
    device-to-host transfer per batch: the ``nonzero`` that sizes the kept index. That is its only synchronisation.

    With ``sync="global"`` the history remembers every rank's scores (the same buffer on all ranks, filling
    ``world_size`` times faster: scale ``history`` accordingly), and each rank draws for its own samples.

    Args:
        history: scores remembered, >= 1. Default 1024.
        beta: exponent >= 0 on the percentile; None derives it from ``keep`` as ``1 / keep - 1``. Default None.
        min_prob: floor on the keep probability, in [0, 1]. Default 0.
    """

    name = "history"

    def __init__(self, history: int = 1024, beta: float | None = None, min_prob: float = 0.0) -> None:
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1 (scores remembered), got {history!r}")
        if beta is not None and not beta >= 0:
            raise ValueError(f"beta must be >= 0 (0 keeps everything; the paper used 1 to 3), got {beta!r}")
        if not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"min_prob must be in [0, 1], got {min_prob!r}")
        self.history = history
        self.beta = None if beta is None else float(beta)
        self.min_prob = float(min_prob)
        self._buffer: torch.Tensor | None = None
        self._count = 0
        self._pos = 0

    fixed_count = False  # each sample is kept independently: the count varies
    weighted = True  # the inclusion probability is max(min_prob, pct**beta)

    @property
    def uses_population(self) -> bool:
        return True

    def bind(self, options: PolicyOptions) -> None:
        if options.return_weights and self.min_prob == 0.0:
            raise ValueError(
                "return_weights=True with HistoryPercentile(min_prob=0): a sample at percentile 0 is never kept, so no "
                "unbiased weight exists; pass HistoryPercentile(min_prob=0.05) or another floor > 0"
            )
        if self.beta is not None and options.keep_given:
            raise ValueError(
                f"HistoryPercentile(beta={self.beta}) and keep={options.keep} both set the kept share: pass one "
                "of them "
                "(keep=k means beta = 1/k - 1)"
            )

    def exponent(self, keep: float) -> float:
        """The beta in use: the explicit one, or ``1 / keep - 1``."""
        return self.beta if self.beta is not None else 1.0 / keep - 1.0

    def _remember(self, scores: torch.Tensor) -> None:
        if self._buffer is None:
            self._buffer = torch.zeros(self.history, device=scores.device, dtype=torch.float32)
        elif self._buffer.device != scores.device:  # e.g. state loaded on the CPU
            self._buffer = self._buffer.to(scores.device)
        values = scores.detach().to(torch.float32)[-self.history :]
        n = values.shape[0]
        first = min(n, self.history - self._pos)
        self._buffer[self._pos : self._pos + first] = values[:first]
        self._buffer[: n - first] = values[first:]
        self._pos = (self._pos + n) % self.history
        self._count = min(self.history, self._count + n)

    def percentiles(self, scores: torch.Tensor) -> torch.Tensor:
        """Share of the remembered scores strictly below each score, in [0, 1)."""
        if self._buffer is None or self._count == 0:
            raise RuntimeError("HistoryPercentile.percentiles needs remembered scores: call select first")
        remembered = torch.sort(self._buffer[: self._count]).values
        below = torch.searchsorted(remembered, scores.to(torch.float32).contiguous(), side="left")
        return below.to(torch.float32) / self._count

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        self._remember(scores)
        return self._draw(scores, keep, generator)

    def select_global(
        self, scores: torch.Tensor, keep: float, generator: torch.Generator, population: torch.Tensor, offset: int
    ) -> Selection:
        self._remember(population)
        return self._draw(scores, keep, generator)

    def _draw(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        prob = self.percentiles(scores).pow(self.exponent(keep)).clamp(min=self.min_prob)
        draw = torch.rand(scores.shape[0], device=scores.device, generator=generator)
        index = torch.nonzero(draw < prob).squeeze(1)  # the policy's one host sync: the kept count
        return Selection(index, prob[index], prob.mean())

    def fingerprint(self) -> str:
        """The class and the history size (the buffer in a saved state has that many slots)."""
        return f"{type(self).__name__}(history={self.history})"

    def state_dict(self) -> dict[str, Any]:
        buffer = None if self._buffer is None else self._buffer.clone()
        return {"buffer": buffer, "count": self._count, "pos": self._pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        buffer = state["buffer"]
        if buffer is not None and buffer.shape != (self.history,):
            raise ValueError(f"saved history has {buffer.shape[0]} slots but this HistoryPercentile has {self.history}")
        self._buffer = None if buffer is None else buffer.clone()
        self._count = int(state["count"])
        self._pos = int(state["pos"])

    def __repr__(self) -> str:
        return f"HistoryPercentile(history={self.history}, beta={self.beta}, min_prob={self.min_prob})"
