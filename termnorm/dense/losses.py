"""Training objectives sentence-transformers lacks (everything else is used from it).

Used from sentence-transformers as is:

* ``MultipleNegativesRankingLoss(directions=("query_to_doc", "doc_to_query"),
  partition_mode="per_direction")`` -- symmetric in-batch InfoNCE with extra
  hard-negative term columns (approach D, BI-HARDNCE; this is what
  ``MultipleNegativesSymmetricRankingLoss`` became in v6). Hard negative
  *queries* come from the batch composition (``mining.compose_batches``), false
  in-batch negatives are kept out by the same sampler.
* ``TripletLoss`` (Euclidean, margin 1) -- approach A's MTCG.

Written here:

* :class:`MultiLabelBatchHardSoftMarginTripletLoss` -- approach E's batch-hard
  soft-margin triplet loss when a text may belong to several concepts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from sentence_transformers.sentence_transformer.losses import BatchHardSoftMarginTripletLoss
from sentence_transformers.sentence_transformer.losses.batch_hard_triplet import BatchHardTripletLossDistanceFunction

PAD_LABEL = -1


def same_concept_mask(labels: Tensor) -> Tensor:
    """[B, B] bool: rows share at least one label. ``labels`` is [B] or [B, m] padded with -1."""
    if labels.dim() == 1:
        labels = labels.unsqueeze(1)
    eq = labels.unsqueeze(1).unsqueeze(3) == labels.unsqueeze(0).unsqueeze(2)  # [B, B, m, m]
    valid = (labels != PAD_LABEL)
    eq &= valid.unsqueeze(1).unsqueeze(3) & valid.unsqueeze(0).unsqueeze(2)
    return eq.flatten(2).any(-1)


class MultiLabelBatchHardSoftMarginTripletLoss(BatchHardSoftMarginTripletLoss):
    """Batch-hard soft-margin triplet loss over texts that may name several concepts.

    For each anchor in the batch take the hardest positive p (shares a concept,
    farthest) and the hardest negative n (shares none, nearest); loss
    ``ln(1 + exp(d(a,p) - d(a,n)))`` -- with cosine distance this is approach
    E's ``ln(1 + exp(S_an - S_ap))`` (Hermans et al. 2017; Sung et al.'s
    triplet vector space for concept normalisation).

    =====================================  ==================================
    texts (one column)                     labels
    =====================================  ==================================
    vocabulary names / synonyms            [term_id, -1, -1]
    coded mentions (may be multi-term)     [term_id_1, term_id_2, -1]
    =====================================  ==================================

    Relation: identical to sentence-transformers' ``BatchHardSoftMarginTripletLoss``
    for one label per text (1-D labels are passed through unchanged); the
    multi-label form keeps a mention coded with two terms from being pushed
    away from either term's names. Anchors without an in-batch positive get
    d(a,p) = 0, as in the parent class.

    Example::

        loss = MultiLabelBatchHardSoftMarginTripletLoss(encoder.model)
        emb = encoder.embed(texts)
        loss.compute_loss_from_embeddings([emb], torch.tensor([[3, -1], [3, 7], [7, -1]]))
    """

    def __init__(self, model, distance_metric=BatchHardTripletLossDistanceFunction.cosine_distance) -> None:
        super().__init__(model, distance_metric=distance_metric)

    def batch_hard_triplet_soft_margin_loss(self, labels: Tensor, embeddings: Tensor) -> Tensor:
        if labels.dim() == 1:
            return super().batch_hard_triplet_soft_margin_loss(labels, embeddings)
        if labels.size(0) != embeddings.size(0):
            raise ValueError(f"expected {embeddings.size(0)} label rows, got {labels.size(0)}")
        dist = self.distance_metric(embeddings.float())
        same = same_concept_mask(labels)
        eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        pos_mask = (same & ~eye).float()
        neg_mask = (~same).float()
        hardest_pos = (dist * pos_mask).max(1).values
        # invalid negatives get the row maximum added so they never win the min
        hardest_neg = (dist + dist.max(1, keepdim=True).values * (1.0 - neg_mask)).min(1).values
        return F.softplus(hardest_pos - hardest_neg).mean()  # ln(1 + exp(d_ap - d_an))
