"""Shared test helpers: an oracle model with known per-sample losses, batch comparison, and the resume check."""

from __future__ import annotations

import copy
import dataclasses
import io
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sbdata import KeptColumn


class OracleModel(nn.Module):
    """A model whose cross-entropy loss on sample ``i`` (target 0) is exactly ``table[i]``.

    Inputs are (B, 1+) float tensors whose first column is the sample id. The logits are ``[0, z]`` with
    ``z = log(expm1(L))``, so ``F.cross_entropy(logits, 0) = softplus(z) = L``. It records the batch size of
    every forward call, so tests can count scoring work.
    """

    def __init__(self, table: Iterable[float]) -> None:
        super().__init__()
        self.register_buffer("table", torch.as_tensor(list(table), dtype=torch.float32))
        self.scale = nn.Parameter(torch.ones(()))  # gives the model a device and something to train
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.shape[0])
        ids = x[:, 0].round().long()
        z = torch.log(torch.expm1(self.table[ids])) * self.scale
        return torch.stack([torch.zeros_like(z), z], dim=1)


def oracle_batch(ids: Iterable[int], *, width: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` for the given sample ids: inputs (B, width) with the id in column 0, targets zeros."""
    ids_t = torch.as_tensor(list(ids), dtype=torch.float32)
    inputs = torch.cat([ids_t[:, None], torch.zeros(len(ids_t), width - 1)], dim=1)
    return inputs, torch.zeros(len(ids_t), dtype=torch.long)


def ids_of(batch: Any) -> list[int]:
    """Sample ids of an oracle batch: column 0 of its inputs, wherever they are."""
    inputs = batch["input"] if isinstance(batch, Mapping) else batch[0]
    return [int(v) for v in inputs[:, 0].round().tolist()]


def expected_topk(losses: list[float], ids: list[int], keep: float) -> list[int]:
    """Brute force: the ids of the ceil(keep*n) highest losses, ties to the earlier position, in batch order."""
    k = min(len(ids), max(1, math.ceil(keep * len(ids) - 1e-9)))
    ranked = sorted(range(len(ids)), key=lambda pos: (-losses[ids[pos]], pos))[:k]
    return [ids[pos] for pos in sorted(ranked)]


def ce(outputs: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.cross_entropy(outputs, targets, reduction=reduction)


def assert_batches_equal(a: Any, b: Any, path: str = "batch") -> None:
    """Exact, recursive equality of two batch structures (types, shapes, dtypes, values)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, KeptColumn):  # the same kept items, and from the same kind of column
        assert type(a.source) is type(b.source), f"{path}: kept from {type(a.source)} != {type(b.source)}"
        assert_batches_equal(a.values(), b.values(), path)
    elif isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{path}: {a.shape}/{a.dtype} != {b.shape}/{b.dtype}"
        assert torch.equal(a, b), f"{path}: values differ"
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, Mapping):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_batches_equal(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_batches_equal(x, y, f"{path}[{i}]")
    elif dataclasses.is_dataclass(a):
        for field in dataclasses.fields(a):
            assert_batches_equal(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def roundtrip(state: Any) -> Any:
    """Serialise a state with torch.save and read it back with ``weights_only=True`` (torch's default), as a
    checkpoint would: a state that needs full unpickling fails here."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def check_epoch_resume(
    make: Callable[[], Any], *, epochs: int = 3, empty_rest_restarts: bool = False
) -> list[list[Any]]:
    """Exact resume in a fresh process, in every epoch: the matrix of issue 10.

    ``make()`` builds a fresh, identically seeded pipeline (model, loader, engine) each call; iterating it once is
    one epoch. For each epoch ``e`` and each save point (mid-epoch, after the epoch's last batch but before the
    pass ended, and at the end of the pass), the state is taken there, serialised with ``torch.save`` and read back
    with ``weights_only=True``, loaded into a freshly built pipeline, and every later batch (the rest of epoch
    ``e``, then the passes of the epochs after it) must equal the uninterrupted run's bit for bit. Returns the
    uninterrupted run, per epoch.

    A state taken after an epoch's last batch resumes into an empty pass (the rest of that epoch), unless
    ``empty_rest_restarts``: torchdata's ``Loader`` starts the next epoch at once when a restored iterator has
    nothing left.
    """
    reference = [[copy.deepcopy(batch) for batch in obj] for obj in [make()] for _ in range(epochs)]
    assert all(reference), f"an epoch yielded nothing: {[len(r) for r in reference]}"
    for epoch in range(epochs):
        size = len(reference[epoch])
        for label, stop in (("mid", max(1, size // 2)), ("last", size), ("end", None)):
            obj = make()
            for _ in range(epoch):
                for _batch in obj:
                    pass
            iterator, taken = iter(obj), 0
            while stop is None or taken < stop:
                try:
                    next(iterator)
                except StopIteration:
                    break
                taken += 1
            state = roundtrip(obj.state_dict())
            resumed = make()
            resumed.load_state_dict(state)
            where = f"resume in epoch {epoch} ({label}, after {taken} batches)"
            if stop is not None and not (empty_rest_restarts and taken == size):  # a pass finishes the saved epoch
                _assert_runs_equal([copy.deepcopy(b) for b in resumed], reference[epoch][taken:], where)
            for later in range(epoch + 1, epochs):
                _assert_runs_equal([copy.deepcopy(b) for b in resumed], reference[later], f"{where}: epoch {later}")
    return reference


class StageStream:
    """A resumable stream through an ``sb_select`` stage, as a user would write one.

    Epoch ``e`` reads ``batches_for(e)`` (a list, e.g. reshuffled per epoch). The stage restores the selection;
    this wrapper keeps its epoch index and, when the stage continues a saved epoch, skips ``resume_skip`` batches.
    """

    def __init__(self, batches_for: Callable[[int], list[Any]], stage: Any) -> None:
        self.batches_for, self.stage = batches_for, stage
        self.epoch, self.started = 0, False

    def __iter__(self) -> Any:
        if self.stage.engine.continues_saved_epoch:
            data = self.batches_for(self.epoch)[self.stage.resume_skip :]
        else:
            self.epoch += self.started
            self.started = True
            data = self.batches_for(self.epoch)
        return self.stage(iter(data))

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage.state_dict(), "epoch": self.epoch, "started": self.started}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage.load_state_dict(state["stage"])
        self.epoch, self.started = state["epoch"], state["started"]


class CollatedRun:
    """An :class:`~sbdata.SBCollator` inside torchdata's ``StatefulDataLoader``: one resumable pipeline whose
    checkpoint holds both states (for :func:`check_resume`).

    Args:
        collator: the collator, built fresh for each run.
        dataset: the map-style dataset the loader reads.
        batch_size: the loader's batch size. Default 4.
    """

    def __init__(self, collator: Any, dataset: Any, batch_size: int = 4) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader

        self.collator = collator
        self.loader = StatefulDataLoader(dataset, batch_size=batch_size, collate_fn=collator)

    def __iter__(self) -> Any:
        return iter(self.loader)

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict(), "collator": self.collator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self.collator.load_state_dict(state["collator"])


def check_resume(
    make: Callable[[], Any],
    *,
    epochs: int = 1,
    midpoints: Iterable[int] | None = None,
    check_initial: bool = True,
) -> list[Any]:
    """torchdata-style resume check for any front end with ``__iter__``/``state_dict``/``load_state_dict``.

    ``make()`` must build a fresh, identically seeded pipeline each call (model included). Checks that:
    loading a fresh pipeline's initial state reproduces the whole run (unless ``check_initial`` is False); and
    for each midpoint (a count of yielded
    batches over the whole run, which may cross epoch boundaries), saving there, serialising, loading into a
    freshly built pipeline and finishing the run reproduces the rest exactly. Returns the reference batches.
    """

    def run(obj: Any, stop_after: int | None = None) -> tuple[list[Any], Any]:
        out: list[Any] = []
        for _ in range(epochs):
            for batch in obj:
                out.append(copy.deepcopy(batch))
                if stop_after is not None and len(out) == stop_after:
                    return out, roundtrip(obj.state_dict())
        return out, None

    reference, _ = run(make())
    assert reference, "the pipeline yielded nothing"

    if check_initial:
        fresh = make()
        fresh.load_state_dict(roundtrip(make().state_dict()))
        replay, _ = run(fresh)
        _assert_runs_equal(replay, reference, "initial state")

    points = sorted(set(midpoints)) if midpoints is not None else [1, len(reference) // 2, len(reference) - 1]
    for point in points:
        if not 0 < point < len(reference):
            continue
        head, state = run(make(), stop_after=point)
        resumed = make()
        resumed.load_state_dict(state)
        tail = _finish(resumed, epochs, head, reference)
        _assert_runs_equal(head + tail, reference, f"resume after {point} batches")
    return reference


def _finish(obj: Any, epochs: int, head: list[Any], reference: list[Any]) -> list[Any]:
    """Continue a resumed pipeline to the end of the run: the rest of the saved epoch, then the epochs left."""
    tail: list[Any] = []
    for _ in range(epochs):
        tail.extend(copy.deepcopy(batch) for batch in obj)
        if len(head) + len(tail) >= len(reference):
            break
    return tail


def _assert_runs_equal(got: list[Any], want: list[Any], label: str) -> None:
    assert len(got) == len(want), f"{label}: {len(got)} batches, expected {len(want)}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_batches_equal(a, b, f"{label}: batch {i}")


def write_oracle_shards(root: Any, n: int, shards: int = 2) -> list[str]:
    """Write ``n`` oracle samples to ``shards`` tar shards under ``root`` (a Path) with ``webdataset.ShardWriter``.

    Sample ``i``: ``__key__`` ``s{i:04d}``, ``.npy`` float32 ``[i, 0, 0]`` (written without pickle), ``.cls`` 0.
    Returns the shard paths in order.
    """
    import webdataset as wds

    with wds.ShardWriter(str(root / "shard-%06d.tar"), maxcount=-(-n // shards), verbose=0) as sink:
        for i in range(n):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.array([i, 0, 0], dtype=np.float32), allow_pickle=False)
            sink.write({"__key__": f"s{i:04d}", "npy": buffer.getvalue(), "cls": b"0"})
    return sorted(str(path) for path in root.glob("shard-*.tar"))


def decode_npy_cls(sample: Mapping[str, Any]) -> dict[str, Any]:
    """Decode a raw WebDataset sample: only ``.npy`` (no pickle) and ``.cls``; other fields are dropped."""
    return {
        "__key__": sample["__key__"],
        "__url__": sample["__url__"],
        "npy": np.lib.format.read_array(io.BytesIO(sample["npy"]), allow_pickle=False),
        "cls": int(sample["cls"]),
    }
