"""sbdata: Selective Backprop as a data-pipeline component.

Wrap a loader so that it yields only the samples that still teach the model something::

    loader = SBLoader(train_loader, model, F.cross_entropy, keep=0.5)

API: the names in ``__all__`` below (every public class and function, importable from here), the front-end modules
``sbdata.nodes`` (the torchdata stage ``SBSelector``) and ``sbdata.wds`` (the WebDataset stage ``sb_select``), and
the surfaces (``__all__``) of the folders: ``sbdata.policies`` (the policy contract, the built-in policies, the
sampling helpers and ``POLICIES``), ``sbdata.auto`` (``Auto``, the trials and the gain estimate as pure functions),
``sbdata.distributed`` (``Lockstep`` and the collectives), ``sbdata.pruning`` (``PruningSampler`` and its rules),
``sbdata.tasks`` (``causal_lm``, ``sequence_classification``, ``token_classification``, ``pad_right``) and
``sbdata.integrations.lightning``, ``.accelerate`` and ``.transformers``. The lower layers' surfaces
(``sbdata.batch``, ``sbdata.scoring``, ``sbdata.cache``, ``sbdata.engine``) serve the layers above them; a module
whose name starts with an underscore is private to its folder. Importing ``sbdata`` imports none of torchdata,
webdataset, Lightning, Accelerate or Transformers. ``docs/design.md`` draws the tree and its layers.
"""

from sbdata.advice import Advice, advise
from sbdata.auto import Auto, CostTable
from sbdata.batch import KeptColumn
from sbdata.cache import LossCache, with_index
from sbdata.collate import SBCollator
from sbdata.engine import EngineOptions, LossFn, PolicyArg, SBStats, Schedule, SelectionEngine
from sbdata.functional import select_using_loss, should_selective_backprop
from sbdata.loader import SBLoader
from sbdata.policies import (
    HistoryPercentile,
    ImportanceDraw,
    PolicyOptions,
    RandomK,
    RankWeighted,
    ReducibleSelect,
    ScoreContext,
    Selection,
    SelectionPolicy,
    TopK,
    keep_count,
)
from sbdata.pruning import PruningSampler

__version__ = "0.1.0"

__all__ = [
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
]
