"""``keep="auto"``: its settings (:class:`Auto`, the decoded :class:`Keep`), the trials that measure whether
selection pays on the user's run (:func:`trial_order`, :func:`fit_progress`, :func:`verdict`), and the gain estimate
that predicts it (the speed-ups over the one cost model, :class:`CostTable`, and its one step price,
:meth:`CostTable.sb_step`), all as pure functions. The controller that applies them lives in the engine
(``sbdata.engine``).

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.auto import _gain, _settings, _trials
from sbdata.auto._gain import *
from sbdata.auto._settings import *
from sbdata.auto._trials import *

__all__ = _gain.__all__ + _settings.__all__ + _trials.__all__
