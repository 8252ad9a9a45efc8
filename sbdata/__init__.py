"""sbdata: Selective Backprop as a data-pipeline component.

Wrap a loader so that it yields only the samples that still teach the model something::

    loader = SBLoader(train_loader, model, F.cross_entropy, keep=0.5)

The torchdata stage lives in ``sbdata.nodes`` and the WebDataset stage in ``sbdata.wds``; importing ``sbdata``
imports neither library.
"""

from .cache import LossCache, with_index
from .collate import SBCollator
from .engine import SelectionEngine
from .functional import select_using_loss, should_selective_backprop
from .history import LossHistory
from .loader import SBLoader
from .policies import RandomK, RankWeighted, Selection, SelectionPolicy, TopK, keep_count
from .pruning import PruningSampler
from .reducible import ReducibleLoss
from .schedule import Schedule
from .stats import SBStats

__version__ = "0.1.0"

__all__ = [
    "LossCache",
    "LossHistory",
    "PruningSampler",
    "RandomK",
    "RankWeighted",
    "ReducibleLoss",
    "SBCollator",
    "SBLoader",
    "SBStats",
    "Schedule",
    "Selection",
    "SelectionEngine",
    "SelectionPolicy",
    "TopK",
    "keep_count",
    "select_using_loss",
    "should_selective_backprop",
    "with_index",
]
