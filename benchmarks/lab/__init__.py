"""The lab: what every recipe shares, and the contract every domain meets.

- ``domain``: the :class:`Domain` contract (data at a size and seed, model families, the user's recipe, the metric,
  how a batch is trained and scored), the :class:`Data` it returns and the :class:`Metric` it reports;
- ``arm``: one training configuration (plain, selection, the warm cache, the sampler, ``keep="auto"``) and the
  batches and hooks it builds on any domain;
- ``run``: the one training run (:func:`train_run`), the one-cycle LR, plain fitting and the timings' endless steps;
- ``loop``: the one run loop (jobs interleaved, appended to ``runs.jsonl``, resumable, split among workers) and the
  command line every recipe shares;
- ``timing``: the one interleaved timing loop, the pinned allocator and the CPU clock;
- ``price``: a run's priced seconds and the price table (each path beside its limit);
- ``read``: the frontier read at a budget (envelopes, interpolation, ratios per seed);
- ``records``: the one record writer and reader (``runs.jsonl``, ``machine.json``, ``summary.json``, ``table.md``)
  and the one table writer;
- ``_sb``: every name taken from sbdata.

The lab imports no domain and no recipe; domains import the lab; recipes import both (``tests/checks/test_layers.py``).
"""
