"""Timing shared by the benchmarks: the one interleaved timing loop, a pinned allocator, one thread, a CPU clock.

:func:`interleaved` runs every timed block once per round, the order rotating from round to round (:func:`rotated`),
so that a load change on a shared machine hits every block alike; every timing benchmark times through it.
:func:`pin_allocator` fixes glibc's adaptive ``malloc`` thresholds at process start, which alone moved a small
model's forward by 10-20% with heap history (``benchmarks/throughput/README.md``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8
PINNED = {  # mallopt parameter -> value
    "M_MMAP_THRESHOLD": (M_MMAP_THRESHOLD, 32 * 1024 * 1024),  # glibc's largest: no mmap below 32 MiB
    "M_TRIM_THRESHOLD": (M_TRIM_THRESHOLD, 1024 * 1024 * 1024),  # never give freed heap back mid-run
    "M_TOP_PAD": (M_TOP_PAD, 64 * 1024 * 1024),  # grow the heap in large steps
    "M_ARENA_MAX": (M_ARENA_MAX, 1),  # one arena: torch's threads share one heap
}


def pin_allocator() -> dict[str, Any]:
    """Fix glibc's malloc thresholds (see the module docstring); returns what was set, for the results' record.

    A no-op (reported as such) where the C library is not glibc.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return {"pinned": False, "why": "no glibc mallopt"}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = {key: bool(mallopt(param, value)) for key, (param, value) in PINNED.items()}
    return {"pinned": all(done.values()), **{key: PINNED[key][1] for key, ok in done.items() if ok}}


def setup() -> dict[str, Any]:
    """What every timing benchmark does first: one torch thread, the allocator pinned."""
    torch.set_num_threads(1)
    return {"allocator": pin_allocator(), "torch_threads": 1}


def cpu_clock() -> float:
    """This thread's CPU seconds: time spent waiting for a core on a shared machine does not count (with torch on
    one thread, the thread's CPU time is all the work). Use on CPU only; on a GPU, time wall-clock after a sync."""
    return time.thread_time()


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """``items`` started at position ``turn`` (modulo its length) and wrapped around: one round's order."""
    turn %= len(items)
    return [*items[turn:], *items[:turn]]


def alternated(items: Sequence[T], turn: int) -> list[T]:
    """``items`` in order on even turns and reversed on odd ones (a two-arm comparison's ABBA order)."""
    return list(items) if turn % 2 == 0 else list(reversed(items))


def interleaved(
    blocks: dict[str, Callable[[int], Any]],
    rounds: int,
    *,
    warmup: int = 0,
    order: Callable[[Sequence[str], int], list[str]] = rotated,
    after_round: Callable[[int], None] | None = None,
) -> dict[str, list[Any]]:
    """The one interleaved timing loop: each round runs every block once, in ``order(names, round)``.

    Args:
        blocks: by name, a block of work called with the round's index (from 0, warm-up rounds included); what it
            returns (its measured seconds, typically) is collected.
        rounds: the measured rounds.
        warmup: rounds run first whose returns are dropped (the round index counts them).
        order: the round's order of the names; rotating by default.
        after_round: called with the round's index after every round (more work timed in the same rounds).

    Returns:
        By name, what its block returned in each measured round.
    """
    names = list(blocks)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        for name in order(names, r):
            value = blocks[name](r)
            if r >= warmup:
                out[name].append(value)
        if after_round is not None:
            after_round(r)
    return out


def sized_block(
    steps: Iterator[Any], block: dict[str, int], name: str, seconds_per_block: float, clock: Callable[[], float]
) -> Callable[[int], float]:
    """A block for :func:`interleaved`: ``block[name]`` steps of ``steps`` (one ``next`` each), returning the seconds
    per step by ``clock``; round 0 (the warm-up) resizes the block to about ``seconds_per_block``."""

    def run(round_: int) -> float:
        started = clock()
        for _ in range(block[name]):
            next(steps)
        per_step = (clock() - started) / block[name]
        if round_ == 0:
            block[name] = max(2, round(seconds_per_block / per_step))
        return per_step

    return run
