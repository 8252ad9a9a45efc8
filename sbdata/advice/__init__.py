"""``advise``: the gain estimate on a few measured steps of the user's own model, before training."""

from sbdata.advice._advise import Advice, advise

__all__ = [
    "Advice",
    "advise",
]
