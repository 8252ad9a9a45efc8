"""The benchmarks' shared harness: what two benchmarks share lives here, and no benchmark imports another.

- ``data``: MNIST-1D (cached splits, label noise, seeded batches, ``inputs_targets``); ``lm``: the byte corpus and
  its model; ``models``: the MNIST-1D model families, their recipes and test accuracy;
- ``arms``: the arm of the MNIST-1D benchmarks and its probe; ``lm_arms``: the language-model arms;
- ``train``: the one training step (``train_step``), plain fitting (``fit``), the step timings' endless steps and
  the MNIST-1D run; ``lm_train``: a language-model run; ``lm_suite``: the language-model suite (``lm`` and ``auto``);
- ``runs``: the one run loop (jobs interleaved, appended to ``runs.jsonl``, resumable, split among workers), the one
  worker spawner and the command line every benchmark shares;
- ``timing``: the one interleaved timing loop, the allocator pinning and the CPU clock;
- ``cost``: the one cost model (sbdata's ``CostTable``, pricing from step timings, the calibrated model);
- ``suites``: the MNIST-1D suites (data, arms, budgets); ``stats``: budget curves, reach, equal cost, paired gaps;
- ``records``: ``runs.jsonl`` / ``machine.json`` / ``summary.json`` / ``table.md`` writers and readers;
- ``plots``: matplotlib on demand and the suites' plots; ``branch_trials``: ``advise``'s branch trial along a run;
- ``pruned``: a PruningSampler's epochs as batches, and their probe (pruning, continued);
- ``_sb``: every name taken from sbdata (one place to follow sbdata's moves).
"""
