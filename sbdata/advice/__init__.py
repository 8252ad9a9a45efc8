"""``advise``: what selection and a smaller batch can do on the user's run: priced as a range from a few measured
steps of the user's own model, and, with the user's optimizer, measured on a branch trial of every option. Its
settings come in three groups: :class:`Training` (how the copies train), :class:`Candidates` (which options) and
:class:`Measurement` (how it measures).

User API (``advise`` and ``Advice`` are in ``sbdata`` too; its option groups are imported from here). Its ``__all__`` is
the sum of its private modules' ``__all__``.
"""

from sbdata.advice import _advise, _settings
from sbdata.advice._advise import *
from sbdata.advice._settings import *

__all__ = _advise.__all__ + _settings.__all__
