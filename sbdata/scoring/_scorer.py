"""The scoring pass: per-sample losses from the live model, with no side effects."""

from __future__ import annotations

import contextlib
import copy
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sbdata._util import warn_from_user_code
from sbdata.batch import as_tensor, map_fields
from sbdata.scoring._gradnorm import SCORES, closed_form_ignore_index, gradnorm

__all__ = ["Scorer", "dropout_seed", "per_sample_loss_fn"]

_INTERPOLATION = {3: "linear", 4: "bilinear", 5: "trilinear"}
SCORE_MODES = ("batch", "eval", "train")
_SCORE_DTYPES = (torch.float32, torch.float64)  # per-sample losses of these dtypes are returned as they are


def per_sample_loss_fn(loss_fn: Any) -> Callable[[Any, Any], torch.Tensor]:
    """Wrap ``loss_fn`` so that it returns per-sample losses.

    Accepts a function taking ``reduction=`` (``F.cross_entropy``) or a loss module with a ``reduction``
    attribute (``nn.CrossEntropyLoss()``; a shallow copy with ``reduction='none'`` is used).

    Raises:
        TypeError: if ``loss_fn`` is not callable or cannot take ``reduction``.
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}: pass e.g. F.cross_entropy")
    if isinstance(loss_fn, nn.Module) and isinstance(getattr(loss_fn, "reduction", None), str):
        per_sample = copy.copy(loss_fn)
        per_sample.reduction = "none"  # type: ignore[assignment]  # a loss module's str attribute
        return per_sample
    try:
        params = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: trust them
        params = None
    if params is not None and not any(p.name == "reduction" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        name = getattr(loss_fn, "__name__", type(loss_fn).__name__)
        raise TypeError(
            f"loss_fn {name} must take a keyword argument `reduction`. sbdata calls "
            "loss_fn(outputs, targets, reduction='none') for per-sample losses: add a reduction parameter, or pass "
            "a loss like F.cross_entropy"
        )
    return lambda outputs, targets: loss_fn(outputs, targets, reduction="none")


_SEED_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (golden ratio): spreads consecutive steps over the seed space


def dropout_seed(base: int, step: int) -> int:
    """The seed of the RNG stream a ``score_mode="train"`` pass draws dropout from, for loader batch ``step``.

    A pure function of the engine's generator seed (``base``, part of its state) and the step (the engine's
    loader-batch count), so selection neither consumes nor depends on the global RNGs and a resumed run draws the
    same masks. In [0, 2**63).
    """
    return ((base ^ (step * _SEED_MIX)) * _SEED_MIX) % (1 << 63)


def _seed_streams(seed: int, device: torch.device) -> None:
    """Seed the default generators dropout draws from on the CPU and on ``device`` (inside a fork)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)
    elif device.type not in ("cpu", "meta"):
        torch.get_device_module(device.type).manual_seed(seed)


_MODULE_TRAIN = nn.Module.train


def _walk(model: nn.Module, stats: bool = False) -> tuple[list[nn.Module], list[bool], bool, list[nn.Module]]:
    """The modules of ``model`` (each once, as ``model.modules()`` but without the names ``named_modules`` makes),
    their ``training`` flags, whether none overrides ``nn.Module.train`` (then the flags may be set directly), and,
    with ``stats``, the modules that normalise with tracked running statistics (BatchNorm, SyncBatchNorm, an
    InstanceNorm with ``track_running_stats=True``: a ``running_mean`` buffer and ``track_running_stats``).

    Walked on every scoring pass, so that a module added or replaced since the last one is put in the scoring mode
    too; one loop, since it runs once per SB step.
    """
    modules = [model]
    flags: list[bool] = []
    normed: list[nn.Module] = []
    seen = {id(model)}
    plain = True
    for module in modules:  # grows while it is iterated: breadth first
        flags.append(module.training)
        if plain and type(module).train is not _MODULE_TRAIN:
            plain = False
        if stats and module._buffers.get("running_mean") is not None and getattr(module, "track_running_stats", False):
            normed.append(module)
        for child in module._modules.values():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                modules.append(child)
    return modules, flags, plain, normed


