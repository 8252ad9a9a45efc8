"""sbdata: Selective Backprop as a data-pipeline component.

Wrap a loader so that it yields only the samples that still teach the model something::

    loader = SBLoader(train_loader, model, F.cross_entropy, keep=0.5)

The user's API: the names in ``__all__`` below (a reviewed list; ``tests/checks/test_exported_members.py`` checks it
against what this module defines), and the surfaces of ``sbdata.policies`` (writing a policy), ``sbdata.advice``
(``advise``'s option groups), ``sbdata.pruning`` (the sampler's rules), ``sbdata.tasks`` (losses of language and
token tasks), ``sbdata.nodes`` (the torchdata stage), ``sbdata.wds`` (the WebDataset stage) and
``sbdata.integrations.lightning``, ``.accelerate`` and ``.transformers``. The other folders' surfaces (``batch``,
``scoring``, ``cache``, ``distributed``, ``auto``, ``engine``, ``_front``) serve the layers above them and the
benchmarks, not users: what a user needs of them is here. A module
whose name starts with an underscore is private to its folder. Importing ``sbdata`` imports none of torchdata,
webdataset, Lightning, Accelerate or Transformers. ``docs/design.md`` draws the tree and its layers.
"""

from sbdata.advice import Advice, advise
from sbdata.auto import Auto, CostTable
from sbdata.batch import KeptColumn
from sbdata.cache import LossCache, with_index
from sbdata.collate import SBCollator
from sbdata.engine import EngineOptions, SBStats, Schedule, SelectionEngine
from sbdata.functional import select_using_loss, should_selective_backprop
from sbdata.loader import SBLoader
from sbdata.policies import (
    HistoryPercentile,
    ImportanceDraw,
    RandomK,
    RankWeighted,
    ReducibleSelect,
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
    "PruningSampler",
    "RandomK",
    "RankWeighted",
    "ReducibleSelect",
    "SBCollator",
    "SBLoader",
    "SBStats",
    "Schedule",
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
