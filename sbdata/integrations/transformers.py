"""Selective Backprop in the Hugging Face Transformers ``Trainer``.

``SBTrainer`` is a ``Trainer`` whose training loader yields only the sequences worth a backward pass::

    trainer = SBTrainer(model=model, args=args, train_dataset=train, data_collator=collate, sb_options={"keep": 0.5})
    trainer.train()                              # or trainer.train(resume_from_checkpoint=True)

It wraps the Trainer's own (prepared, sharded) training loader in an :class:`~sbdata.SBLoader` scored with the
hooks of the model's task, read from its class (``*ForCausalLM``/``*LMHeadModel``: :func:`sbdata.tasks.causal_lm`;
``*ForSequenceClassification``: :func:`~sbdata.tasks.sequence_classification`; ``*ForTokenClassification``:
:func:`~sbdata.tasks.token_classification`) unless ``sb_options`` names other hooks; saves each rank's
selection state in every checkpoint (``sbdata_rank{r}.pt``); and on ``resume_from_checkpoint`` continues the
interrupted epoch exactly (the same later batches as the uninterrupted run), where the stock Trainer would try to
rebuild the loader to skip batches. Gradient accumulation works unchanged (the Trainer fetches a window of
batches, all scored with the weights they are trained with). ``SBStatsCallback`` adds selection statistics to the
Trainer's logs; ``SBTrainer`` installs it.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

try:
    import transformers
    from transformers import Trainer, TrainerCallback
    from transformers.trainer_utils import get_last_checkpoint
except ImportError as error:  # pragma: no cover - exercised only without transformers installed
    raise ImportError("sbdata.integrations.transformers needs transformers: pip install transformers") from error

from sbdata._util import epoch_length
from sbdata.integrations._model_tasks import task_hooks
from sbdata.integrations._rank_state import load_rank_state, save_rank_state
from sbdata.integrations._trainer_progress import bind_progress, planned_batches, trainer_schedule
from sbdata.loader import SBLoader

__all__ = ["SBStatsCallback", "SBTrainer", "trainer_schedule"]


def _stats_logs(sb: SBLoader, prefix: str = "sb/") -> dict[str, float]:
    """The selection statistics worth a log line, keyed ``sb/<name>`` (reading them costs one host sync)."""
    stats = sb.stats
    return {
        f"{prefix}backprop_fraction": stats.backprop_fraction,
        f"{prefix}sb_steps": float(stats.sb_steps),
        f"{prefix}mean_loss_kept": stats.mean_loss_kept,
        f"{prefix}mean_loss_dropped": stats.mean_loss_dropped,
    }


class SBStatsCallback(TrainerCallback):
    """Adds ``sb/backprop_fraction``, ``sb/sb_steps``, ``sb/mean_loss_kept`` and ``sb/mean_loss_dropped`` to each
    training log of a Trainer whose training loader is an :class:`~sbdata.SBLoader` (found through the Trainer's
    ``train_dataloader``, or the one given here). Callbacks that come after it (reporting ones do when it is added
    first, as ``SBTrainer`` does) see them."""

    def __init__(self, sb: SBLoader | None = None) -> None:
        self.sb = sb

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        sb = self.sb if self.sb is not None else kwargs.get("train_dataloader")
        if logs is None or not isinstance(sb, SBLoader) or "loss" not in logs:
            return
        extra = _stats_logs(sb)
        logs.update(extra)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(extra)


@contextlib.contextmanager
def _selection_skips_itself() -> Iterator[None]:
    """While the Trainer runs, its mid-epoch skip leaves an SBLoader alone: the SBLoader's restored state already
    continues the epoch, and the stock skip would rebuild it as a plain DataLoader (or fail without a dataset)."""
    module = transformers.trainer
    stock = module.skip_first_batches

    def skip(loader: Any, num_batches: int = 0) -> Any:
        if not isinstance(loader, SBLoader):
            return stock(loader, num_batches)
        done = loader.engine.epoch_step
        if done != num_batches:
            raise RuntimeError(
                f"the Trainer resumes {num_batches} batches into the epoch but the selection state was saved after "
                f"{done}: resume from a checkpoint written by SBTrainer with the same gradient_accumulation_steps"
            )
        return loader

    module.skip_first_batches = skip
    try:
        yield
    finally:
        module.skip_first_batches = stock


class SBTrainer(Trainer):
    """A ``Trainer`` that trains on the sequences selection keeps; see the module docstring.

    Args:
        *args: arguments of ``transformers.Trainer``.
        sb_options: options of :class:`~sbdata.SelectionEngine` (``keep``, ``policy``, ``schedule``, ...), and
            ``loss_fn``/``split``/``forward``/``reduce`` to replace the hooks of the model's task (picked from
            its class: :func:`~sbdata.tasks.causal_lm`, :func:`~sbdata.tasks.sequence_classification` or
            :func:`~sbdata.tasks.token_classification`); a model of another task needs ``loss_fn``. A
            :func:`trainer_schedule` runs on the Trainer's progress (optimizer steps over ``max_steps``), and
            ``keep="auto"`` is told the run's planned length in loader batches (``max_steps`` or
            ``num_train_epochs``, with ``gradient_accumulation_steps``), which bounds its trials
            (:attr:`~sbdata.Auto.trial_share`), unless ``Auto(epochs=...)``, ``Auto(run=...)`` or a Schedule's
            ``total_steps`` gives one.
            ``batch_size`` is refused: the Trainer plans and resumes by counting loader batches.
        **kwargs: keyword arguments of ``transformers.Trainer``.

    Raises:
        ValueError: for ``batch_size`` in ``sb_options``, or a model of no known task without ``loss_fn``.
    """

    def __init__(self, *args: Any, sb_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        options = dict(sb_options or {})
        if options.get("batch_size") is not None:
            raise ValueError(
                "SBTrainer cannot take batch_size= (the Trainer plans its steps from len() and resumes by counting "
                "batches into the epoch; a pool's batches map to neither under the Trainer's schedule): drop it; "
                "the Trainer trains on ceil(keep * per_device_train_batch_size) per batch"
            )
        super().__init__(*args, **kwargs)
        bind_progress(options, lambda: self.state.global_step / max(1, self.state.max_steps))
        self.sb_options = options
        if self.model is not None:
            task_hooks(self.model, options)  # refuses a model of no known task without a loss_fn, here
        self.sb: SBLoader | None = None
        self._sb_resume_from: str | None = None
        self.callback_handler.callbacks.insert(0, SBStatsCallback())

    # The Trainer only iterates its training loader and asks len(): an SBLoader serves, though it is no DataLoader.
    def get_train_dataloader(self) -> SBLoader:  # type: ignore[override]
        """The Trainer's own training loader (prepared, so sharded across processes), wrapped in an SBLoader."""
        if self.model is None:
            raise RuntimeError("SBTrainer needs its model before training: pass model= or model_init= to it")
        options = {**task_hooks(self.model, self.sb_options), **self.sb_options}
        loader = super().get_train_dataloader()
        self.sb = SBLoader(loader, self.model, planned=self._planned_batches(loader), **options)
        if self._sb_resume_from is not None:
            load_rank_state(self.sb, self._sb_resume_from)
        return self.sb

    def _planned_batches(self, loader: Any) -> int | None:
        """The loader batches this process will draw from ``loader`` in the whole run, as the Trainer plans its
        steps (None: not known, e.g. no len())."""
        per_epoch = epoch_length(loader)
        if per_epoch is None:
            return None
        args = self.args
        epochs = None if args.max_steps > 0 else args.num_train_epochs  # the Trainer: max_steps wins when > 0
        return planned_batches(per_epoch, args.gradient_accumulation_steps, args.max_steps, epochs)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        directory = resume_from_checkpoint
        if directory is True:
            directory = get_last_checkpoint(self.args.output_dir)
        self._sb_resume_from = os.fspath(directory) if directory else None
        if self._sb_resume_from is not None and self.args.ignore_data_skip:
            warnings.warn(
                "ignore_data_skip=True asks the Trainer to restart the interrupted epoch, but SBTrainer restores the "
                "selection state saved with the checkpoint, which continues that epoch exactly (the same later "
                "batches as the uninterrupted run); to start the next epoch instead, resume from a checkpoint taken "
                "at an epoch's end",
                stacklevel=2,
            )
        try:
            with _selection_skips_itself():
                return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self._sb_resume_from = None

    def _save_rng_state(self, output_dir: str) -> None:
        """Every rank writes its RNG state here, at every checkpoint: its selection state goes alongside."""
        super()._save_rng_state(output_dir)
        if self.sb is not None:
            save_rank_state(self.sb, output_dir)
