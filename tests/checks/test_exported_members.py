"""Each folder's surface, as httpx's ``test_exported_members``: ``__all__`` names exactly these, each importable.

A change to a surface is a change to this file, on purpose. ``sbdata``'s own ``__all__`` is the user's API; a
folder's is what the other layers (and, for public folders, users) may import from it (see docs/design.md).
"""

import importlib

import pytest

EXPORTED = {
    "sbdata": [
        "Advice",
        "Auto",
        "CostTable",
        "EngineOptions",
        "HistoryPercentile",
        "ImportanceDraw",
        "KeptColumn",
        "LossCache",
        "LossFn",
        "PolicyArg",
        "PolicyOptions",
        "PruningSampler",
        "RandomK",
        "RankWeighted",
        "ReducibleSelect",
        "SBCollator",
        "SBLoader",
        "SBStats",
        "Schedule",
        "ScoreContext",
        "Selection",
        "SelectionEngine",
        "SelectionPolicy",
        "TopK",
        "advise",
        "keep_count",
        "select_using_loss",
        "should_selective_backprop",
        "with_index",
    ],
    "sbdata.batch": [
        "HostCopy",
        "Indexer",
        "KeptColumn",
        "as_tensor",
        "batch_size",
        "concat",
        "decode",
        "default_split",
        "encode",
        "fields",
        "is_batch_field",
        "join_columns",
        "map_fields",
        "select",
        "take",
        "to_device",
        "upload",
    ],
    "sbdata.policies": [
        "FLOOR",
        "POLICIES",
        "HistoryPercentile",
        "ImportanceDraw",
        "PolicyOptions",
        "RandomK",
        "RankWeighted",
        "ReducibleSelect",
        "ScoreContext",
        "Selection",
        "SelectionPolicy",
        "TopK",
        "gumbel_top_k",
        "importance_log_weights",
        "keep_count",
        "rank_log_weights",
        "resolve_policy",
    ],
    "sbdata.scoring": ["SCORES", "SCORE_MODES", "Scorer", "dropout_seed", "per_sample_loss_fn"],
    "sbdata.cache": [
        "BUCKETS",
        "REFRESH",
        "UNITS",
        "CacheLookup",
        "IndexedDataset",
        "LossCache",
        "bucket_size",
        "with_index",
    ],
    "sbdata.distributed": [
        "SYNC_MODES",
        "Lockstep",
        "LockstepDriven",
        "gather_padded",
        "in_job",
        "joined_late",
        "lockstep_group",
        "make_lockstep",
        "merge_latest",
        "rank_and_world",
        "reduce_min",
        "reduce_sum",
        "scoring_module",
        "takes_cpu_tensors",
    ],
    "sbdata.auto": [
        "Auto",
        "CostTable",
        "Keep",
        "Progress",
        "Verdict",
        "best_keep",
        "effective_batch",
        "exposures",
        "fit_progress",
        "keep_grid",
        "pool_speedup",
        "progress",
        "score_share",
        "score_sums",
        "shortfall",
        "shrink_speedup",
        "small_batch_speedup",
        "speedup_range",
        "tau",
        "tau_from_sums",
        "trial_order",
        "verdict",
    ],
    "sbdata.engine": [
        "LAZY_STEPS",
        "EngineOptions",
        "ForwardFn",
        "IdKey",
        "KeepArg",
        "LossFn",
        "NanPolicy",
        "PolicyArg",
        "PolicyName",
        "ReduceFn",
        "SBStats",
        "Schedule",
        "ScoreMode",
        "ScoreName",
        "SelectionEngine",
        "SplitFn",
        "SyncMode",
        "should_selective_backprop",
    ],
    "sbdata._front": [
        "EngineFront",
        "ReadAheadGuard",
        "SamplerOrder",
        "SelectedDataset",
        "check_not_in_worker",
        "check_not_rebuilt",
        "check_thread",
        "pooled_batches_per_epoch",
        "reader_frame",
        "warn_if_other_rank",
        "warn_if_unsharded",
    ],
    "sbdata.advice": ["Advice", "Curve", "advise", "measured_speedup"],
    "sbdata.pruning": ["PruningSampler", "below_percentile", "infobatch", "random_like_infobatch", "top_losses"],
    "sbdata.tasks": ["causal_lm", "logits_of", "pad_right", "sequence_classification", "token_classification"],
    "sbdata.loader": ["SBLoader"],
    "sbdata.collate": ["SBCollator"],
    "sbdata.nodes": ["SBSelector"],
    "sbdata.wds": ["SelectStage", "sb_select"],
    "sbdata.functional": ["select_using_loss", "should_selective_backprop"],
    "sbdata.integrations.accelerate": ["load_sb_state", "save_sb_state", "wrap"],
    "sbdata.integrations.lightning": [
        "LightningSBLoader",
        "SBDataModule",
        "SBStatsLogger",
        "sb_train_dataloader",
        "trainer_schedule",
    ],
    "sbdata.integrations.transformers": ["SBStatsCallback", "SBTrainer", "trainer_schedule"],
}


@pytest.mark.parametrize("module", sorted(EXPORTED))
def test_exported_members(module):
    imported = importlib.import_module(module)
    assert imported.__all__ == EXPORTED[module]
    for name in imported.__all__:
        assert getattr(imported, name) is not None, f"{module}.{name}"


def test_every_folder_has_its_surface_listed():
    from pathlib import Path

    root = Path(importlib.import_module("sbdata").__file__).parent
    folders = {f"sbdata.{p.parent.name}" for p in root.glob("*/__init__.py")} - {"sbdata.integrations"}
    assert folders <= set(EXPORTED), folders - set(EXPORTED)


def test_the_user_api_is_sorted_and_names_no_private_object():
    import sbdata

    assert sbdata.__all__ == sorted(sbdata.__all__)
    for name in sbdata.__all__:
        assert not getattr(sbdata, name).__module__.startswith("sbdata._front"), name
