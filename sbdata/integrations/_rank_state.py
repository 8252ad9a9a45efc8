"""Per-rank selection state in a checkpoint directory: one ``sbdata_rank{r}.pt`` per rank."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from sbdata.distributed import rank_and_world

__all__ = ["load_rank_state", "rank_state_path", "save_rank_state"]


def rank_state_path(directory: str | Path, rank: int | None = None) -> Path:
    """``directory / f"sbdata_rank{rank}.pt"``; rank defaults to this process's."""
    return Path(directory) / f"sbdata_rank{rank_and_world()[0] if rank is None else rank}.pt"


def save_rank_state(sb: Any, directory: str | Path) -> Path:
    """Write ``sb.state_dict()`` to this rank's file in ``directory`` (created if missing); returns the path.

    The prepared loaders of Accelerate and the Trainer have a ``state_dict()`` that raises unless
    ``use_stateful_dataloader=True``; SBLoader then resumes them as loaders without state (re-iterating in the
    same, epoch-seeded order and skipping what was consumed), which the integrations' tests show is exact, so
    SBLoader's notice about it is not repeated here. Every other warning passes.
    """
    path = rank_state_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"the wrapped loader's state_dict\(\) raised", category=UserWarning)
        state = sb.state_dict()
    torch.save(state, path)
    return path


def load_rank_state(sb: Any, directory: str | Path) -> None:
    """Load this rank's file from ``directory`` into ``sb`` (``weights_only=True``).

    Raises:
        FileNotFoundError: naming the file, when this rank's state is not there.
    """
    path = rank_state_path(directory)
    if not path.is_file():
        raise FileNotFoundError(
            f"no selection state for this rank at {path}: the checkpoint was saved without sbdata's per-rank state, "
            "or by fewer ranks than now run"
        )
    sb.load_state_dict(torch.load(path, weights_only=True))