_STATS = ("running_mean", "running_var")


def _own_statistics(normed: list[nn.Module]) -> list[tuple[nn.Module, dict[str, torch.Tensor | None]]]:
    """Make each module of ``normed`` (in eval mode) normalise with the batch's own statistics without updating its
    running ones: its running buffers are unbound (``None``) and ``track_running_stats`` is off for the pass, which
    torch's BatchNorm and InstanceNorm read as "batch statistics, nothing to update" (a SyncBatchNorm in eval mode
    then does not synchronise either). Returns what :func:`_restore_statistics` puts back; nothing is copied."""
    saved = []
    for module in normed:
        buffers = module._buffers
        held = {name: buffers[name] for name in _STATS if name in buffers}
        saved.append((module, held))
        for name in held:
            buffers[name] = None
        object.__setattr__(module, "track_running_stats", False)
    return saved


def _restore_statistics(saved: list[tuple[nn.Module, dict[str, torch.Tensor | None]]]) -> None:
    """Rebind the running statistics :func:`_own_statistics` unbound and turn their tracking back on."""
    for module, buffers in saved:
        module._buffers.update(buffers)
        object.__setattr__(module, "track_running_stats", True)


def _set_training(model: nn.Module, modules: list[nn.Module], flag: bool, plain: bool) -> None:
    """``model.train(flag)``; with ``plain`` (see :func:`_walk`), by setting the flags directly (several times
    faster on a small model: ``train`` recurses through ``children()`` and ``Module.__setattr__``)."""
    if not plain:
        model.train(flag)
        return
    for module in modules:
        object.__setattr__(module, "training", flag)


def _restore_training(model: nn.Module, modules: list[nn.Module], flags: list[bool], plain: bool) -> None:
    """Give every module back its own ``training`` flag (``flags``, read by :func:`_walk`)."""
    first = flags[0]
    if flags.count(first) == len(flags):  # the usual case, all alike: one train() call restores them all
        _set_training(model, modules, first, plain)
        return
    for module, flag in zip(modules, flags, strict=True):
        module.training = flag


@contextlib.contextmanager
def scoring_mode(model: nn.Module, mode: str, device: torch.device, seed: int | None = None) -> Iterator[None]:
    """Put ``model`` in ``mode`` for one pass and restore everything afterwards, also on an exception.

    Restores every submodule's own train/eval flag. In ``"batch"`` mode (eval mode, but normalisation layers with
    running statistics use the batch's own, see :func:`_own_statistics`) their running buffers are rebound and their
    tracking turned back on. In ``"train"`` mode every buffer of every submodule is snapshotted and restored in place
    afterwards, also if the forward rebound it (BatchNorm running statistics, ``spectral_norm``'s ``_u``/``_v``, any
    parametrization's buffers); and the global RNGs are forked, so the pass leaves no trace. With ``seed``, dropout
    inside a ``"train"`` pass draws from a stream seeded with it (see :func:`dropout_seed`) instead of from the global
    RNGs' current state.
    """
    modules, flags, plain, normed = _walk(model, mode == "batch")
    saved: list[tuple[nn.Module, str, torch.Tensor, torch.Tensor]] = []
    unbound: list[tuple[nn.Module, dict[str, torch.Tensor | None]]] = []
    with contextlib.ExitStack() as stack:
        try:
            if mode != "train":
                _set_training(model, modules, False, plain)
                unbound = _own_statistics(normed)
            else:
                _set_training(model, modules, True, plain)
                for module in modules:
                    for name, buffer in module._buffers.items():
                        if buffer is not None:
                            saved.append((module, name, buffer, buffer.clone()))
                accelerators = [device] if device.type not in ("cpu", "meta") else []
                kind = device.type if accelerators else None  # None: the CPU generator alone is forked
                stack.enter_context(torch.random.fork_rng(devices=accelerators, device_type=kind))
                if seed is not None:
                    _seed_streams(seed, device)
            yield
        finally:
            _restore_statistics(unbound)
            if saved:
                with torch.no_grad():
                    for module, name, buffer, value in saved:
                        module._buffers[name] = buffer  # a forward that rebinds a buffer gets the original back
                        buffer.copy_(value)  # in place (kernels such as batch_norm's need not bump _version)
            _restore_training(model, modules, flags, plain)


