"""``advise``: what selection and a smaller batch can do, priced as a range from a few measured steps of the user's
own model."""

from sbdata.advice._advise import Advice, advise

__all__ = [
    "Advice",
    "advise",
]
