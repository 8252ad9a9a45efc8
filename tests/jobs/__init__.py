"""Scripts the integration tests launch in fresh processes (torchrun, Lightning's DDP launcher), and the launcher."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent


def run_job(args: list[str], timeout: float = 600, nproc: int = 1, env: dict[str, str] | None = None) -> str:
    """Run ``python args`` (under ``torchrun --nproc_per_node=nproc`` when ``nproc > 1``) from the repository root.

    The job runs in its own process group, killed whole on a hang. Returns its output; raises AssertionError with
    the output on failure or timeout.
    """
    launcher = [sys.executable]
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "SBDATA_JOB_TIMEOUT": str(int(timeout)),  # each worker also exits on its own after this long
        **(env or {}),
    }
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: a stray worker cannot block the read
        process = subprocess.Popen(
            [*launcher, *args], cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        timed_out = False
        try:
            process.wait(timeout=timeout + 15)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGTERM)  # torchrun passes SIGTERM on to its workers
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.seek(0)
        output = log.read()
    if timed_out:
        raise AssertionError(f"job {args} hung for {timeout} s and was killed:\n{output[-4000:]}")
    if process.returncode != 0:
        raise AssertionError(f"job {args} failed with exit code {process.returncode}:\n{output[-4000:]}")
    return output


def arm_watchdog() -> None:
    """In a job: exit with every thread's traceback once ``SBDATA_JOB_TIMEOUT`` seconds have passed."""
    seconds = int(os.environ.get("SBDATA_JOB_TIMEOUT", "0"))
    if seconds > 0:
        faulthandler.dump_traceback_later(seconds, exit=True)
