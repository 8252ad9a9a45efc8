"""The tests' one launcher of processes: a function on fresh gloo ranks, or a script (under torchrun for several).

``launch_ranks(target, world=2, **kwargs)`` runs ``target(rank, **kwargs)`` in ``world`` fresh processes joined in
a gloo group and returns what each rank returned; ``run_job(args, nproc=...)`` runs a Python script, under torchrun
when ``nproc > 1``, and returns its output. Both start each process in its own session with its output in a file,
kill the whole process group on a hang and raise one AssertionError naming every process that failed, with its
traceback and the tail of its output. The job scripts call ``arm_watchdog()``; the ranks arm it themselves.

Every timeout here is a hang guard, at 10x or more of a run on a loaded machine: it turns a hang into a failure
(with every thread's traceback) and is never a speed check. No verdict depends on how long anything took.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # seconds for one launch, a hang guard: the slowest (a group of scenarios) takes 5-60 s loaded
COLLECTIVE_TIMEOUT = 180  # seconds gloo waits in one collective before raising: a hang guard, far past any load
GRACE = 15  # seconds: past the children's own watchdog; for the others once one failed; from SIGTERM to SIGKILL
POLL = 0.1  # seconds between looks at the children
TAIL = 4000  # characters of a child's output in a failure message
WATCHDOG = "SBDATA_JOB_TIMEOUT"  # the environment variable arm_watchdog() reads


# ----------------------------------------------------------------------------------------------- the two launchers
def launch_ranks(target: Callable[..., Any], *, world: int = 2, timeout: float = TIMEOUT, **kwargs: Any) -> list[Any]:
    """Run ``target(rank, **kwargs)`` on ``world`` fresh processes in one gloo group; each rank's return value.

    Args:
        target: A module-level function of the tests, resolved by name in each rank (``python -m tests.launch``).
        world: How many ranks.
        timeout: Seconds the whole launch may take: a hang guard, never a speed check.
        **kwargs: Keyword arguments of ``target``, sent to the ranks with ``torch.save`` (plain data and tensors).

    Returns:
        What each rank's ``target`` returned (plain records, read back with ``torch.load(weights_only=True)``), by
        rank.

    Raises:
        ValueError: If ``target`` cannot be resolved by name in a fresh process.
        AssertionError: Naming every rank that raised (with its traceback), exited without a result (with its exit
            code) or still ran after ``timeout`` (killed with its process group), each with its output's tail.
    """
    name = importable_name(target)
    with tempfile.TemporaryDirectory(prefix="sbdata-ranks-") as folder:
        spec = {"target": name, "world": world, "port": free_port(), "kwargs": kwargs}
        _save(spec, Path(folder) / "spec.pt")
        commands = {f"rank {rank}": [sys.executable, "-m", "tests.launch", folder, str(rank)] for rank in range(world)}
        children, killed = _run(commands, Path(folder), timeout)
        outcomes = [_read_outcome(Path(folder), rank) for rank in range(world)]
        problems = [
            _problem(child, outcome, killed.get(child.name)) for child, outcome in zip(children, outcomes, strict=True)
        ]
    failures = [problem for problem in problems if problem]
    if failures:
        raise AssertionError(f"launch_ranks({name}, world={world}) failed:\n\n" + "\n\n".join(failures))
    return [outcome[1] for outcome in outcomes if outcome]


def run_job(args: list[str], *, timeout: float = TIMEOUT, nproc: int = 1, env: dict[str, str] | None = None) -> str:
    """Run ``python args`` from the repository root, under ``torchrun --nproc_per_node=nproc`` when ``nproc > 1``.

    Args:
        args: The script and its arguments (or any arguments of ``python``).
        timeout: Seconds the job may take: a hang guard, never a speed check. The job's ``arm_watchdog()`` dumps
            its tracebacks after this long; the launcher kills its process group ``GRACE`` seconds later.
        nproc: Processes per node, under torchrun when more than one.
        env: Environment variables on top of the launcher's.

    Returns:
        The job's output, stdout and stderr together.

    Raises:
        AssertionError: With the output's tail, if the job exits with an error or hangs.
    """
    launcher = [sys.executable]
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    name = f"job {args}"
    with tempfile.TemporaryDirectory(prefix="sbdata-job-") as folder:
        (child,), killed = _run({name: [*launcher, *args]}, Path(folder), timeout, env)
        output = child.output()
    if name in killed:
        raise AssertionError(f"{name} {killed[name]}; killed with its process group:\n{output[-TAIL:]}")
    if child.process.returncode != 0:
        raise AssertionError(f"{name} failed with exit code {child.process.returncode}:\n{output[-TAIL:]}")
    return output


def arm_watchdog() -> None:
    """In a launched process: exit with every thread's traceback once ``SBDATA_JOB_TIMEOUT`` seconds have passed."""
    seconds = int(os.environ.get(WATCHDOG, "0"))
    if seconds > 0:
        faulthandler.dump_traceback_later(seconds, exit=True)


# ----------------------------------------------------------------------------------------------- small parts
def free_port() -> int:
    """A TCP port on localhost that was free a moment ago (rank 0 binds it for the group's store)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def importable_name(target: Callable[..., Any]) -> str:
    """``"module:qualname"`` of a module-level function, which a fresh process resolves to the same function.

    Raises:
        ValueError: For a lambda, a local function or one defined in ``__main__``.
    """
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        raise ValueError(f"launch_ranks needs a module-level function of an importable module, got {target!r}")
    name = f"{module}:{qualname}"
    if resolve(name) is not target:
        raise ValueError(f"launch_ranks: {name} does not name {target!r}")
    return name


def resolve(name: str) -> Any:
    """The object that ``"module:qualname"`` names, importing the module."""
    module, _, qualname = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


@dataclass
class _Child:
    """One launched process: its name in messages, the process (its own session leader) and its output file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal_group(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
            os.killpg(self.process.pid, number)  # the session's group: the process and everything it started


def _environment(timeout: float, extra: dict[str, str] | None) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # this checkout's sbdata and tests
        "OMP_NUM_THREADS": "1",
        WATCHDOG: str(max(1, int(timeout))),  # each process dumps its tracebacks and exits after this long
        **(extra or {}),
    }


