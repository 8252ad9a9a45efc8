"""Test-wide settings."""

import torch

# The tests run tiny tensors: one intra-op thread is fastest, and it keeps the suite's run time steady on a
# machine whose cores are shared (several OpenMP threads spin-waiting on busy cores make small ops ~10x slower).
torch.set_num_threads(1)
