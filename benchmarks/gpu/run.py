"""GPU seconds per epoch, and the check that an SB step never synchronises: one command, under 8 minutes.

Four arms (baseline, small batch, fresh top-k, the cache with ``observe()``) train one epoch each in turn, each timed
wall-clock between two ``torch.cuda.synchronize()``; then every SB step of top-k, rank, random and the cached arm runs
under ``torch.cuda.set_sync_debug_mode("error")``. Commands: ``benchmarks/gpu/README.md``.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks.harness._sb import LossCache, SBLoader, keep_count
from benchmarks.harness.data import dataset
from benchmarks.harness.models import MODELS
from benchmarks.harness.records import machine, results_dir, write_results
from benchmarks.harness.runs import cli
from benchmarks.harness.timing import interleaved, setup
from benchmarks.harness.train import train_step

RESULTS = results_dir("gpu")
KEEP = 0.25


class DeviceBatches:
    """(x, y, ids) batches of the training set held on ``device``, in a fresh permutation per epoch; ids stay on
    the host, pinned (what the cache reads without a transfer back)."""

    def __init__(self, x, y, batch: int, device: torch.device, seed: int = 0) -> None:
        self.x, self.y, self.batch, self.device = x.to(device), y.to(device), batch, device
        self.generator = torch.Generator().manual_seed(seed)
        self.pin = device.type == "cuda"

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch)

    def __iter__(self):
        order = torch.randperm(len(self.y), generator=self.generator)
        if self.pin:
            order = order.pin_memory()
        on_device = order.to(self.device, non_blocking=True)
        for start in range(0, len(order), self.batch):
            index = on_device[start : start + self.batch]
            yield self.x[index], self.y[index], order[start : start + self.batch]


class Arm:
    """One arm's model, optimizer and batches, trained an epoch at a time."""

    def __init__(self, name: str, width: int, data, batch: int, device: torch.device) -> None:
        torch.manual_seed(0)
        self.name, self.model = name, MODELS["cnn"](width=width).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        size = keep_count(KEEP, batch) if name == "small-batch" else batch
        self.batches = DeviceBatches(data.x_train, data.y_train, size, device)
        self.observe = name == "sb-cache-observe"
        self.loader = self.batches
        if name.startswith("sb-"):
            cache = {"cache": LossCache(staleness=2, size=len(data.y_train)), "id_key": -1} if self.observe else {}
            self.loader = SBLoader(self.batches, self.model, F.cross_entropy, keep=KEEP, **cache)
        self.seconds: list[float] = []

    def epoch(self, device: torch.device) -> None:
        synchronize(device)
        started = time.perf_counter()
        for batch in self.loader:
            train_step(self.model, self.optimizer, batch, observe=self.loader.observe if self.observe else None)
        synchronize(device)
        self.seconds.append(time.perf_counter() - started)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_arms(width: int, batch: int, data, epochs: int, device: torch.device) -> dict:
    names = ["baseline", "small-batch", "sb-topk", "sb-cache-observe"]
    arms = {name: Arm(name, width, data, batch, device) for name in names}
    blocks = {name: (lambda _, arm=arm: arm.epoch(device)) for name, arm in arms.items()}
    interleaved(blocks, 1)  # warm-up (kernels, allocator); not counted
    for arm in arms.values():
        arm.seconds.clear()
    interleaved(blocks, epochs)  # each epoch appends its seconds to its arm's
    base = statistics.median(arms["baseline"].seconds)
    out = {}
    for name, arm in arms.items():
        stats = arm.loader.stats if isinstance(arm.loader, SBLoader) else None
        per_epoch = statistics.median(arm.seconds)
        out[name] = {
            "seconds_per_epoch": per_epoch,
            "min": min(arm.seconds),
            "max": max(arm.seconds),
            "x_baseline": per_epoch / base,
            "scored_share": None if stats is None else stats.samples_scored / max(1, stats.samples_seen),
        }
    return out


def sync_check(data, batch: int, device: torch.device) -> dict[str, str]:
    """Every SB step under ``set_sync_debug_mode("error")``: "ok", or the error a synchronising call raised."""
    if device.type != "cuda":
        return {"all": "skipped: no CUDA device (tests/checks/test_syncs.py counts would-be syncs on the CPU)"}
    configs = {
        "topk": {},
        "rank": {"policy": "rank"},
        "random": {"policy": "random"},
        "topk+dense cache+observe": {"cache": LossCache(staleness=1, size=len(data.y_train)), "id_key": -1},
        "topk+keyed cache+observe": {"cache": LossCache(staleness=1, capacity=len(data.y_train)), "id_key": -1},
    }
    found = {}
    for name, options in configs.items():
        torch.manual_seed(0)
        model = MODELS["cnn"]().to(device)
        loader = SBLoader(DeviceBatches(data.x_train, data.y_train, batch, device), model, F.cross_entropy,
                          keep=KEEP, **options)  # fmt: skip
        found[name] = "ok"
        try:
            for _ in range(2):
                outputs = iter(loader)
                for _ in range(len(loader.loader) - 1):
                    torch.cuda.set_sync_debug_mode("error")
                    out = next(outputs)
                    if "cache" in options:
                        with torch.no_grad():
                            loader.observe(out, F.cross_entropy(model(out[0]), out[1], reduction="none"))
                    torch.cuda.set_sync_debug_mode(0)
                list(outputs)
        except RuntimeError as error:
            found[name] = f"SYNC: {error}"
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return found


def table(results: dict) -> str:
    lines = [
        "| model | batch | arm | s / epoch (median [min, max]) | x baseline | scored share |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, arms in results["timing"].items():
        width, batch = key.split("/")
        for name, r in arms.items():
            share = "" if r["scored_share"] is None else f"{r['scored_share']:.2f}"
            lines.append(
                f"| ConvNet width {width} | {batch} | {name} | {r['seconds_per_epoch']:.3f} [{r['min']:.3f}, "
                f"{r['max']:.3f}] | {r['x_baseline']:.3f} | {share} |"
            )
    lines.append("\n| sync check (set_sync_debug_mode('error')) | result |\n| --- | --- |")
    lines += [f"| {name} | {verdict} |" for name, verdict in results["sync_check"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the gpu benchmark (see the module docstring); returns the exit status."""
    parser = cli("gpu", __doc__, out=RESULTS, smoke="2,000 samples, width 8, batch 64", suite=True)
    parser.add_argument("--samples", type=int, default=20_000, help="MNIST-1D samples, 80%% train (default 20000)")
    parser.add_argument("--epochs", type=int, default=6, help="timed epochs per arm (default 6)")
    parser.add_argument("--widths", type=int, nargs="*", default=[32, 256])
    parser.add_argument("--batches", type=int, nargs="*", default=[256, 1024])
    args = parser.parse_args(argv)
    if args.smoke:
        args.samples, args.epochs, args.widths, args.batches = 2000, 1, [8], [64]
    hygiene = setup()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = dataset(args.samples)
    started = time.perf_counter()
    results: dict = {"machine": machine(), "hygiene": hygiene, "device": str(device), "timing": {}}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
    for width in args.widths:
        for batch in args.batches:
            results["timing"][f"{width}/{batch}"] = time_arms(width, batch, data, args.epochs, device)
            print(f"width {width} batch {batch}: {time.perf_counter() - started:.0f} s", flush=True)
    results["sync_check"] = sync_check(data, args.batches[0], device)
    results["seconds"] = time.perf_counter() - started
    write_results(args.out / args.suite, results, table(results))
    return 0
