"""The scoring pass: per-sample scores of the live model with no side effects (modes, RNG and BatchNorm statistics
restored), by loss or by the norm of the loss's gradient with respect to the outputs; and two score vectors of one
batch compared (``compare``: the agreement of the kept sets), which sbdata's self-checks use.

Not user API: this surface serves the layers above it and the benchmarks (a user imports what they need of it from
``sbdata``). Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.scoring import _gradnorm, _scorer, _two_ways
from sbdata.scoring._gradnorm import *
from sbdata.scoring._scorer import *
from sbdata.scoring._two_ways import *

__all__ = _gradnorm.__all__ + _scorer.__all__ + _two_ways.__all__