def _run(
    commands: dict[str, list[str]], folder: Path, timeout: float, env: dict[str, str] | None = None
) -> tuple[list[_Child], dict[str, str]]:
    """Start the commands, each in its own session, and wait for them all; the children and, by name, why each
    killed one was killed. Whatever they leave running (stray grandchildren, or all of it on an interrupt) is
    killed before this returns."""
    environment = _environment(timeout, env)
    children: list[_Child] = []
    try:
        for number, (name, command) in enumerate(commands.items()):
            log = folder / f"output-{number}.log"
            with log.open("wb") as sink:  # a file, not a pipe: a stray grandchild cannot block the read
                process = subprocess.Popen(
                    command, cwd=ROOT, env=environment, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
                )
            children.append(_Child(name, process, log))
        return children, _wait(children, timeout)
    finally:
        _kill([child for child in children if child.process.poll() is None])
        for child in children:
            child.signal_group(signal.SIGKILL)


def _wait(children: list[_Child], timeout: float) -> dict[str, str]:
    """Wait until every child has exited; kill those still running ``GRACE`` seconds past ``timeout`` (their own
    watchdog dumps their tracebacks at ``timeout``), or ``GRACE`` seconds after another one failed (a rank whose
    peer died may wait on it in a collective). Returns, by name, why each killed child was killed."""
    deadline = time.monotonic() + timeout + GRACE
    reason = f"still running after {timeout:g} s: a hang"
    peer_failed = False
    while True:
        running = [child for child in children if child.process.poll() is None]
        if not running:
            return {}
        failed = [child.name for child in children if child.process.returncode not in (None, 0)]
        if failed and not peer_failed:
            peer_failed = True
            deadline = min(deadline, time.monotonic() + GRACE)
            reason = f"still running {GRACE} s after {', '.join(failed)} failed"
        if time.monotonic() > deadline:
            break
        time.sleep(POLL)
    _kill(running)
    return {child.name: reason for child in running}


def _kill(children: list[_Child]) -> None:
    """End each child's process group: SIGTERM (torchrun passes it on to its workers), SIGKILL after GRACE."""
    for child in children:
        child.signal_group(signal.SIGTERM)
    end = time.monotonic() + GRACE
    for child in children:
        try:
            child.process.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.signal_group(signal.SIGKILL)
            child.process.wait()


def _problem(child: _Child, outcome: tuple[str, Any] | None, killed: str | None) -> str:
    """What went wrong with one rank, with its output's tail; empty if nothing did."""
    code = child.process.returncode
    if killed:
        what = f"{child.name} {killed}; killed with its process group"
    elif outcome is None:
        what = f"{child.name} exited with code {code} without a result"
        if re.search(r"^Timeout \(\d+:\d\d:\d\d\)!$", child.output(), re.MULTILINE):  # faulthandler's header
            what += ": a hang, its watchdog fired (every thread's traceback below)"
    elif outcome[0] == "error":
        what = f"{child.name} raised:\n{outcome[1]}"
    elif code != 0:
        what = f"{child.name} returned, then exited with code {code}"
    else:
        return ""
    return f"{what}\n--- output of {child.name} (tail) ---\n{child.output()[-TAIL:] or '(none)'}"


def _read_outcome(folder: Path, rank: int) -> tuple[str, Any] | None:
    path = folder / f"rank{rank}.result"
    return _load(path) if path.exists() else None


def _write_outcome(folder: Path, rank: int, outcome: tuple[str, Any]) -> None:
    partial = folder / f"rank{rank}.partial"
    _save(outcome, partial)
    partial.replace(folder / f"rank{rank}.result")  # whole or absent: a rank killed mid-write left no result


def _save(obj: Any, path: Path) -> None:
    import torch

    torch.save(obj, path)


def _load(path: Path) -> Any:
    """What :func:`_save` wrote, read as every checkpoint here is: ``weights_only=True`` (no arbitrary unpickling)."""
    import torch

    return torch.load(path, weights_only=True)


# ----------------------------------------------------------------------------------------------- in a rank
def _rank_main(folder: Path, rank: int) -> int:
    """One rank of ``launch_ranks``: join the group, run the target, write its outcome; the exit code."""
    arm_watchdog()
    faulthandler.enable()  # a crash dumps the tracebacks too
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # as tests/conftest.py does in the test process
    spec = _load(folder / "spec.pt")
    code = 0
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{spec['port']}",
            rank=rank,
            world_size=spec["world"],
            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT),
        )
        _write_outcome(folder, rank, ("ok", resolve(spec["target"])(rank, **spec["kwargs"])))
    except BaseException:  # reported to the parent, which fails the test with it
        _write_outcome(folder, rank, ("error", traceback.format_exc()))
        code = 1
    finally:
        gc.collect()  # free DDP reducers while the group lives: torch 2.13 on CPU can abort at exit otherwise
        if dist.is_initialized():
            dist.destroy_process_group()
    return code


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.launch FOLDER RANK (launch_ranks runs this)")
    sys.exit(_rank_main(Path(sys.argv[1]), int(sys.argv[2])))
