"""Test-wide settings."""

import os

import torch

# The tests run tiny tensors: one intra-op thread is fastest, and it keeps the suite's run time steady on a
# machine whose cores are shared (several OpenMP threads spin-waiting on busy cores make small ops ~10x slower).
torch.set_num_threads(1)
# The processes the tests start (examples, benchmarks, jobs) inherit one OpenMP thread for the same reason: an
# example run on the default two threads of a 2-core CI machine took twice the CPU time (tests/launch.py's ranks and
# jobs set it themselves). Nothing a test asserts depends on it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
