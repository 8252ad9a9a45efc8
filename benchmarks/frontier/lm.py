"""The continued language-model suite (``continued-lm``): its data, pretraining, arms and run.

:func:`lm_mix` (:class:`LMSizes` for the numbers): the standard library's code (the old domain) and
``pydoc_data/topics.py`` (the new one) as 128-byte chunks (``harness.lm``), cut into the pretraining set, the continued
mix (replayed, fresh and new chunks), the mix, new and old test sets and the irreducible model's hold-out.
:func:`pretrain_lm` (not timed; ``torch.manual_seed(1000 + seed)``): the ByteLM with its step feeding a dense
``LossCache`` for the warm-cache arms. The arms are :class:`~.arms.BudgetArm` configurations on dict batches
``{"input_ids", "ids"}``; ``ReducibleSelect``'s irreducible losses are computed once, up front, and priced as the
run's (``upfront_steps``, ``upfront_scored``). The suite's design: ``benchmarks/frontier/README.md``."""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness._sb import LossCache, PruningSampler, ReducibleSelect, SBLoader, auto_decisions
from benchmarks.harness.arms import SamplerObserver
from benchmarks.harness.lm import ByteLM, chunks_of, stdlib_files, validation_loss
from benchmarks.harness.lm_arms import ADAPTER, SequenceBatches, sequence_losses, split_batch
from benchmarks.harness.lm_train import make_optimizer
from benchmarks.harness.timing import cpu_clock
from benchmarks.harness.train import endless, fit, one_cycle, train_step

from .arms import BudgetArm
from .data import load_pretrained

DOCS = "pydoc_data/topics.py"  # the documentation text shipped with Python: the new domain
PRETRAIN_BATCH, PRETRAIN_LR = 16, 4e-3
DRAW_SEED = 7  # the fixed draw of the pretraining, fresh and new chunks (the same data for every seed)


@dataclass(frozen=True)
class LMSizes:
    """How many 128-byte chunks each part of the suite takes (see the module docstring)."""

    pretrain: int = 3_000
    replay: int = 530
    fresh: int = 270
    new: int = 200
    test_old: int = 192
    test_new: int = 192
    test_mix_new: int = 48  # new test chunks in the mix test set (80/20 with test_old)
    holdout_old: int = 400  # the irreducible model's hold-out: code chunks
    holdout_new: int = 100  # and documentation chunks
    pretrain_epochs: int = 3

    @property
    def mix(self) -> int:
        return self.replay + self.fresh + self.new

    @property
    def known(self) -> float:
        """Share of the mix the pretraining saw (and the warm cache knows)."""
        return self.replay / self.mix


SMOKE_LM_SIZES = LMSizes(pretrain=96, replay=48, fresh=24, new=24, test_old=16, test_new=16, test_mix_new=4,
                         holdout_old=16, holdout_new=4, pretrain_epochs=1)  # fmt: skip


@dataclass
class LMMix:
    """The continued mix (``chunks``, ids are positions), its pretraining set and test sets, and the per-seed
    pretrained states. ``y_train`` is the mix's chunks (the frontier's run counts samples by it)."""

    chunks: torch.Tensor
    pre: torch.Tensor
    test_mix: torch.Tensor
    test_old: torch.Tensor
    test_new: torch.Tensor
    holdout: torch.Tensor
    sizes: LMSizes = field(default_factory=LMSizes)
    pretrained_dir: Path | None = None
    description: dict = field(default_factory=dict)

    @property
    def y_train(self) -> torch.Tensor:
        return self.chunks

    def pretrained(self, seed: int) -> dict[str, Any]:
        """The seed's pretrained model and cache states (from :func:`pretrain_lm`'s file)."""
        return load_pretrained(self.pretrained_dir, seed, "continued-lm")

    def pretrained_model(self, seed: int) -> ByteLM:
        """A new ByteLM (drawing its initialisation from the global RNG, as every run's model does) holding the
        seed's pretrained weights."""
        model = ByteLM()
        model.load_state_dict(self.pretrained(seed)["model"])
        return model

    def id_map(self) -> torch.Tensor:
        """For each id of the pretraining cache, its id in the mix: the replayed chunks come first, the rest -1."""
        out = torch.full((self.sizes.pretrain,), -1, dtype=torch.long)
        out[: self.sizes.replay] = torch.arange(self.sizes.replay)
        return out


