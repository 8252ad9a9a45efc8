"""No host-device synchronisation per SB step on the default paths, but one for a list/tuple column.

On the CPU nothing synchronises, so the test counts the calls that would on a GPU instead: reading a device tensor
on the host (``item``, ``tolist``, ``bool()``, ``int()``, ``float()``, ``cpu()``, ``numpy()``), and the operators
whose output size depends on the data (``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing). A call
counts when sbdata's own code makes it on a tensor other than the loader's batch before it moves to the device (the
ids the engine reads on the host), except in ``sbdata/_hostcopy.py``, whose reads are of pinned copies whose CUDA
event has completed. Each such copy (a ``HostCopy``) counts too, except the non-finite check's (one per 8 SB steps,
``sbdata/engine/_finite.py``): ``observe`` must not copy per call. On a GPU, ``torch.cuda.set_sync_debug_mode("error")``
checks the same for real.

A batch with a list or tuple column (WebDataset's ``__key__``) costs one copy of the kept indices per SB step by
default, so that the column arrives as a list (``lazy_columns=False``): that is the configuration's allowance, one
``cpu`` (and the ``numpy`` of that host copy) from ``sbdata/batch/_structure.py`` per SB step; with
``lazy_columns=True`` it arrives as a ``KeptColumn`` and the allowance is zero.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

from sbdata import Auto, CostTable, KeptColumn, LossCache, SBLoader
from sbdata.batch import _hostcopy
from tests.helpers import OracleModel, ce

SBDATA = str(Path(__file__).resolve().parents[2] / "sbdata")
EXEMPT = (str(Path(SBDATA) / "batch" / "_hostcopy.py"),)
COPIES_ALLOWED = (  # non-blocking copies at a fixed cadence, read once they have landed
    str(Path(SBDATA) / "engine" / "_finite.py"),  # the non-finite flag: one per 8 SB steps
    str(Path(SBDATA) / "auto" / "_control.py"),  # keep="auto"'s score sums: one per `every` scored steps
    str(Path(SBDATA) / "engine" / "_precision.py"),  # autocast_dtype='s check: one per autocast_check_every SB steps
    str(Path(SBDATA) / "engine" / "_score_mode.py"),  # the scoring-mode check: one per observe, the first 3 only
)
READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy", "nonzero", "unique")
DATA_SIZED = ((torch, "nonzero"), (torch, "masked_select"), (torch, "unique"), (torch.Tensor, "masked_select"))


def _caller() -> str:
    """The file of the nearest frame outside torch, numpy and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and "/torch/" not in name and "/numpy/" not in name and "contextlib" not in name:
            return name
        frame = frame.f_back
    return ""


