"""Trials on the user's run: which arm makes more progress per second, measured (pure functions).

Whether training on the hard part of each batch helps (clean data: the hard samples are the informative ones) or
hurts (flipped labels, incompressible text: the hard samples are noise) depends on the data, so ``keep="auto"``
measures it on the live run instead of predicting it. A trial is a sequence of windows of loader batches, each
trained with one arm: arm 0 is plain training on whole batches, arm ``a >= 1`` is selection at the ``a``-th
trialled share. The order is a palindrome of cycles, ``0, 1, .., m, m, .., 1, 0`` (:func:`trial_order`), so a
linear trend in the rate of progress (the run slowing down as it learns, the LR schedule) weighs every arm alike.

**The measurement.** Every loader batch of a trial is measured *before* it is trained on, in the forward the
scoring pass makes anyway (in plain windows, a forward of its own). A window's first ``settle`` batches let the
switch's transient pass; its *level* ``L_i`` is the mean quality over the rest. The quality is the user's metric
where it can be told: accuracy for ``(N, C)`` logits against class indices (the mean loss misleads there: top-k
raises held-out loss by hedging while it raises accuracy), minus the per-sample loss otherwise (nats for a language
model). The batches are held out from the window that measures them: in a single-pass stream by nature; over
several epochs they were trained on an epoch before, under every arm alike, never by the window measuring them, so
memorising the window's own picks (flipped labels) does not raise its level, while the harm those picks do to the
rest of the data lowers it.

**The fit** (:func:`fit_progress`). ``L_i = c + sum_a p_a E_a(i) + q t_i^2``: ``E_a(i)`` counts the windows of arm
``a`` before window ``i``, plus, for window ``i``'s own arm, the share of the window elapsed at the middle of its
measured part (:func:`exposures`); ``t_i`` is that time in windows. ``p_a`` is arm ``a``'s progress per window; the
curvature ``q`` absorbs the run slowing down. Least squares; the residual variance gives the covariance.

**The verdict** (:func:`verdict`). Arm ``a``'s progress per second is ``p_a / c_a``, with ``c_a`` the measured
seconds of a loader batch under arm ``a`` (the cost table: ``train(B)`` plain, ``score(B) + train(k) + overhead``
selecting). Selection is chosen when the contrast ``D_a = p_a c_0 / c_a - (1 + margin) p_0`` exceeds ``z`` of its
standard errors, for the best arm; otherwise training goes on as plain: **when in doubt, train as the user would**.
A re-trial while selection is on (the exit test) keeps it on unless it measures below plain training, ``p_a c_0 /
c_a - p_0``, by ``z`` standard errors: once a trial has measured a win, a later noisy one does not undo it.
The minimum detectable effect is ``margin`` plus ``z`` standard errors. The speed-up reported is
``S_a = (p_a / p_0) (c_0 / c_a)`` where plain's progress is measured above zero by :data:`RATIO_ERRORS` of its
standard errors, NaN otherwise: a ratio to a rate within noise of zero is noise (on the MNIST-1D MLP, plain's
progress per window read +0.005 +- 0.038 and the ratio 17x), so only the contrast, in standard errors, decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__: list[str] = []  # pure functions of the trial; AutoController applies them

RATIO_ERRORS = 2.0  # plain's progress must clear zero by this many standard errors for a speed-up ratio


def trial_order(arms: int, cycles: int) -> list[int]:
    """The arm of each window of a trial: ``cycles`` palindromes ``0, 1, .., arms, arms, .., 1, 0``.

    Args:
        arms: selection arms trialled beside plain training, >= 1.
        cycles: palindromes, >= 1.

    Returns:
        ``2 (arms + 1) cycles`` arm indices (0: plain).
    """
    if arms < 1 or cycles < 1:
        raise ValueError(f"a trial needs arms >= 1 and cycles >= 1, got arms={arms}, cycles={cycles}")
    forward = list(range(arms + 1))
    return (forward + forward[::-1]) * cycles


def exposures(order: Sequence[int], arms: int, middle: float = 0.5) -> list[list[float]]:
    """``E_a(i)``: the windows of arm ``a`` before window ``i``, plus ``middle`` (the share of a window elapsed at
    the middle of its measured part, in (0, 1]) for window ``i``'s own arm."""
    counts = [0.0] * (arms + 1)
    rows = []
    for arm in order:
        row = list(counts)
        row[arm] += middle
        rows.append(row)
        counts[arm] += 1.0
    return rows


