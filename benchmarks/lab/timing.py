"""The one interleaved timing loop, a pinned allocator, one thread and a CPU clock.

:func:`interleaved` runs every timed block once per round, the order rotating from round to round, so that a load
change on a shared machine hits every block alike. :func:`pin_allocator` fixes glibc's adaptive ``malloc`` thresholds
at process start (heap history alone moved a small model's forward by 10-20%)."""

from __future__ import annotations

import ctypes
import ctypes.util
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")

PINNED = {  # mallopt parameter -> (its number, value)
    "M_MMAP_THRESHOLD": (-3, 32 * 1024 * 1024),  # glibc's largest: no mmap below 32 MiB
    "M_TRIM_THRESHOLD": (-1, 1024 * 1024 * 1024),  # never give freed heap back mid-run
    "M_TOP_PAD": (-2, 64 * 1024 * 1024),  # grow the heap in large steps
    "M_ARENA_MAX": (-8, 1),  # one arena: torch's threads share one heap
}


def pin_allocator() -> dict[str, Any]:
    """Fix glibc's malloc thresholds; returns what was set, for the record (a no-op, said so, without glibc)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return {"pinned": False, "why": "no glibc mallopt"}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = {key: bool(mallopt(param, value)) for key, (param, value) in PINNED.items()}
    return {"pinned": all(done.values()), **{key: PINNED[key][1] for key, ok in done.items() if ok}}


def setup() -> dict[str, Any]:
    """What every recipe does first: one torch thread, the allocator pinned; returns both for the record."""
    torch.set_num_threads(1)
    return {"allocator": pin_allocator(), "torch_threads": 1}


def cpu_clock() -> float:
    """This thread's CPU seconds: time spent waiting for a core on a shared machine does not count (with torch on one
    thread, the thread's CPU time is all the work). On a GPU, time wall-clock after a sync instead."""
    return time.thread_time()


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """``items`` started at position ``turn`` (modulo its length) and wrapped around: one round's order."""
    turn %= len(items)
    return [*items[turn:], *items[:turn]]


def interleaved(blocks: dict[str, Callable[[int], Any]], rounds: int, *, warmup: int = 0) -> dict[str, list[Any]]:
    """Each round runs every block once (called with the round's index, warm-up rounds counted), in an order that
    rotates from round to round; returns, by name, what each block returned in the measured rounds."""
    names = list(blocks)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        for name in rotated(names, r):
            value = blocks[name](r)
            if r >= warmup:
                out[name].append(value)
    return out


def sized_block(steps: Iterator[Any], size: dict[str, int], name: str, seconds: float,
                clock: Callable[[], float] = cpu_clock) -> Callable[[int], float]:  # fmt: skip
    """A block for :func:`interleaved`: ``size[name]`` steps of ``steps`` (one ``next`` each), returning the seconds
    per step by ``clock``; round 0 (the warm-up) resizes the block to about ``seconds``."""

    def run(round_: int) -> float:
        started = clock()
        for _ in range(size[name]):
            next(steps)
        per_step = (clock() - started) / size[name]
        if round_ == 0:
            size[name] = max(2, round(seconds / per_step))
        return per_step

    return run


def time_steppers(steppers: dict[str, Iterator[Any]], *, smoke: bool) -> dict[str, float]:
    """Median seconds per step of every stepper (each primed by one ``next`` outside the timing), interleaved: blocks
    of about 0.25 s, 12 rounds after a warm-up round (smoke: blocks of 2 steps, 2 rounds)."""
    for stepper in steppers.values():
        next(stepper)
    size = dict.fromkeys(steppers, 2 if smoke else 10)
    seconds = 0.0 if smoke else 0.25
    blocks = {name: sized_block(steppers[name], size, name, seconds) for name in steppers}
    times = interleaved(blocks, 2 if smoke else 12, warmup=1)
    return {name: statistics.median(values) for name, values in times.items()}
