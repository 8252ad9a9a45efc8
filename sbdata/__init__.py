"""sbdata: Selective Backprop as a data-pipeline component.

Wrap a loader so that it yields only the samples that still teach the model something::

    loader = SBLoader(train_loader, model, F.cross_entropy, keep=0.5)

API: the names in ``__all__`` below, and the modules ``sbdata.nodes`` (the torchdata stage ``SBSelector``),
``sbdata.wds`` (the WebDataset stage ``sb_select`` / ``SelectStage``), ``sbdata.distributed`` (``Lockstep``, the
lockstep driver under ``torch.distributed``), ``sbdata.registry`` (``POLICIES``, the built-in policies by name),
``sbdata.gain`` (the gain estimate behind ``keep="auto"``: ``tau``, ``shrink_speedup``, ``pool_speedup``,
``best_keep``, as pure functions), ``sbdata.adapters`` (``causal_lm``, ``sequence_classification``,
``token_classification``: the hooks per task), ``sbdata.prune_rules`` (the ``PruningSampler``'s rules as pure
functions) and ``sbdata.integrations.lightning``, ``.accelerate`` and ``.transformers``. Importing ``sbdata`` imports
none of torchdata, webdataset, Lightning, Accelerate or Transformers.

Internal, and free to change: every module whose name starts with an underscore (``_step``: the SB step) and
``scoring``'s ``Scorer``; the other modules (``auto``, ``cache``, ``collate``, ``engine``, ``functional``, ``history``,
``importance``, ``loader``, ``policies``, ``pruning``, ``reducible``, ``schedule``, ``stats``) hold the public classes
re-exported here. See ``docs/design.md`` for the module map.
"""

from ._column import KeptColumn
from ._options import EngineOptions, LossFn, PolicyArg
from .advise import Advice, advise
from .auto import Auto
from .cache import LossCache, with_index
from .collate import SBCollator
from .engine import SelectionEngine
from .functional import select_using_loss, should_selective_backprop
from .gain import CostTable
from .history import LossHistory
from .importance import ImportanceSampling
from .loader import SBLoader
from .policies import RandomK, RankWeighted, Selection, SelectionPolicy, TopK, keep_count
from .policy_types import PolicyOptions, ScoreContext
from .pruning import PruningSampler
from .reducible import ReducibleLoss
from .schedule import Schedule
from .stats import SBStats

__version__ = "0.1.0"

__all__ = [
    "Advice",
    "Auto",
    "CostTable",
    "EngineOptions",
    "ImportanceSampling",
    "KeptColumn",
    "LossCache",
    "LossFn",
    "LossHistory",
    "PolicyArg",
    "PolicyOptions",
    "PruningSampler",
    "RandomK",
    "RankWeighted",
    "ReducibleLoss",
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