def _spaced(chunks: torch.Tensor, count: int) -> torch.Tensor:
    if count > len(chunks):
        raise ValueError(f"asked for {count} chunks of {len(chunks)}: lower LMSizes")
    return chunks[torch.linspace(0, len(chunks) - 1, count).round().long()]


def lm_mix(sizes: LMSizes = LMSizes(), pretrained_dir: Path | None = None, root: str | None = None) -> LMMix:
    """The suite's data (see the module docstring); ``root``: the standard library's folder (default this Python's)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = stdlib_files(str(base))
    docs = base / DOCS
    if docs not in files:
        raise RuntimeError(f"no {docs}: the new domain is the documentation text shipped with Python")
    code = [path for path in files if path != docs]
    test_files = code[0::20]
    train_files = [path for i, path in enumerate(code) if i % 20]
    old_train, old_test = chunks_of(train_files), chunks_of(test_files)
    doc_chunks = chunks_of([docs])
    cut = int(0.8 * len(doc_chunks))
    new_train, new_test = doc_chunks[:cut], doc_chunks[cut:]
    s = sizes
    draw = torch.Generator().manual_seed(DRAW_SEED)
    order = torch.randperm(len(old_train), generator=draw)
    used = s.pretrain + s.fresh
    if used + s.holdout_old > len(order) or s.replay > s.pretrain or s.new + s.holdout_new > len(new_train):
        raise ValueError(f"{s}: needs replay <= pretrain, pretrain + fresh + holdout_old <= {len(order)} code chunks "
                         f"and new + holdout_new <= {len(new_train)} documentation chunks")  # fmt: skip
    pre = old_train[order[: s.pretrain]]
    fresh = old_train[order[s.pretrain : used]]
    docs_order = torch.randperm(len(new_train), generator=draw)
    new = new_train[docs_order[: s.new]]
    holdout = torch.cat([old_train[order[used : used + s.holdout_old]],
                         new_train[docs_order[s.new : s.new + s.holdout_new]]])  # fmt: skip
    chunks = torch.cat([pre[: s.replay], fresh, new])
    test_old, test_new = _spaced(old_test, s.test_old), _spaced(new_test, s.test_new)
    description = {
        "root": str(base), "code_files": {"train": len(train_files), "test": len(test_files)},
        "code_chunks": {"train": len(old_train), "test": len(old_test)},
        "docs_chunks": {"train": len(new_train), "test": len(new_test)}, "docs": DOCS,
    }  # fmt: skip
    return LMMix(chunks, pre, torch.cat([test_old, test_new[: s.test_mix_new]]), test_old, test_new, holdout, sizes,
                 pretrained_dir, description)  # fmt: skip


def domains(model: torch.nn.Module, data: LMMix) -> dict[str, float]:
    """The model's nats per byte on the mix, new-domain and old-domain test sets."""
    return {
        "nats_mix": validation_loss(model, data.test_mix),
        "nats_new": validation_loss(model, data.test_new),
        "nats_old": validation_loss(model, data.test_old),
    }


def pretrain_lm(data: LMMix, seed: int) -> dict[str, Any]:
    """Pretrain the seed's ByteLM on the pretraining set (a dense cache observing the training step's losses); the
    states to save and the pretrained model's nats per byte."""
    torch.manual_seed(1000 + seed)
    model = ByteLM()
    epochs = data.sizes.pretrain_epochs
    cache = LossCache(size=len(data.pre))
    batches = SequenceBatches(data.pre, PRETRAIN_BATCH, 1000 + seed)
    observe = lambda batch, losses, epoch: cache.observe(batch["ids"], losses, epoch)  # noqa: E731
    fit(
        model, make_optimizer(model, PRETRAIN_LR), batches, epochs, PRETRAIN_LR, losses=sequence_losses, observe=observe
    )
    return {"model": model.state_dict(), "cache": cache.state_dict(), "seed": seed, "epochs": epochs,
            **{f"pretrained_{k}": v for k, v in domains(model, data).items()}}  # fmt: skip


