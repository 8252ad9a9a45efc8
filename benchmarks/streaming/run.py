"""Streaming benchmark: sb_select in a WebDataset pipeline over >= 1,000,000 samples read from tar shards.

Measures the pipeline alone, with ``sb_select`` (its memory sampled as it streams), ``sb_select`` alone on captured
batches replayed from memory (a parameter-free model and a small MLP), and the MLP's scoring forward alone; medians
over repeats. Commands and the record: ``benchmarks/streaming/README.md``.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import pickle
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import webdataset as wds
from torch import nn

from benchmarks.harness import _sb
from benchmarks.harness.plots import pyplot
from benchmarks.harness.records import results_dir

sb_select = _sb.sb_select()  # this benchmark needs WebDataset anyway

FEATURES, CLASSES, RECORD = 40, 10, 256


def memory() -> dict[str, float]:
    """Current and peak resident set size of this process, in MiB (from /proc, else getrusage's peak)."""
    try:
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        return {"rss_mib": int(status["VmRSS"].split()[0]) / 1024, "peak_mib": int(status["VmHWM"].split()[0]) / 1024}
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"rss_mib": float("nan"), "peak_mib": peak}


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def write_shards(root: Path, samples: int, shards: int) -> list[str]:
    rng = np.random.default_rng(0)
    records = -(-samples // RECORD)
    with wds.ShardWriter(str(root / "bench-%06d.tar"), maxcount=-(-records // shards), verbose=0) as sink:
        for r in range(records):
            ids = np.arange(r * RECORD, min((r + 1) * RECORD, samples))
            sink.write(
                {
                    "__key__": f"record-{r:07d}",
                    "x.npy": npy_bytes(rng.standard_normal((len(ids), FEATURES), dtype=np.float32)),
                    "y.npy": npy_bytes(rng.integers(0, CLASSES, len(ids))),
                    "keys.npy": npy_bytes(np.array([f"s{i:09d}" for i in ids])),
                }
            )
    return sorted(str(path) for path in root.glob("bench-*.tar"))


def decode(record: dict) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Only ``.npy`` members, read without pickle."""
    load = lambda name: np.lib.format.read_array(io.BytesIO(record[name]), allow_pickle=False)  # noqa: E731
    return load("x.npy"), load("y.npy"), load("keys.npy").tolist()


def pipeline(urls: list[str], args: argparse.Namespace):
    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(decode)
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=args.workers)
    return loader.unbatched().shuffle(args.shuffle, initial=args.shuffle).batched(args.batch_size)


class FirstColumns(nn.Module):
    """The trivially cheap model: logits are the first 10 input columns (no parameters, no arithmetic)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :CLASSES]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def timed_pass(batches: Iterator, limit: int | None = None, probe=None, stage=None) -> tuple[float, int]:
    """Seconds and samples streamed for one pass (counted by ``stage`` when given: its input, not its output);
    ``probe(samples)`` is called every 64 batches."""
    yielded = 0
    started = time.perf_counter()
    for count, (_x, _y, keys) in enumerate(itertools.islice(batches, limit)):
        yielded += len(keys)
        if probe is not None and count % 64 == 0:
            probe(stage.engine.stats.samples_seen if stage is not None else yielded)
    seconds = time.perf_counter() - started
    return seconds, stage.engine.stats.samples_seen if stage is not None else yielded


def rate(runs: list[tuple[float, int]]) -> dict[str, float]:
    rates = [samples / seconds for seconds, samples in runs]
    return {"samples_per_s": statistics.median(rates), "min": min(rates), "max": max(rates), "repeats": len(rates)}


def main(argv: list[str] | None = None) -> int:
    """Run the streaming benchmark (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks streaming", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes, seconds: for tests.")
    parser.add_argument("--samples", type=int, default=None, help="Samples per pass. Default 1,000,000 (smoke 4096).")
    parser.add_argument("--repeats", type=int, default=None, help="Timed passes per measurement. Default 3 (smoke 1).")
    parser.add_argument("--workers", type=int, default=2, help="WebLoader workers. Default 2.")
    parser.add_argument("--shards", type=int, default=8, help="Shards to write. Default 8.")
    parser.add_argument("--batch-size", type=int, default=256, help="Batch size into the stage. Default 256.")
    parser.add_argument("--shuffle", type=int, default=1000, help="Shuffle buffer, samples. Default 1000.")
    parser.add_argument("--keep", type=float, default=0.5, help="sb_select keep. Default 0.5.")
    parser.add_argument(
        "--out",
        type=Path,
        default=results_dir("streaming"),
        help="Results folder. Default benchmarks/results/streaming.",
    )
    parser.add_argument("--suite", default=None, help="The suite's folder inside --out. Default main (smoke: smoke).")
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=None, help="Write a PNG plot.")
    args = parser.parse_args(argv)
    samples = args.samples or (4096 if args.smoke else 1_000_000)
    repeats = args.repeats or (1 if args.smoke else 3)
    out = args.out / (args.suite or ("smoke" if args.smoke else "main")) / "summary.json"
    plot = (not args.smoke) if args.plot is None else args.plot
    torch.set_num_threads(1)
    result: dict = {
        "command": " ".join(["python -m benchmarks streaming", *(sys.argv[1:] if argv is None else argv)]),
        "config": {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "samples": samples},
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
    }

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        urls = write_shards(Path(tmp), samples, args.shards)
        result["shards"] = {"files": len(urls), "bytes": sum(Path(u).stat().st_size for u in urls)}
        result["shards"]["write_seconds"] = time.perf_counter() - started
        warmup = max(4, 20_000 // args.batch_size) if not args.smoke else 2

        # 1. The pipeline alone.
        timed_pass(iter(pipeline(urls, args)), warmup)
        result["pipeline"] = rate([timed_pass(iter(pipeline(urls, args))) for _ in range(repeats)])

        # 2. The pipeline with the stage, memory sampled as it streams.
        timed_pass(iter(pipeline(urls, args).compose(sb_select(FirstColumns(), F.cross_entropy, keep=args.keep))))
        runs, trace = [], []
        for repeat in range(repeats):
            stage = sb_select(FirstColumns(), F.cross_entropy, keep=args.keep)
            state_bytes_start = len(pickle.dumps(stage.state_dict()))
            if repeat == 0:
                peak_was_reset = reset_peak()
                start = memory()

                def probe(n: int, stage=stage) -> None:
                    trace.append({"samples": n, **memory(), "stage_state_bytes": len(pickle.dumps(stage.state_dict()))})

            batches = iter(pipeline(urls, args).compose(stage))
            runs.append(timed_pass(batches, probe=probe if repeat == 0 else None, stage=stage))
            if repeat == 0:
                end = memory()
                stats = stage.stats
                result["memory"] = {
                    "process": "main (the stage's); loader workers are separate processes, not counted",
                    "peak_reset_at_start": peak_was_reset,
                    "start": start,
                    "end": end,
                    "rss_growth_mib": end["rss_mib"] - start["rss_mib"],
                    "trace": trace,
                    "stage_state_bytes": {"built": state_bytes_start, "end": len(pickle.dumps(stage.state_dict()))},
                    "stage_pending_at_end": stage.engine.held_samples,
                    "samples_seen": stats.samples_seen,
                    "samples_yielded": stats.samples_yielded,
                }
        result["pipeline_with_stage"] = rate(runs)

        # 3. The stage alone, over captured pipeline batches replayed from memory; 4. the forward alone.
        captured = [tuple(b) for b in itertools.islice(iter(pipeline(urls, args)), 64)]
        replay_batches = -(-samples // args.batch_size)

        def replay() -> Iterator:
            return (captured[i % len(captured)] for i in range(replay_batches))

        for label, model in (("stage_alone", FirstColumns()), ("stage_alone_mlp", mlp())):
            timed_pass(sb_select(model, F.cross_entropy, keep=args.keep)(replay()), warmup)
            stages = [sb_select(model, F.cross_entropy, keep=args.keep) for _ in range(repeats)]
            result[label] = rate([timed_pass(stage(replay()), stage=stage) for stage in stages])
        model = mlp().eval()
        forward_runs = []
        for _ in range(repeats + 1):  # the first is the warm-up
            started = time.perf_counter()
            with torch.no_grad():
                for batch in replay():
                    model(batch[0])
            forward_runs.append((time.perf_counter() - started, replay_batches * args.batch_size))
        result["scoring_forward_mlp"] = rate(forward_runs[1:])
    result["stage_alone"]["model"] = "FirstColumns: parameter-free, logits = x[:, :10]"
    pipe, alone = result["pipeline"]["samples_per_s"], result["stage_alone"]["samples_per_s"]
    result["derived"] = {
        "stage_cost_as_share_of_pipeline_cost": pipe / alone,
        "predicted_pipeline_with_stage_samples_per_s": 1 / (1 / pipe + 1 / alone),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if plot:
        write_plot(result, out.parent / "streaming.png")
    summary = {k: round(v["samples_per_s"]) for k, v in result.items() if isinstance(v, dict) and "min" in v}
    mem = result["memory"]
    print(json.dumps({"samples_per_s": summary, "rss_mib": [mem["start"], mem["end"]], "json": str(out)}, indent=1))
    return 0


def write_plot(result: dict, path: Path) -> None:
    plt = pyplot()
    trace = result["memory"]["trace"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot([t["samples"] / 1e6 for t in trace], [t["rss_mib"] for t in trace], label="RSS")
    left.plot([t["samples"] / 1e6 for t in trace], [t["peak_mib"] for t in trace], "--", label="peak RSS")
    left.set(xlabel="samples streamed (millions)", ylabel="MiB (main process)", title="pipeline + sb_select memory")
    left.set_ylim(0, 1.2 * max(t["peak_mib"] for t in trace))
    left.legend(loc="lower right")
    names = ["pipeline", "pipeline_with_stage", "stage_alone", "stage_alone_mlp", "scoring_forward_mlp"]
    values = [result[n]["samples_per_s"] / 1e3 for n in names]
    right.barh(names, values)
    for y, value in enumerate(values):
        right.text(value, y, f" {value:,.0f}", va="center")
    right.set_xscale("log")
    right.set_xlim(1, 20 * max(values))
    right.set(xlabel="thousand samples/s (median, log scale)", title="throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
