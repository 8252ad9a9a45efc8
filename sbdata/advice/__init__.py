"""``advise``: what selection and a smaller batch can do on the user's run: priced as a range from a few measured
steps of the user's own model, and, with the user's optimizer, measured on a branch trial of every option. Its
settings come in three groups: :class:`Training` (how the copies train), :class:`Candidates` (which options) and
:class:`Measurement` (how it measures)."""

from sbdata.advice._advise import Advice, advise
from sbdata.advice._branch import Curve, measured_speedup
from sbdata.advice._settings import Candidates, Measurement, Training

__all__ = [
    "Advice",
    "Candidates",
    "Curve",
    "Measurement",
    "Training",
    "advise",
    "measured_speedup",
]
