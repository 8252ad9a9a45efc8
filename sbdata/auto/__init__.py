"""``keep="auto"``: its settings (:class:`Auto`, the decoded :class:`Keep`), the trials that measure whether
selection pays on the user's run (``_trials``: ``trial_order``, ``fit_progress``, ``verdict``), and the gain estimate
that predicts it (the speed-ups over the one cost model, :class:`CostTable`, and its one step price,
:meth:`CostTable.sb_step`), all as pure functions; and the one seam the engine routes ``keep=`` through
(:class:`FixedKeep`, or :class:`AutoController`, which applies them on the live run, timed by its meter).

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.auto import _control, _gain, _meter, _settings, _trials
from sbdata.auto._control import *
from sbdata.auto._gain import *
from sbdata.auto._meter import *
from sbdata.auto._settings import *
from sbdata.auto._trials import *

__all__ = _control.__all__ + _gain.__all__ + _meter.__all__ + _settings.__all__ + _trials.__all__
