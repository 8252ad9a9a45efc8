"""Placement guards: the scoring pass must run where the live model is trained.

Every front end scores with the model object it was given. In a DataLoader worker process that object is a
copy made when the worker started, so it never sees an optimizer step: selection would silently use stale
weights. In another thread of the training process it is the live model, but the scoring forward would read
parameters while ``optimizer.step()`` updates them in place (a torn mix of two steps), and it would unbind (the
default ``score_mode="batch"``) or save and restore (``"train"``) normalisation buffers underneath the training
forward.
"""

from __future__ import annotations

import threading

from torch.utils.data import get_worker_info

__all__ = ["check_not_in_worker", "check_thread"]


def check_not_in_worker(stage: str, fix: str) -> None:
    """Raise if called inside a DataLoader worker process.

    Args:
        stage: what is being iterated, for the message (e.g. ``"sbdata.wds.sb_select"``).
        fix: where to put it instead, for the message.

    Raises:
        RuntimeError: naming the stage and the fix.
    """
    info = get_worker_info()
    if info is not None:
        raise RuntimeError(
            f"{stage} ran in DataLoader worker process {info.id}, where the model is a stale copy of the one being "
            f"trained, so it would select with old weights: {fix}"
        )


def check_thread(owner: int, stage: str, fix: str) -> None:
    """Raise if the calling thread is not ``owner`` (a ``threading.get_ident()``).

    Raises:
        RuntimeError: naming the stage, why, and the fix.
    """
    if threading.get_ident() != owner:
        raise RuntimeError(
            f"{stage} was iterated from thread {threading.current_thread().name!r}, not the thread that built it "
            "(taken to be the one that trains): its scoring forward would read the weights while optimizer.step() "
            f"updates them in place. {fix}"
        )