def irreducible_losses(data: LMMix, seed: int, lr: float) -> tuple[torch.Tensor, int]:
    """RHO-LOSS's irreducible losses of every mix chunk, (N,): a copy of the seed's pretrained model trained one epoch
    on the hold-out (batch 16, ``lr`` one-cycle, its own RNG stream), then one no-grad pass over the mix. Returns the
    losses and the training steps taken."""
    with torch.random.fork_rng():
        torch.manual_seed(30_000 + seed)
        model = data.pretrained_model(seed)
        batches = SequenceBatches(data.holdout, PRETRAIN_BATCH, 30_000 + seed)
        total = fit(model, make_optimizer(model, lr), batches, 1, lr, losses=sequence_losses)
        model.eval()
        with torch.no_grad():
            losses = [sequence_losses(model, {"input_ids": chunk.long()})
                      for chunk in data.chunks.split(PRETRAIN_BATCH)]  # fmt: skip
    return torch.cat(losses), total


class _Run:
    """One arm's batches and the hooks its training step calls: ``observe`` (the warm cache, or the pruning
    sampler's), ``weights`` (the pruning sampler's rescaling), and the counts its record keeps."""

    def __init__(self, arm: BudgetArm, model: torch.nn.Module, data: LMMix, *, epochs: int, seed: int) -> None:
        chunks = data.chunks
        n = len(chunks)
        cache = None
        if arm.warm:
            cache = LossCache(staleness=arm.staleness, size=n)
            cache.warm_start(data.pretrained(seed)["cache"], id_map=data.id_map())
        sampler = None
        if arm.prune is not None:
            if cache is None or arm.policy is not None:
                raise ValueError(f"arm {arm.name}: prune= runs plain training over the warm cache here: pass "
                                 "warm=True and policy=None")  # fmt: skip
            sampler = PruningSampler(n, cache, epochs=epochs, prune=arm.prune, seed=seed)
        self.source = SequenceBatches(chunks, arm.batch, seed, sampler)
        self.loader: Any = self.source
        self.observer: Any = None
        self.weights: Any = None
        self.sb: SBLoader | None = None
        self.upfront: dict[str, int] = {}
        if sampler is not None:
            observer = SamplerObserver(sampler, ids=lambda batch: batch["ids"])
            self.observer, self.weights = observer, observer.weights
        elif arm.policy is not None:
            options: dict[str, Any] = {"keep": arm.keep, "generator": seed}
            if arm.policy == "reducible":
                losses, steps = irreducible_losses(data, seed, arm.lr)
                self.upfront = {"upfront_steps": steps, "upfront_scored": n}
                options.update(policy=ReducibleSelect(losses, policy="topk"), id_key="ids")
            elif arm.policy != "default":
                options["policy"] = arm.policy
            if cache is not None:
                options.update(cache=cache, id_key="ids")
            self.sb = SBLoader(self.source, model, loss_fn=ADAPTER["loss_fn"], forward=ADAPTER["forward"],
                               reduce=ADAPTER["reduce"], split=split_batch, **options)  # fmt: skip
            self.loader = self.sb
            if cache is not None:
                self.observer = self.sb

    def step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> None:
        """One training step (the harness's): weighted by the pruning sampler, observed where asked."""
        observe = None if self.observer is None else self.observer.observe
        train_step(model, optimizer, batch, losses=sequence_losses, observe=observe, weights=self.weights)

    def counts(self) -> dict[str, Any]:
        if self.sb is None:
            return {}
        keys = ("steps", "sb_steps", "samples_seen", "samples_scored")
        return {"sb": {k: self.sb.engine.counts[k] for k in keys}, **self.upfront}


