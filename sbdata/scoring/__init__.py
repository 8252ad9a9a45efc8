"""The scoring pass: per-sample scores of the live model with no side effects (modes, RNG and BatchNorm statistics
restored), by loss or by the norm of the loss's gradient with respect to the outputs.
"""

from sbdata.scoring._gradnorm import SCORES
from sbdata.scoring._scorer import SCORE_MODES, Scorer, dropout_seed, per_sample_loss_fn

__all__ = [
    "SCORES",
    "SCORE_MODES",
    "Scorer",
    "dropout_seed",
    "per_sample_loss_fn",
]
