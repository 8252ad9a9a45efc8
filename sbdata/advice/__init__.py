"""``advise``: what selection and a smaller batch can do on the user's run: priced as a range from a few measured
steps of the user's own model, and, with the user's optimizer, measured on a branch trial of every option."""

from sbdata.advice._advise import Advice, advise
from sbdata.advice._branch import Curve, measured_speedup

__all__ = [
    "Advice",
    "Curve",
    "advise",
    "measured_speedup",
]
