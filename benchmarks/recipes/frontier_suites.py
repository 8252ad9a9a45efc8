"""The frontier's suites, as data: each names its domain, its model family, its data and its grids.

Every suite grids plain training at its plain batches x LR (multiples of the user's recipe's) over its plain epochs
(the frontier), and every selection family at the same LRs over its selection epochs (fresh top-k also at the suite's
``fresh_batches``; the others at the user's batch). Budgets are shares of the user's recipe's priced seconds
(:data:`BUDGETS`). A grid is widened where the best LR sat at its edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.lab.arm import Arm

BUDGETS = (0.25, 0.5, 1.0)
KEEP = 0.25  # the controls' keep (random) and the other policies'


@dataclass(frozen=True)
class Suite:
    """One frontier suite.

    Attributes:
        name: its record's folder under ``results/frontier``.
        domain: the domain's name (``benchmarks/domains/``).
        family: the model family; its recipe (the domain's) is the user's.
        reference_epochs: the user's recipe's epochs (its priced seconds are the budgets' 1x).
        plain_epochs: the frontier grid's epochs.
        sb_epochs: the selection families' epochs.
        data: the domain's ``data()`` options (sizes, label noise).
        continued: pretrained on part of the data and continued on the mix (the domain's ``continued=True`` data);
            else from scratch.
        lr_multipliers: the LR grid, as multiples of the recipe's LR (every family gets it).
        wider: more LR multipliers for plain training and the families in ``wider_families``.
        wider_families: the selection families ``wider`` applies to besides plain.
        plain_wider: more LR multipliers for plain training alone.
        plain_batches: the frontier grid's batch sizes. Default (64, 128, 256).
        fresh_batches: fresh top-k's batch sizes besides the user's. Default (128,).
        narrow_families: families run at the recipe's LR only.
        skip: families of the standard list not run in this suite.
        sampler: adds the sampler's top-k (``PruningSampler(rule="top_losses")`` over the training step's losses).
        bf16: adds fresh top-k 0.25 scored under bfloat16 autocast.
        reducible: adds ``ReducibleSelect`` over top-k (the domain's hold-out trains the irreducible model).
        target: the best selection family's pre-registered ratio at some budget (seed mean). Default 0.8.
        seed_target: every seed's ratio below this. Default 0.9.
        score_mode: sbdata's ``score_mode`` for every selection arm and the timing's scoring pass. Default
            ``"batch"`` (sbdata's default); the suites recorded under the earlier default say ``"eval"``.
    """

    name: str
    domain: str
    family: str
    reference_epochs: int
    plain_epochs: tuple[int, ...]
    sb_epochs: tuple[int, ...]
    data: dict[str, Any] = field(default_factory=dict)
    continued: bool = False
    lr_multipliers: tuple[float, ...] = (1 / 3, 1.0, 2.0)
    wider: tuple[float, ...] = ()
    wider_families: tuple[str, ...] = ()
    plain_wider: tuple[float, ...] = ()
    plain_batches: tuple[int, ...] = (64, 128, 256)
    fresh_batches: tuple[int, ...] = (128,)
    narrow_families: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    score_mode: str = "batch"
    sampler: bool = False
    bf16: bool = False
    reducible: bool = False
    target: float = 0.8
    seed_target: float = 0.9

    def __post_init__(self) -> None:
        names, every = {arm.name for arm, _ in self.families()}, {arm.name for arm, _ in self.families(every=True)}
        for option, known in (("wider_families", names), ("narrow_families", names), ("skip", every)):
            unknown = sorted(set(getattr(self, option)) - known)
            if unknown:
                raise ValueError(f"suite {self.name!r}: {option} names {unknown}, not among its families "
                                 f"{sorted(known)}")  # fmt: skip

    def recipe(self, domain: Any) -> dict[str, Any]:
        return dict(domain.recipes[self.family])

    def families(self, *, every: bool = False, batch: int = 256) -> list[tuple[Arm, tuple[int, ...]]]:
        """Every arm family with its batch sizes (each at every LR of the grid); ``every``: skipped ones too;
        ``batch``: the user's."""
        b = batch
        out = [
            (Arm("plain"), self.plain_batches),
            (Arm("topk-0.25", policy="topk", keep=0.25), (*self.fresh_batches, b)),
            (Arm("topk-0.5", policy="topk", keep=0.5), (*self.fresh_batches, b)),
        ]
        if self.bf16:
            out.append((Arm("topk-0.25-bf16", policy="topk", keep=0.25, autocast=True), (b,)))
        if self.sampler:  # the rule's share (top quarter plus a tenth of the rest); prune= only turns it on
            name = "warm-sampler-topk-0.25" if self.continued else "sampler-topk-0.25"
            out.append((Arm(name, prune=0.5, rule="top_losses", warm=self.continued), (b,)))
        if self.continued:
            out += [
                (Arm("warm-topk-0.25", policy="topk", keep=0.25, warm=True), (b,)),
                (Arm("warm-topk-0.5", policy="topk", keep=0.5, warm=True), (b,)),
                (Arm("warm-prune", warm=True, prune=0.5), (b,)),
                (Arm("warm-topk-0.25+prune", policy="topk", keep=0.25, warm=True, prune=0.5), (b,)),
            ]
        out += [
            (Arm(f"random-{KEEP}", policy="random", keep=KEEP), (b,)),
            (Arm(f"rank-{KEEP}", policy="rank", keep=KEEP), (b,)),
            (Arm(f"importance-{KEEP}", policy="importance", keep=KEEP), (b,)),
            (Arm("auto-epochs", policy="default", keep="auto", told=True), (b,)),
        ]
        if self.reducible:
            out.append((Arm(f"reducible-{KEEP}", policy="reducible", keep=KEEP), (b,)))
        out = [(replace(arm, score_mode=self.score_mode), batches) for arm, batches in out]
        return out if every else [(arm, batches) for arm, batches in out if arm.name not in self.skip]

    def plan(self, domain: Any, smoke: bool) -> list[tuple[Arm, tuple[int, ...]]]:
        """Every (arm at a batch and LR, its epochs); smoke: two LRs (the recipe's among them), epochs 1 and 2, the
        smallest plain batch and the user's."""
        recipe = self.recipe(domain)
        base = round(recipe["lr"], 6)
        lrs = tuple(round(base * m, 6) for m in self.lr_multipliers)
        if smoke:
            lrs = (base, *[lr for lr in lrs if lr != base][:1])
        out = []
        for arm, batches in self.families(batch=recipe["batch"]):
            plain = arm.policy is None and arm.prune is None  # trains whole batches: the frontier's own family
            epochs = self.plain_epochs if plain else self.sb_epochs
            mine = lrs
            if not smoke and (plain or arm.name in self.wider_families):
                mine = lrs + tuple(round(base * m, 6) for m in self.wider)
            if not smoke and plain:
                mine += tuple(round(base * m, 6) for m in self.plain_wider)
            if arm.name in self.narrow_families:
                mine = (base,)
            if smoke:
                small = (min(self.plain_batches), recipe["batch"])
                epochs, batches = (1, 2), tuple(b for b in batches if b in small)
            out += [(replace(arm, batch=b, lr=lr), epochs) for b in batches for lr in mine]
        return out


SUITES = {s.name: s for s in (
    # The MNIST-1D and LM suites were recorded when sbdata scored in eval mode by default: score_mode="eval" keeps
    # their runs and timings what the records hold (the LM and the MLP have no running statistics: the same pass).
    # MNIST-1D (synthetic). The best LR sat at the first grid's top (2x) on every suite: widened for plain and the best
    # selection configurations until it sat below the top (the ConvNets to 32x, from scratch 64x; the MLP to 32x).
    Suite("continued", "mnist1d", "cnn", 6, (1, 2, 3, 4, 6), (1, 2, 3, 4, 6, 8, 12), {"continued": True},
          continued=True, wider=(4.0, 8.0, 16.0, 32.0), sampler=True, score_mode="eval",
          wider_families=("topk-0.25", "topk-0.5", "warm-topk-0.5", f"random-{KEEP}", "warm-sampler-topk-0.25")),
    Suite("scratch-cnn", "mnist1d", "cnn", 8, (1, 2, 3, 4, 6, 8), (2, 3, 4, 6, 8, 12),
          wider=(4.0, 8.0, 16.0, 32.0, 64.0), sampler=True, score_mode="eval",
          wider_families=("topk-0.25", "topk-0.5", f"random-{KEEP}", "sampler-topk-0.25")),
    Suite("scratch-noisy", "mnist1d", "cnn", 8, (1, 2, 3, 4, 6, 8), (2, 3, 4, 6, 8, 12), {"noise": 0.2},
          wider=(4.0, 8.0, 16.0, 32.0), sampler=True, score_mode="eval",
          wider_families=("topk-0.25", "topk-0.5", f"random-{KEEP}", "sampler-topk-0.25")),
    Suite("scratch-mlp", "mnist1d", "mlp", 16, (2, 4, 6, 8, 12, 16), (2, 4, 6, 8, 12, 16, 24),
          lr_multipliers=(1 / 3, 1.0, 2.0, 4.0, 8.0), wider=(16.0, 32.0), sampler=True, score_mode="eval",
          wider_families=("topk-0.25", "topk-0.5", f"random-{KEEP}", "sampler-topk-0.25")),
    # the compute-bound suite: the ConvNet at width 64, where a step on the kept 64 samples costs about a third of one
    # on 256; one LR grid for every family, spanning the ConvNet suites' best LRs; pre-registered 0.7x, seeds 0.85
    Suite("scratch-wide", "mnist1d", "cnn64", 8, (1, 2, 4, 6, 8), (2, 4, 6, 8, 12),
          lr_multipliers=(1.0, 4.0, 8.0, 16.0, 32.0), fresh_batches=(), bf16=True, sampler=True, score_mode="eval",
          skip=(f"rank-{KEEP}", f"importance-{KEEP}"), target=0.7, seed_target=0.85),
    # the byte-level LM pretrained on the standard library's code, continued on code and its docs; plain's batch grid
    # down to 4 (its best sat at 8), then plain alone at 8x (the 1x budget's frontier sat at 4x)
    Suite("continued-lm", "stdlib_bytes", "bytelm", 4, (1, 2, 3, 4), (1, 2, 3, 4), {"continued": True},
          continued=True, lr_multipliers=(0.5, 1.0, 2.0), plain_batches=(4, 8, 16, 32), fresh_batches=(),
          score_mode="eval", wider=(4.0, 0.25), plain_wider=(8.0,), reducible=True,
          wider_families=("topk-0.25", "topk-0.5", "warm-topk-0.5", f"random-{KEEP}"),
          narrow_families=(f"rank-{KEEP}", f"importance-{KEEP}", "warm-prune", "auto-epochs"),
          skip=("warm-topk-0.25+prune",)),
    # Fashion-MNIST (real images): 40,000 training images (the full grid about 3 hours on 2 CPU cores), the full test
    # set; a channels-last CNN whose step on 64 samples costs about a quarter of one on 256; pre-registered: the best
    # selection family at most 0.8x the frontier's seconds at one budget, every seed at most 0.9
    Suite("fashion-cnn", "fashion_mnist", "cnn", 8, (1, 2, 4, 6, 8), (2, 4, 6, 8, 12), {"samples": 40_000},
          lr_multipliers=(1.0, 2.0, 4.0, 8.0), fresh_batches=(), bf16=True, sampler=True,
          skip=(f"rank-{KEEP}", f"importance-{KEEP}"), narrow_families=()),
)}  # fmt: skip
