"""Shared test helpers: an oracle model with known per-sample losses, batch comparison, and the one save/load check."""

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


@dataclasses.dataclass(frozen=True)
class SavePoint:
    """Where :func:`check_save_load` takes a state: in ``epoch`` (0-based), after ``taken`` yielded batches, or,
    with ``taken=None``, after that epoch's pass ended (its ``StopIteration``). ``taken`` equal to the epoch's
    length is the state after its last batch, before the pass knows it has ended."""

    epoch: int
    taken: int | None

    def __str__(self) -> str:
        where = "after the pass ended" if self.taken is None else f"after {self.taken} batches"
        return f"epoch {self.epoch}, {where}"


def every_epoch(epochs: int, sizes: list[int]) -> list[SavePoint]:
    """The default save points: in every epoch, mid-way, after its last batch, and after its pass ended."""
    return [SavePoint(e, t) for e in range(epochs) for t in (max(1, sizes[e] // 2), sizes[e], None)]


def check_save_load(
    make: Callable[[], Any],
    *,
    epochs: int = 2,
    at: Iterable[int | SavePoint] | None = None,
    initial: bool = True,
    empty_rest_restarts: bool = False,
) -> list[list[Any]]:
    """The one save/load check, on torchdata's ``run_test_save_load_state`` pattern, for any front end with
    ``__iter__``/``state_dict``/``load_state_dict`` (``make()`` builds a fresh, identically seeded pipeline, model
    included: a fresh process). Iterating the pipeline once is one epoch.

    First the uninterrupted run of ``epochs`` passes is recorded. Then, if ``initial``, a fresh pipeline loaded
    with another fresh pipeline's state must replay it whole. Then for each save point a fresh pipeline is run to
    it (its batches so far must equal the record), its state is serialised with ``torch.save`` and read back with
    ``weights_only=True``, loaded into a freshly built pipeline, and that pipeline's passes must be exactly the
    record's rest: the rest of the saved epoch (unless it had ended), then each later epoch, bit for bit.

    Args:
        make: builds the pipeline.
        epochs: passes in the run, at least 1. Default 2.
        at: save points: :class:`SavePoint` values, or ints counting batches yielded over the whole run (so they
            may cross epochs); those outside ``1..total-1`` are skipped. Default :func:`every_epoch`.
        initial: check the initial state too. Default True.
        empty_rest_restarts: a state taken after an epoch's last batch resumes straight into the next epoch
            (torchdata's ``Loader`` restarts when a restored iterator has nothing left), instead of into an empty
            pass. Default False.

    Returns:
        The uninterrupted run: a list of batches per epoch.
    """
    uninterrupted = make()
    reference = [[copy.deepcopy(batch) for batch in uninterrupted] for _ in range(epochs)]
    sizes = [len(run) for run in reference]
    assert all(sizes), f"an epoch yielded nothing: {sizes}"
    if initial:
        fresh = make()
        fresh.load_state_dict(roundtrip(make().state_dict()))
        _assert_passes(fresh, reference, "from the initial state")
    for point in every_epoch(epochs, sizes) if at is None else _save_points(at, sizes):
        obj, where = make(), f"resumed at {point}"
        head = [[copy.deepcopy(batch) for batch in obj] for _ in range(point.epoch)]
        iterator, taken = iter(obj), []
        while point.taken is None or len(taken) < point.taken:
            try:
                taken.append(copy.deepcopy(next(iterator)))
            except StopIteration:
                break
        for e, got in enumerate([*head, taken]):
            _assert_runs_equal(got, reference[e][: len(got)], f"{where}: the run before saving, epoch {e}")
        state = roundtrip(obj.state_dict())
        resumed = make()
        resumed.load_state_dict(state)
        rest = [] if point.taken is None else [reference[point.epoch][len(taken) :]]
        if empty_rest_restarts and rest == [[]]:
            rest = []
        _assert_passes(resumed, rest + reference[point.epoch + 1 :], where)
    return reference


def _save_points(at: Iterable[int | SavePoint], sizes: list[int]) -> list[SavePoint]:
    """Save points from :class:`SavePoint` values and run-wide batch counts (``k`` = after the k-th batch)."""
    points = []
    for point in at:
        if isinstance(point, SavePoint):
            points.append(point)
            continue
        if not 0 < point < sum(sizes):
            continue
        epoch = 0
        while point > sizes[epoch]:
            point -= sizes[epoch]
            epoch += 1
        points.append(SavePoint(epoch, point))
    return list(dict.fromkeys(points))


def _assert_passes(obj: Any, passes: list[list[Any]], label: str) -> None:
    """Each pass over ``obj`` yields exactly the next expected epoch."""
    for i, want in enumerate(passes):
        _assert_runs_equal([copy.deepcopy(batch) for batch in obj], want, f"{label}: pass {i} after loading")


def _assert_runs_equal(got: list[Any], want: list[Any], label: str) -> None:
    assert len(got) == len(want), f"{label}: {len(got)} batches, expected {len(want)}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_batches_equal(a, b, f"{label}: batch {i}")


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
    checkpoint holds both states (for :func:`check_save_load`).

    Args:
        collator: the collator, built fresh for each run.
        dataset: the map-style dataset the loader reads.
        batch_size: the loader's batch size. Default 4.
        shuffle_seed: reshuffle every epoch with torchdata's stateful ``RandomSampler`` seeded so (its generator
            travels in the loader's state); None reads in order. Default None.
    """

    def __init__(self, collator: Any, dataset: Any, batch_size: int = 4, shuffle_seed: int | None = None) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader
        from torchdata.stateful_dataloader.sampler import RandomSampler

        self.collator = collator
        sampler = None
        if shuffle_seed is not None:
            sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(shuffle_seed))
        self.loader = StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collator)

    def __iter__(self) -> Any:
        return iter(self.loader)

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict(), "collator": self.collator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self.collator.load_state_dict(state["collator"])


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
