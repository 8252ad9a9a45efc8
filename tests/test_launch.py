"""tests/launch.py, the tests' one launcher: results come back, and every way a process can fail is reported.

No verdict here depends on how fast anything runs: a planted hang sleeps for an hour, past any timeout.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests import launch
from tests.launch import launch_ranks, run_job


def sum_ranks(rank: int, *, offset: int) -> dict[str, Any]:
    total = torch.tensor([rank + offset])
    dist.all_reduce(total)
    return {"rank": rank, "world": dist.get_world_size(), "total": total, "threads": torch.get_num_threads()}


def fail_on_each_rank(rank: int) -> None:
    if rank == 0:
        raise ValueError("planted on rank 0")
    os._exit(3)  # no result, no clean-up: as a crash


def sleep_for_an_hour(rank: int) -> None:
    time.sleep(3600)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_every_rank_returns_its_record_and_the_keywords_travel():
    records = launch_ranks(sum_ranks, world=2, offset=10)
    assert [record["rank"] for record in records] == [0, 1]
    assert all(record["world"] == 2 and record["threads"] == 1 for record in records)
    assert all(torch.equal(record["total"], torch.tensor([21])) for record in records)  # 10 + 11, all-reduced


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_rank_that_raises_and_one_that_exits_without_a_result_are_both_reported():
    with pytest.raises(AssertionError) as failure:
        launch_ranks(fail_on_each_rank, world=2)
    message = str(failure.value)
    assert "launch_ranks(tests.test_launch:fail_on_each_rank, world=2) failed" in message
    assert "rank 0 raised:\nTraceback (most recent call last):" in message
    assert 'in fail_on_each_rank\n    raise ValueError("planted on rank 0")' in message
    assert "ValueError: planted on rank 0" in message
    assert "rank 1 exited with code 3 without a result" in message


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_hung_rank_dumps_its_tracebacks_and_is_reported():
    with pytest.raises(AssertionError) as failure:
        launch_ranks(sleep_for_an_hour, world=1, timeout=1)  # the watchdog fires in the rank, wherever it is
    message = str(failure.value)
    # the exit code is the watchdog's 1, or a signal's when it fires inside torch's import; and where the rank
    # was decides how long the dump is, so the launcher's own line says it hung (the dump's head may be cut)
    assert re.search(r"rank 0 exited with code -?\d+ without a result: a hang, its watchdog fired", message)
    assert 'File "' in message.split("--- output of rank 0 (tail) ---")[1]  # the dump's frames follow


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_job_that_outlives_its_watchdog_is_killed_with_its_group(monkeypatch):
    monkeypatch.setattr(launch, "GRACE", 1)
    sleeper = "print('started', flush=True); import time; time.sleep(3600)"  # arms no watchdog: only a kill ends it
    killed = r"still running after 1 s: a hang; killed with its process group:\nstarted"
    with pytest.raises(AssertionError, match=killed):
        run_job(["-c", sleeper], timeout=1)


@pytest.mark.multiprocess
def test_a_failing_job_is_reported_with_its_exit_code_and_output():
    with pytest.raises(AssertionError, match=r"failed with exit code 4:\nsaid this\n"):
        run_job(["-c", "import sys; print('said this'); sys.exit(4)"])
    assert run_job(["-c", "import sys; print(sys.argv[1:])", "a", "b"]) == "['a', 'b']\n"


@pytest.mark.multiprocess
def test_only_a_module_level_function_can_be_launched():
    def local(rank: int) -> int:
        return rank

    for target in (lambda rank: rank, local):
        with pytest.raises(ValueError, match="module-level function"):
            launch_ranks(target)
    assert launch.importable_name(sum_ranks) == "tests.test_launch:sum_ranks"
    assert launch.resolve("tests.test_launch:sum_ranks") is sum_ranks