class SyncCounter:
    """Counts would-be synchronisations made by sbdata's code while active."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.host: dict[int, torch.Tensor] = {}  # the loader's batches as they come, before the move (by id)

    def _count(self, what: str, tensor: object) -> None:
        name = _caller()
        if name.startswith(SBDATA) and name not in EXEMPT and id(tensor) not in self.host:
            self.calls.append(f"{what} from {Path(name).name}")

    @contextlib.contextmanager
    def active(self):
        patcher = pytest.MonkeyPatch()
        counter = self

        def wrap(owner, name):
            original = getattr(owner, name)

            def counted(*args, **kwargs):
                counter._count(name, args[0] if args else None)
                return original(*args, **kwargs)

            patcher.setattr(owner, name, counted)

        for name in READS:
            wrap(torch.Tensor, name)
        host_copy = _hostcopy.HostCopy.__init__

        def copied(copy, tensor):
            name = _caller()
            if name.startswith(SBDATA) and name not in COPIES_ALLOWED:
                counter.calls.append(f"device-to-host copy from {Path(name).name}")
            host_copy(copy, tensor)

        patcher.setattr(_hostcopy.HostCopy, "__init__", copied)
        for owner, name in DATA_SIZED:
            wrap(owner, name)
        getitem, setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__

        def masked(index) -> bool:
            items = index if isinstance(index, tuple) else (index,)
            return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)

        def get(tensor, index):
            if masked(index):
                counter._count("boolean-mask indexing", tensor)
            return getitem(tensor, index)

        def put(tensor, index, value):
            if masked(index):
                counter._count("boolean-mask assignment", tensor)
            return setitem(tensor, index, value)

        patcher.setattr(torch.Tensor, "__getitem__", get)
        patcher.setattr(torch.Tensor, "__setitem__", put)
        try:
            yield self
        finally:
            patcher.undo()


LOSSES = [float(v) for v in torch.rand(64, generator=torch.Generator().manual_seed(0)) * 3]


def batches(epoch: int, keys: bool = True) -> list[dict]:
    """Four batches of 16 (the last of 13) with ids, a different order each epoch; string keys unless ``keys=False``."""
    order = torch.randperm(61, generator=torch.Generator().manual_seed(epoch))
    out = []
    for start in range(0, 61, 16):
        ids = order[start : start + 16]
        x = torch.stack([ids.float(), torch.zeros(len(ids))], dim=1)
        key_column = [f"sample-{i:03d}" for i in ids.tolist()]  # WebDataset-style string keys, a host column
        batch = {"input": x, "target": torch.zeros(len(ids), dtype=torch.long), "index": ids, "__key__": key_column}
        out.append(batch if keys else {k: v for k, v in batch.items() if k != "__key__"})
    return out


CONFIGS = [
    pytest.param({"policy": policy, "nan_policy": nan}, id=f"{policy}-{nan}")
    for policy in ("topk", "rank", "random")
    for nan in ("raise", "keep")
] + [
    pytest.param({"policy": "rank", "return_weights": True}, id="rank-weights"),
    pytest.param({"batch_size": 8}, id="topk-pooled"),
    pytest.param({"cache": "dense"}, id="dense-cache"),
    pytest.param({"cache": "dense", "observe": True}, id="dense-cache-observe"),
    pytest.param({"cache": "keyed"}, id="keyed-cache"),
    pytest.param({"cache": "keyed", "observe": True}, id="keyed-cache-observe"),
    pytest.param({"cache": "dense", "observe": True, "refresh": "scored"}, id="dense-cache-observe-scored"),
    pytest.param({"cache": "keyed", "observe": True, "refresh": "scored"}, id="keyed-cache-observe-scored"),
    pytest.param({"cache": "dense", "observe": True, "policy": "rank", "batch_size": 8}, id="dense-rank-pooled"),
    pytest.param({"cache": "dense", "observe": True, "unit": "step"}, id="dense-step-observe"),
    # no column at all: zero synchronisations with the default lazy_columns=False
    pytest.param({"keys": False}, id="topk-no-columns"),
    pytest.param({"keys": False, "cache": "dense", "observe": True, "batch_size": 8}, id="dense-pooled-no-columns"),
    # the key column as a list (the default): one copy of the kept indices per SB step, the allowance
    pytest.param({"cache": "keyed-strings", "observe": True}, id="keyed-strings-observe-as-list"),
    # lazy_columns=True, keyed by the string keys: the yielded batch's key column is a KeptColumn, passed back to
    # observe unread: no synchronisation at all
    pytest.param({"cache": "keyed-strings", "observe": True, "lazy_columns": True}, id="keyed-strings-observe"),
    pytest.param(
        {"cache": "keyed-strings", "observe": True, "refresh": "scored", "lazy_columns": True},
        id="keyed-strings-observe-scored",
    ),
    pytest.param(
        {"cache": "keyed-strings", "observe": True, "batch_size": 8, "lazy_columns": True}, id="keyed-strings-pooled"
    ),
    pytest.param({"lazy_columns": True, "batch_size": 8}, id="topk-pooled-lazy-columns"),
    # keep="auto" on a fixed cost table, trials of short windows again and again (measuring, averaging, deciding)
    pytest.param(
        {
            "keep": Auto(
                keeps=(0.25,), window=2, settle=1, cycles=1, warmup=1, every=3, costs=CostTable(1e-3, 3.0), run=1000
            ),
            "batch_size": 8,
        },
        id="auto-trials-pooled",
    ),
    pytest.param(
        {
            "keep": Auto(
                window=2, settle=1, cycles=1, warmup=1, every=3, costs=CostTable.forward_equivalents(), run=1000
            )
        },
        id="auto-trials",
    ),
    pytest.param({"policy": "importance", "return_weights": True}, id="importance-weights"),
    pytest.param({"policy": "importance", "nan_policy": "keep", "batch_size": 8}, id="importance-keep-pooled"),
    pytest.param({"score": "gradnorm"}, id="topk-gradnorm"),
    pytest.param({"policy": "importance", "score": "gradnorm", "return_weights": True}, id="importance-gradnorm"),
    pytest.param({"cache": "dense", "policy": "importance", "score": "gradnorm"}, id="dense-cache-gradnorm"),
    # autocast_dtype='s live check at every SB step (a full-precision pass, the agreement read once landed)
    pytest.param({"autocast_dtype": torch.bfloat16, "autocast_check_every": 1}, id="autocast-checked"),
    pytest.param(
        {"cache": "dense", "autocast_dtype": torch.bfloat16, "autocast_check_every": 1}, id="autocast-checked-cache"
    ),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_no_sync_per_sb_step(config):
    config = dict(config)
    layout, observe, unit = config.pop("cache", None), config.pop("observe", False), config.pop("unit", "epoch")
    refresh, keys = config.pop("refresh", "observed"), config.pop("keys", True)
    per_sb_step = 1 if keys and not config.get("lazy_columns") else 0  # the key column arrives as a list
    if layout is not None:
        sizes = {"size": 61} if layout == "dense" else {"capacity": 61}
        id_key = "__key__" if layout == "keyed-strings" else "index"
        config.update(cache=LossCache(staleness=1, unit=unit, refresh=refresh, **sizes), id_key=id_key)
    model = OracleModel(LOSSES)
    counter = SyncCounter()
    epochs = [batches(e, keys) for e in range(4)]
    for epoch in epochs:
        for batch in epoch:
            counter.host.update((id(v), v) for v in batch.values() if isinstance(v, torch.Tensor))
    sb = SBLoader([], model, ce, **{"keep": 0.5, "generator": 1, **config})
    steps = allowed = 0
    for epoch in epochs:
        sb.loader = epoch
        outputs = iter(sb)  # a pass's start may settle what the last one left in flight: once per epoch
        with counter.active():
            ended = False  # whether the source has run out: the epoch's end may read what is in flight, once
            while True:
                sb_steps = sb.engine.tracker.sb_steps
                try:
                    out = next(outputs)
                except StopIteration:
                    out = None
                copies = per_sb_step * (sb.engine.tracker.sb_steps - sb_steps)
                allowance = ["cpu from _structure.py", "numpy from _structure.py"] * copies  # numpy() of the host copy
                assert counter.calls[: len(allowance)] == allowance, counter.calls
                del counter.calls[: len(allowance)]
                allowed += len(allowance)
                if not ended and (out is None or sb.engine.source_ended):
                    ended = True  # this call ran the source out (it may still hand on a pooled rest)
                    assert len(counter.calls) <= 1, counter.calls  # one copy of the observed ids, at most
                    counter.calls.clear()
                if out is None:
                    break
                batch = out[0] if isinstance(out, tuple) else out
                if keys:  # the column arrives as it came in (a list), or as a KeptColumn with lazy_columns=True
                    assert type(batch["__key__"]) is (KeptColumn if config.get("lazy_columns") else list)
                if observe:  # as the README shows: the yielded batch, ids and all, with the training losses
                    sb.observe(batch, ce(model(batch["input"]), batch["target"], reduction="none"))
                steps += 1
                assert counter.calls == [], f"step {steps}: {counter.calls}"
    assert steps > 8
    assert allowed == (2 * sb.stats.sb_steps if per_sb_step else 0)  # the allowance was used, once per SB step
    if layout is not None:
        assert sb.stats.samples_reused > 0


def test_variable_count_policies_do_sync_and_the_counter_sees_it():
    """The exempt paths (documented): ``nan_policy="drop"`` and ``history`` read a count on the host."""
    for options in ({"nan_policy": "drop"}, {"policy": "history"}):
        counter = SyncCounter()
        epoch = batches(0)
        counter.host.update((id(v), v) for batch in epoch for v in batch.values())
        with counter.active():
            list(SBLoader(epoch, OracleModel(LOSSES), ce, **options))
        assert counter.calls, options


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_no_sync_on_cuda():  # pragma: no cover - runs where a GPU is lent
    device = torch.device("cuda")
    model = OracleModel(LOSSES).to(device)
    layouts = (None, {"size": 61}, {"capacity": 61}, {"size": 61, "refresh": "scored"}, {"capacity": 61, "key": 1})
    for layout in layouts:
        layout = None if layout is None else dict(layout)
        id_key = "__key__" if layout is not None and layout.pop("key", None) else "index"
        cached = {} if layout is None else {"cache": LossCache(staleness=1, **layout), "id_key": id_key}
        sb = SBLoader([], model, ce, keep=0.5, lazy_columns=True, **cached)  # the key column as a KeptColumn
        for e in range(3):
            sb.loader = [
                {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in batches(e)
            ]
            outputs = iter(sb)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                for _ in range(len(sb.loader) - 1):  # every step but the epoch's end, which reads what is in flight
                    out = next(outputs)
                    if layout is not None:
                        sb.observe(out, ce(model(out["input"]), out["target"], reduction="none"))
            finally:
                torch.cuda.set_sync_debug_mode(0)
            list(outputs)


@pytest.mark.parametrize("layout", ["dense", "keyed"])
def test_the_cache_never_waits_for_observed_ids_within_or_at_the_end_of_an_epoch(layout, monkeypatch):
    """Copies that land one poll late, as on a GPU: a copy of observed ids read before it reported ready is a wait
    (a synchronisation). With a cache and observe(), over three epochs (their ends and starts included), none is;
    state_dict, which must hold every observation, is the one place that waits."""
    waits: list[str] = []
    made = _hostcopy.HostCopy.__init__

    def late_init(copy, tensor):
        made(copy, tensor)
        copy.polls, copy.origin = 0, Path(_caller()).name

    def late_ready(copy):
        copy.polls += 1
        return copy.polls > 1  # lands at the second poll: one step after it was sent

    original_value = _hostcopy.HostCopy.value

    def value(copy):
        if copy.polls < 2:
            waits.append(copy.origin)
        return original_value(copy)

    monkeypatch.setattr(_hostcopy.HostCopy, "__init__", late_init)
    monkeypatch.setattr(_hostcopy.HostCopy, "ready", late_ready)
    monkeypatch.setattr(_hostcopy.HostCopy, "value", value)
    sizes = {"size": 61} if layout == "dense" else {"capacity": 61}
    model = OracleModel(LOSSES)
    sb = SBLoader([], model, ce, keep=0.5, cache=LossCache(staleness=1, **sizes), id_key="index", nan_policy="keep")
    for epoch in range(3):
        sb.loader = batches(epoch, keys=False)
        for out in sb:
            sb.observe(out, ce(model(out["input"]), out["target"], reduction="none"))
    assert [origin for origin in waits if origin == "_inflight.py"] == []
    assert sb.stats.samples_reused > 0  # the observations landed and were used
    sb.state_dict()
    assert "_inflight.py" in waits  # the last epoch's observations, read in the checkpoint