@dataclass(frozen=True)
class Progress:
    """What a trial's fit measured.

    Attributes:
        rates: progress per window of each arm (0: plain), in the quality's units (accuracy, or minus nats).
        covariance: their covariance, (arms + 1) x (arms + 1); NaN without a residual degree of freedom.
    """

    rates: tuple[float, ...]
    covariance: tuple[tuple[float, ...], ...]

    def se(self, arm: int) -> float:
        """The standard error of arm ``arm``'s rate."""
        value = self.covariance[arm][arm]
        return math.sqrt(max(0.0, value)) if math.isfinite(value) else math.nan


def fit_progress(levels: Sequence[float], order: Sequence[int], arms: int, middle: float = 0.5) -> Progress:
    """Least-squares fit of ``L_i = c + sum_a p_a E_a(i) + q t_i^2`` (the module's docstring).

    Args:
        levels: each window's level (mean quality of its measured batches).
        order: each window's arm, as :func:`trial_order` gives it.
        arms: selection arms (the arm indices run 0..arms).
        middle: see :func:`exposures`. Default 0.5.

    Raises:
        ValueError: for ``levels`` and ``order`` of different lengths, or fewer windows than parameters.
    """
    if len(levels) != len(order):
        raise ValueError(f"{len(levels)} levels for {len(order)} windows: pass one per window")
    columns = arms + 3  # c, p_0..p_arms, q
    if len(levels) < columns:
        raise ValueError(f"a fit of {columns} parameters needs at least {columns} windows, got {len(levels)}")
    rows = [[1.0, *exposure, (i + middle) ** 2] for i, exposure in enumerate(exposures(order, arms, middle))]
    x = np.asarray(rows, dtype=np.float64)  # host arithmetic (numpy): a few numbers per trial
    y = np.asarray([float(v) for v in levels], dtype=np.float64)
    gram_inv = np.linalg.pinv(x.T @ x)
    beta = gram_inv @ x.T @ y
    dof = len(levels) - int(np.linalg.matrix_rank(x))
    residual = y - x @ beta
    variance = float(residual @ residual) / dof if dof > 0 else math.nan
    cov = gram_inv[1 : arms + 2, 1 : arms + 2] * variance
    rates = tuple(float(v) for v in beta[1 : arms + 2])
    return Progress(rates, tuple(tuple(float(v) for v in row) for row in cov))


@dataclass(frozen=True)
class Verdict:
    """A trial's decision.

    Attributes:
        arm: the arm chosen (0: plain training).
        speedups: each selection arm's measured speed-up in progress per second over plain (index 0: arm 1), NaN
            where plain's progress is not above zero by :data:`RATIO_ERRORS` standard errors.
        contrasts: each selection arm's ``D_a`` in standard errors (the decision's statistic).
        reason: in words: what was decided, what each share measured against the bar, and the rule that decided.
    """

    arm: int
    speedups: tuple[float, ...]
    contrasts: tuple[float, ...]
    reason: str