def _enlarged(outputs: torch.Size, targets: torch.Size) -> torch.Size | None:
    """The shape ``outputs`` and ``targets`` broadcast to when it is larger than either (e.g. (B, 1) outputs with (B,)
    targets give (B, B)); else None (equal shapes, shapes that do not broadcast, one shape covering the other)."""
    if outputs == targets:
        return None
    try:
        joint = torch.broadcast_shapes(outputs, targets)
    except RuntimeError:
        return None
    return joint if joint != outputs and joint != targets else None


class Scorer:
    """Computes per-sample losses of a batch under ``torch.no_grad()``.

    Args:
        loss_fn: ``loss_fn(outputs, targets, reduction='none')`` or a loss module; see :func:`per_sample_loss_fn`.
        forward: ``forward(model, inputs) -> outputs``; default ``model(inputs)``.
        reduce: ``reduce(losses, targets) -> (B,)`` for losses with extra dimensions (per token); default: mean
            over the non-batch dimensions.
        score_mode: how the forward runs (:data:`SCORE_MODES`). ``"batch"``: as the training forward normalises,
            dropout off: the model in eval mode, except that normalisation layers with running statistics
            (BatchNorm, SyncBatchNorm, InstanceNorm tracking them) use the batch's own statistics and update nothing.
            ``"eval"``: the model's eval mode (running statistics, dropout off). ``"train"``: train mode (batch
            statistics, dropout drawn from a seeded stream of its own), every buffer restored afterwards. For a model
            without running statistics ``"batch"`` and ``"eval"`` are the same pass, and so they are for a batch of
            one sample (which has no statistics of its own). Default ``"batch"``.
        scale_factor: in (0, 1]; below 1 the inputs (3, 4 or 5 dims) are downsampled for scoring only. Default 1.
        autocast_dtype: run the pass under ``torch.autocast`` with this dtype; None disables. Default None.
        score: ``"loss"`` (the per-sample loss) or ``"gradnorm"`` (the norm of each sample's loss gradient with
            respect to the model's outputs: one ``torch.autograd.grad`` on detached outputs, or the closed form for
            plain cross-entropy on (B, C) logits; see ``sbdata._gradnorm``). Default ``"loss"``.
    """

    def __init__(
        self,
        loss_fn: Any,
        *,
        forward: Callable[[nn.Module, Any], Any] | None = None,
        reduce: Callable[[torch.Tensor, Any], torch.Tensor] | None = None,
        score_mode: str = "batch",
        scale_factor: float = 1.0,
        autocast_dtype: torch.dtype | None = None,
        score: str = "loss",
    ) -> None:
        self.loss_fn = per_sample_loss_fn(loss_fn)
        self._loss_arg = loss_fn  # as given, for replace()
        if score not in SCORES:
            raise ValueError(
                f"score must be one of {SCORES}, got {score!r}: 'loss' ranks by the per-sample loss, 'gradnorm' by "
                "the norm of its gradient with respect to the model's outputs"
            )
        self.score = score
        self._ignore_index = closed_form_ignore_index(loss_fn) if score == "gradnorm" else None
        for name, hook in (("forward", forward), ("reduce", reduce)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{name} must be callable or None, got {type(hook).__name__}")
        if score_mode not in SCORE_MODES:
            raise ValueError(
                f"score_mode must be one of {SCORE_MODES}, got {score_mode!r}: 'batch' normalises with each batch's "
                "own statistics as training does, 'eval' with the running statistics, 'train' adds dropout"
            )
        if isinstance(scale_factor, bool) or not isinstance(scale_factor, (int, float)) or not 0 < scale_factor <= 1:
            raise ValueError(
                f"scale_factor must be in (0, 1], got {scale_factor!r}: it downsamples the scoring inputs only"
            )
        if autocast_dtype is not None and not (
            isinstance(autocast_dtype, torch.dtype) and autocast_dtype.is_floating_point
        ):
            raise TypeError(
                f"autocast_dtype must be a floating torch.dtype such as torch.bfloat16, got {autocast_dtype!r}"
            )
        self.forward = forward
        self.reduce = reduce
        self._shapes_checked: tuple[torch.Size, torch.Size] | None = None  # outputs and targets known not to broadcast
        self.score_mode = score_mode
        self.scale_factor = float(scale_factor)
        self.autocast_dtype = autocast_dtype

    def replace(self, **changes: Any) -> Scorer:
        """A scorer with some settings changed and the rest as this one's, checked as the constructor checks them,
        e.g. ``scorer.replace(autocast_dtype=None)`` (full precision) or ``scorer.replace(score_mode="train")``.

        Args:
            **changes: any of ``forward``, ``reduce``, ``score_mode``, ``scale_factor``, ``autocast_dtype``,
                ``score``.

        Raises:
            TypeError: for another name.
        """
        settings = {
            "forward": self.forward,
            "reduce": self.reduce,
            "score_mode": self.score_mode,
            "scale_factor": self.scale_factor,
            "autocast_dtype": self.autocast_dtype,
            "score": self.score,
        }
        unknown = sorted(set(changes) - set(settings))
        if unknown:
            raise TypeError(f"Scorer.replace takes {sorted(settings)}, got {unknown}")
        return Scorer(self._loss_arg, **{**settings, **changes})

    def _prepare(self, value: Any, device: torch.device, what: str) -> Any:
        return map_fields(value, lambda field, path: as_tensor(field, device, path), what)

    def _downsample(self, inputs: Any) -> Any:
        if self.scale_factor == 1.0:
            return inputs
        if not isinstance(inputs, torch.Tensor) or inputs.dim() not in _INTERPOLATION:
            shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
            raise ValueError(
                f"scale_factor={self.scale_factor} needs inputs of 3, 4 or 5 dims (N, C, ...) to interpolate, got "
                f"{shape}: pass scale_factor=1 for these inputs"
            )
        return F.interpolate(inputs, scale_factor=self.scale_factor, mode=_INTERPOLATION[inputs.dim()])

    def __call__(
        self,
        model: nn.Module,
        inputs: Any,
        targets: Any,
        batch_size: int,
        device: torch.device,
        seed: int | None = None,
    ) -> torch.Tensor:
        """Per-sample losses, shape (batch_size,), float32 (float64 for a float64 loss), on ``device``; ``seed``
        seeds train-mode dropout."""
        return self._pass(model, inputs, targets, batch_size, device, seed, self._measure)

    def quality(
        self,
        model: nn.Module,
        inputs: Any,
        targets: Any,
        batch_size: int,
        device: torch.device,
        seed: int | None = None,
    ) -> torch.Tensor:
        """Per-sample quality of the model's predictions, higher is better, shape (batch_size,), float32, in the
        same side-effect-free pass as the scores: for (N, C) outputs against (N,) integer targets, 1.0 where the
        arg-max class is the target and 0.0 elsewhere (accuracy); for anything else minus the per-sample loss (for
        cross-entropy, minus nats per token of a sequence)."""
        return self._pass(model, inputs, targets, batch_size, device, seed, self._quality)

    def training_losses(self, model: nn.Module, inputs: Any, targets: Any, batch_size: int) -> torch.Tensor:
        """Per-sample losses with their graph, shape (batch_size,), through the same ``forward``, ``loss_fn`` and
        ``reduce`` as the scores, in the model's own mode (no scoring mode, no ``no_grad``, no downsampling or
        autocast): what a default training step takes the mean of.

        Raises:
            TypeError, ValueError: as the scores, for a loss that is not per-sample or a ``reduce`` that does not
                give one loss per sample.
        """
        outputs = self.forward(model, inputs) if self.forward is not None else model(inputs)
        return self._reduced(self._loss(outputs, targets), targets, batch_size)

    def _pass(
        self,
        model: nn.Module,
        inputs: Any,
        targets: Any,
        batch_size: int,
        device: torch.device,
        seed: int | None,
        measure: Callable[[Any, Any, int], Any],
    ) -> Any:
        if type(inputs) is not torch.Tensor:  # tensors pass through _prepare unchanged: skip the walk
            inputs = self._prepare(inputs, device, "inputs")
        if type(targets) is not torch.Tensor:
            targets = self._prepare(targets, device, "targets")
        if self.scale_factor != 1.0:
            inputs = self._downsample(inputs)
        if self.score_mode != "train" and self.autocast_dtype is None:
            return self._eval_pass(model, inputs, targets, batch_size, measure)
        autocast = (
            torch.autocast(device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        mode = "eval" if self.score_mode == "batch" and batch_size < 2 else self.score_mode  # one sample: no statistics
        with torch.no_grad(), scoring_mode(model, mode, device, seed), autocast:
            outputs = self.forward(model, inputs) if self.forward is not None else model(inputs)
            return measure(outputs, targets, batch_size)

    def _quality(self, outputs: Any, targets: Any, batch_size: int) -> torch.Tensor:
        if (
            isinstance(outputs, torch.Tensor)
            and isinstance(targets, torch.Tensor)
            and outputs.dim() == 2
            and tuple(targets.shape) == (batch_size,)
            and not targets.is_floating_point()
            and outputs.shape[0] == batch_size
        ):
            return (outputs.argmax(dim=1) == targets).to(torch.float32)
        return -self._per_sample(self._loss(outputs, targets), targets, batch_size).to(torch.float32)

    def _measure(self, outputs: Any, targets: Any, batch_size: int) -> torch.Tensor:
        """The per-sample scores of ``outputs``: losses, or their gradient norms (``score="gradnorm"``)."""
        if self.score == "loss":
            return self._per_sample(self._loss(outputs, targets), targets, batch_size)
        norms = gradnorm(
            outputs, targets, self._ignore_index, lambda z, y: self._reduced(self._loss(z, y), y, batch_size)
        )
        if tuple(norms.shape) != (batch_size,):
            raise ValueError(
                f"score='gradnorm' got outputs of shape {tuple(norms.shape)} along the batch, expected ({batch_size},):"
                " the forward must return one row of outputs per sample"
            )
        return norms if norms.dtype in _SCORE_DTYPES else norms.to(torch.float32)

    def _eval_pass(
        self, model: nn.Module, inputs: Any, targets: Any, batch_size: int,
        measure: Callable[[Any, Any, int], Any],
    ) -> Any:  # fmt: skip
        """The default pass (``"batch"`` or ``"eval"``, no autocast): :func:`scoring_mode`'s branch written out,
        without its context managers, since it runs once per SB step."""
        modules, flags, plain, normed = _walk(model, self.score_mode == "batch" and batch_size > 1)
        unbound: list[tuple[nn.Module, dict[str, torch.Tensor | None]]] = []
        with torch.no_grad():
            try:
                _set_training(model, modules, False, plain)
                unbound = _own_statistics(normed)
                outputs = self.forward(model, inputs) if self.forward is not None else model(inputs)
                return measure(outputs, targets, batch_size)
            finally:
                _restore_statistics(unbound)
                _restore_training(model, modules, flags, plain)

    def _loss(self, outputs: Any, targets: Any) -> Any:
        if isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor):
            shapes = (outputs.shape, targets.shape)
            if shapes != self._shapes_checked:  # once per pair of shapes
                self._shapes_checked = shapes
                joint = _enlarged(*shapes)
                if joint is not None:
                    return self._unbroadcast_loss(outputs, targets, joint)
        return self._call_loss(outputs, targets)

    def _unbroadcast_loss(self, outputs: torch.Tensor, targets: torch.Tensor, joint: torch.Size) -> Any:
        """The loss of outputs and targets whose shapes broadcast to ``joint``, larger than either: refused when the
        losses come out in that shape (a loss that broadcast them, e.g. ``F.mse_loss`` on (B, 1) outputs and (B,)
        targets, whose warning inside torch is then not shown); else the losses, with any warning the loss gave
        issued again at the user's line.

        Raises:
            ValueError: naming both shapes, what they broadcast to, and the fix.
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = self._call_loss(outputs, targets)
        if isinstance(losses, torch.Tensor) and losses.shape == joint:
            self._shapes_checked = None
            raise ValueError(
                f"the model's outputs {tuple(outputs.shape)} and the targets {tuple(targets.shape)} broadcast to "
                f"{tuple(joint)} in the loss, so it is not one loss per sample (your training loss broadcasts the same "
                "way): give the outputs the targets' shape, e.g. forward=lambda m, x: m(x).squeeze(1) for a (B, 1) "
                "regression head with (B,) targets (and the same squeeze in your training step), or targets of the "
                "outputs' shape"
            )
        for warning in caught:
            warn_from_user_code(str(warning.message), warning.category)
        return losses

    def _call_loss(self, outputs: Any, targets: Any) -> Any:
        try:
            return self.loss_fn(outputs, targets)
        except (TypeError, AttributeError, ValueError, RuntimeError) as error:
            if isinstance(outputs, torch.Tensor):
                raise
            hook = "the forward= hook returns" if self.forward is not None else "the model returned"
            raise TypeError(
                f"loss_fn failed on what {hook}, a {type(outputs).__name__} rather than a tensor ({error}): if the "
                "model returns several outputs, such as (logits, aux) or a ModelOutput, pass "
                "forward=lambda m, x: m(x)[0] (or m(x).logits) so that the loss gets the logits"
            ) from error

    def _per_sample(self, losses: Any, targets: Any, batch_size: int) -> torch.Tensor:
        losses = self._reduced(losses, targets, batch_size)
        if losses.requires_grad:
            losses = losses.detach()
        # float32 at least (autocast may give half precision); float64 stays float64, so that losses differing only
        # in float64 (1 + k * 1e-12) are ranked in their own order
        return losses if losses.dtype in _SCORE_DTYPES else losses.to(torch.float32)

    def _reduced(self, losses: Any, targets: Any, batch_size: int) -> torch.Tensor:
        """``losses`` checked to be per-sample, with extra dimensions reduced to one value per sample."""
        if not isinstance(losses, torch.Tensor):
            raise TypeError(f"loss_fn returned {type(losses).__name__}, expected a tensor of per-sample losses")
        if losses.dim() == 0:
            raise ValueError(
                f"loss_fn returned one number (shape ()), expected one loss per sample ({batch_size},): sbdata "
                "already calls it with reduction='none', and it returned a reduced loss anyway. Make loss_fn honour "
                "reduction (pass it on, e.g. F.cross_entropy(outputs, targets, reduction=reduction)), or pass a "
                "per-sample loss such as nn.CrossEntropyLoss()"
            )
        if losses.shape[0] != batch_size:
            raise ValueError(
                f"loss_fn returned shape {tuple(losses.shape)}, expected one loss per sample ({batch_size},) first: "
                "sbdata calls it with reduction='none' on a batch of that many samples; make loss_fn return the "
                "samples along the first dimension (for a model whose outputs are not (batch, ...), pass forward=)"
            )
        if losses.dim() > 1:
            losses = self.reduce(losses, targets) if self.reduce is not None else losses.flatten(1).mean(1)
            if not isinstance(losses, torch.Tensor) or tuple(losses.shape) != (batch_size,):
                shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
                raise ValueError(f"reduce returned {shape}, expected one loss per sample ({batch_size},)")
        return losses
