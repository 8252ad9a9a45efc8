"""The scoring pass: per-sample scores of the live model with no side effects (modes, RNG and BatchNorm statistics
restored), by loss or by the norm of the loss's gradient with respect to the outputs; and one batch scored two ways
(``score_two_ways``, ``compare``: the agreement of the kept sets), which sbdata's self-checks use.
"""

from sbdata.scoring._gradnorm import SCORES
from sbdata.scoring._scorer import SCORE_MODES, Scorer, dropout_seed, per_sample_loss_fn
from sbdata.scoring._two_ways import MODE_RATIO_LIMIT, TwoWays, compare, has_running_stats, score_two_ways

__all__ = [
    "MODE_RATIO_LIMIT",
    "SCORES",
    "SCORE_MODES",
    "Scorer",
    "TwoWays",
    "compare",
    "dropout_seed",
    "has_running_stats",
    "per_sample_loss_fn",
    "score_two_ways",
]