def verdict(
    progress: Progress,
    costs: Sequence[float],
    keeps: Sequence[float],
    *,
    z: float = 1.0,
    margin: float = 0.05,
    incumbent: int = 0,
) -> Verdict:
    """Choose an arm from a trial's fit (the module's docstring).

    Args:
        progress: the fit.
        costs: seconds of a loader batch under each arm (index 0: plain), each > 0.
        keeps: the share kept by each selection arm (index 0: arm 1), for the reason.
        z: standard errors the contrast must exceed, >= 0. Default 1.
        margin: the speed-up selection must beat, above 1, >= 0. Default 0.05.
        incumbent: the arm training runs on now (0: plain, the default). A selection arm that is on stays on
            unless it measures below plain training's progress per second by ``z`` standard errors (the exit test).
    """
    arms, cov, p0 = len(keeps), progress.covariance, progress.rates[0]
    if not 0 <= incumbent <= arms:
        raise ValueError(f"incumbent must be an arm index in 0..{arms}, got {incumbent}")
    speedups: list[float] = []
    contrasts: list[float] = []
    holds: list[float] = []
    known = p0 > 0 and p0 > RATIO_ERRORS * progress.se(0)  # a ratio to plain's rate; a NaN error (no dof): False
    for arm in range(1, arms + 1):
        scale = costs[0] / costs[arm]
        rate = progress.rates[arm] * scale
        for m, into in ((1 + margin, contrasts), (1.0, holds)):
            var = scale * scale * cov[arm][arm] + m * m * cov[0][0] - 2 * scale * m * cov[0][arm]
            into.append(_in_errors(rate - m * p0, var))
        speedups.append(progress.rates[arm] / p0 * scale if known else math.nan)
    bar = 1 + margin
    measured = "; ".join(
        _measured(k, s, c, bar, p0, progress.se(0)) for k, s, c in zip(keeps, speedups, contrasts, strict=True)
    )
    best = max(range(arms), key=lambda i: (_finite(contrasts[i]), keeps[i]))
    if contrasts[best] > z:  # NaN (no degree of freedom) compares False: plain
        reason = (
            f"Decided: select, keeping {keeps[best]:g} of each batch. {_capital(measured)}. Selection turns on when "
            f"it beats {bar:.2f}x by more than {_errors(z)}, and it did"
        )
        return Verdict(best + 1, tuple(speedups), tuple(contrasts), reason)
    if incumbent and not holds[incumbent - 1] < -z:  # NaN compares False: the incumbent stays
        reason = (
            f"Decided: keep selecting at keep {keeps[incumbent - 1]:g}. {_capital(measured)}. Selection that is on "
            f"turns off only when it measures slower than whole batches by more than {_errors(z)}, and it did not"
        )
        return Verdict(incumbent, tuple(speedups), tuple(contrasts), reason)
    reason = (
        f"Decided: train on whole batches. {_capital(measured)}. Selection turns on only when it beats {bar:.2f}x "
        f"by more than {_errors(z)} (when in doubt, whole batches)"
    )
    return Verdict(0, tuple(speedups), tuple(contrasts), reason)


def shortfall(selection: Sequence[float], plain: Sequence[float]) -> float:
    """How far a selection window's level stands above whole batches' last one, in standard errors (negative: below).

    The early stop of a trial (``Auto.stop_z``): whole batches do not lose ground while the run is still learning,
    so a selection window whose level falls below the level of the last whole-batch window before it made less
    progress than whole batches would have. Each level is the mean quality of the samples that measured it; its
    variance is their spread over their count, and the two are independent (different samples, different models).

    Args:
        selection: the selection window's ``(sum q, count, sum q^2)`` over its measured samples.
        plain: the same of the last whole-batch window before it.

    Returns:
        ``(L_s - L_p) / sqrt(var_s / n_s + var_p / n_p)``; NaN where a window measured fewer than 2 samples; +-inf
        where both spreads are 0 and the levels differ.
    """
    (sum_s, n_s, squares_s), (sum_p, n_p, squares_p) = (tuple(float(v) for v in w) for w in (selection, plain))
    if n_s < 2 or n_p < 2:
        return math.nan
    level_s, level_p = sum_s / n_s, sum_p / n_p
    spread_s = max(0.0, squares_s / n_s - level_s * level_s) * n_s / (n_s - 1)  # the unbiased sample variance
    spread_p = max(0.0, squares_p / n_p - level_p * level_p) * n_p / (n_p - 1)
    return _in_errors(level_s - level_p, spread_s / n_s + spread_p / n_p)


def _in_errors(value: float, variance: float) -> float:
    """``value`` in standard errors: NaN without a variance, +-inf with a zero one."""
    if math.isnan(variance):
        return math.nan
    if variance <= 0:
        return math.copysign(math.inf, value) if value else 0.0
    return value / math.sqrt(variance)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _errors(value: float) -> str:
    return f"{value:g} standard error" + ("" if value == 1 else "s")


def _measured(keep: float, speedup: float, contrast: float, bar: float, plain: float, plain_se: float) -> str:
    """What one share measured, in words: its speed against whole batches and its distance from the bar."""
    where = f"{abs(contrast):.1f} standard errors {'above' if contrast >= 0 else 'below'} the {bar:.2f}x bar"
    if math.isnan(contrast):
        where = "no standard error (too few windows to tell)"
    if math.isfinite(speedup):
        return f"keeping {keep:g} learned {speedup:.2f}x as fast per second as whole batches ({where})"
    return (
        f"keeping {keep:g} could not be given a speed ratio, because whole batches themselves barely improved "
        f"({plain:+.4f} per window, within {RATIO_ERRORS:g} standard errors ({plain_se:.4f} each) of none); by the "
        f"difference in progress per second it stood {where}"
    )


def _finite(value: float) -> float:
    return value if not math.isnan(value) else -math.inf
