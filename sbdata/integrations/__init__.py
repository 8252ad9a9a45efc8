"""Glue for the trainers most PyTorch users train with; each submodule imports its framework, this package none.

- ``sbdata.integrations.lightning``: ``SBDataModule`` / ``sb_train_dataloader`` and ``SBStatsLogger``.
- ``sbdata.integrations.transformers``: ``SBTrainer`` and ``SBStatsCallback``.
- ``sbdata.integrations.accelerate``: ``wrap`` (prepare, then wrap) and per-rank ``save_sb_state``/``load_sb_state``.
"""

__all__: list[str] = []
