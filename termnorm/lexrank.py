"""The former name of :mod:`termnorm.gbm_ranker` (a gradient-boosted pair ranker, not the LexRank algorithm).

Kept only so that engines saved before the rename still load: a pickle names the module of each class it
holds (``termnorm.lexrank.LexicalRanker``). New code imports termnorm.gbm_ranker.
"""

import sys

from termnorm import gbm_ranker

sys.modules[__name__] = gbm_ranker
