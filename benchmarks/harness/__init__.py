"""The benchmarks' shared harness: what two benchmarks share lives here, and no benchmark imports another.

- ``data``: MNIST-1D (cached splits, label noise, seeded batches); ``lm``: the byte corpus and its model;
- ``models``: the MNIST-1D model families and their recipes;
- ``arms``: the arm of the MNIST-1D benchmarks and its probe; ``lm_arms``: the language-model arms;
- ``train``: the one training run (MNIST-1D); ``lm_train``: a language-model run; ``lm_suite``: the language-model
  suite shared by the ``lm`` and ``auto`` benchmarks;
- ``runs``: the one run loop (jobs interleaved, appended to ``runs.jsonl``, resumable, split among workers);
- ``timing``: the one interleaved timing loop, the allocator pinning and the CPU clock;
- ``cost``: the one cost model (pricing from step timings; the calibrated model; sbdata's ``CostTable``);
- ``suites``: the MNIST-1D suites (data, arms, budgets); ``stats``: budget curves, reach, equal cost, paired gaps;
- ``records``: ``runs.jsonl`` / ``machine.json`` / ``summary.json`` / ``table.md`` writers and readers;
- ``plots``: the suites' plots;
- ``pruned``: a PruningSampler's epochs as batches, and their probe (pruning, continued);
- ``_sb``: every name taken from sbdata (one place to follow sbdata's moves).
"""