def train_epochs(run: _Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer, lr: float, epochs: int,
                 over: int) -> int:  # fmt: skip
    """The run's first ``epochs`` epochs, the LR one-cycle over ``over`` epochs by loader progress; returns the
    steps taken (the timed runs' loop, and the user's run before ``advise``'s trial)."""
    steps = 0
    for epoch in range(epochs):
        run.loader.set_epoch(epoch)
        for batch in run.loader:
            for group in optimizer.param_groups:
                group["lr"] = one_cycle(min(1.0, run.source.progress / over), lr)
            run.step(model, optimizer, batch)
            steps += 1
    return steps


def lm_run(data: LMMix, arm: BudgetArm, epochs: int, seed: int) -> dict[str, Any]:
    """Train ``arm`` for ``epochs`` from the seed's pretrained ByteLM (the LR one-cycle over its own epochs); its
    record: configuration, steps, thread CPU seconds (evaluation excluded; up-front work included) and nats per byte
    on the three test sets."""
    torch.manual_seed(seed)
    model = data.pretrained_model(seed)
    optimizer = make_optimizer(model, arm.lr)
    started = cpu_clock()
    run = _Run(arm, model, data, epochs=epochs, seed=seed)  # the reducible arm's up-front work counts
    steps = train_epochs(run, model, optimizer, arm.lr, epochs, epochs)
    seconds = cpu_clock() - started
    record: dict[str, Any] = {"seed": seed, "epochs": epochs, "steps": steps, "seconds": seconds,
                              "config": {**arm.describe(), "batch": arm.batch, "lr": arm.lr}}  # fmt: skip
    record.update(run.counts())
    if arm.keep == "auto" and run.sb is not None:
        record["auto"] = auto_decisions(run.sb.stats)
    record.update(domains(model, data))
    return record


def endless_lm_steps(arm: BudgetArm, data: LMMix, *, seed: int = 0, prefill: bool = False):
    """Endless training steps of ``arm`` from the seed's pretrained model at a small fixed LR (the step timing's
    blocks); with ``prefill``, one epoch runs before the first step is yielded."""
    torch.manual_seed(seed)
    model = data.pretrained_model(seed)
    optimizer = make_optimizer(model, arm.lr / 25)
    run = _Run(arm, model, data, epochs=10**6, seed=seed)
    return endless(run.loader, lambda batch: run.step(model, optimizer, batch), prefill=prefill)


class _Table(torch.nn.Module):
    """A language model that does almost nothing: each byte's logits are a row of a table (the price table's
    own-work kinds; about 1% of the ByteLM's step)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(256, 256)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.table(input_ids)


def endless_lm_own_work(arm: BudgetArm, data: LMMix, *, seed: int = 0, prefill: bool = False):
    """sbdata's own work in ``arm``'s step and nothing else (a part of the price table, timed directly): the arm's
    loader and sampler built as its runs build them on :class:`_Table`, each batch taken and, where the run's step
    does, its losses observed (zeros) and its weights read; no training step."""
    torch.manual_seed(seed)
    run = _Run(arm, _Table(), data, epochs=10**6, seed=seed)

    def own(batch: dict[str, torch.Tensor]) -> None:
        if run.observer is not None:
            run.observer.observe(batch, torch.zeros(len(batch["input_ids"])))
        if run.weights is not None:
            run.weights(batch)

    return endless(run.loader, own, prefill=prefill)


def endless_lm_scoring(data: LMMix, batch: int, *, seed: int = 0):
    """Endless no-grad forwards of the pretrained model over the mix at ``batch`` (the step timing's ``score`` kind:
    what the reducible arm's up-front pass over the mix costs per batch)."""
    model = data.pretrained_model(seed)
    model.eval()
    while True:
        for chunk in data.chunks.split(batch):
            with torch.no_grad():
                sequence_losses(model, {"input_ids": chunk.long()})
            yield
