"""Scripts the integration tests launch in fresh processes with ``tests.launch.run_job`` (torchrun, Lightning's
DDP launcher); each arms ``tests.launch.arm_watchdog`` first."""

from __future__ import annotations

from pathlib import Path

JOBS = Path(__file__).resolve().parent
