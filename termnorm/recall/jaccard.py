"""Character-set Jaccard recall (approach B), as sparse binary matrix products."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer

from termnorm.recall.base import Hits, Recaller
from termnorm.recall.tfidf import SurfaceIndex, searchable_forms
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary


def intersections_to_jaccard(s: sp.csr_matrix, q_sizes: np.ndarray, form_sizes: np.ndarray) -> sp.csr_matrix:
    """Rewrite a product of binary matrices (``|A∩B|`` per query row, form column) as Jaccard, in place."""
    inter = s.data
    r = np.repeat(np.arange(s.shape[0]), np.diff(s.indptr))
    s.data = inter / (q_sizes[r] + form_sizes[s.indices] - inter)
    return s


class JaccardRecaller(Recaller):
    """Jaccard similarity of the query's and each surface form's *sets* of characters.

    Approach B's strongest single strategy (Recall@10 0.820 alone on its
    SNOMED CT subset, vs word TF-IDF 0.549). Computed for a whole batch at
    once with binary matrices: ``|A∩B| = Q·Nᵀ`` (one sparse product), then
    ``|A∪B| = |A| + |B| − |A∩B|`` from the row sums, ``J = |A∩B| / |A∪B|``.
    Characters absent from every surface form still count in ``|A|`` (they
    make the union larger, as in the set definition).

    Input table:

    ====================  ==================  =====================================
    query                 surface form         score
    ====================  ==================  =====================================
    ``胆囊切除术``          ``胆囊切除术``        5/5 = 1.0
    ``腹腔镜胆囊切除术``    ``胆囊切除术``        5/8 = 0.625
    ====================  ==================  =====================================

    Relation to siblings: like :class:`~termnorm.recall.tfidf.CharTfidfRecaller`
    but unweighted, so frequent characters (术, 病) count as much as rare ones,
    and length differences are penalised more; the two disagree often enough
    that the union benefits from both.

    Example::

        v = Vocabulary(names=["胆囊切除术", "胆总管切开取石术"])
        JaccardRecaller().fit(v).recall("腹腔镜胆囊切除术", k=1)   # [(0, 0.625)]
    """

    name = "jaccard"

    def __init__(self, variants: bool = True):
        self.variants = variants  # also index name_variants (see termnorm.recall.tfidf)

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "JaccardRecaller":
        texts, ids = searchable_forms(vocab, self.variants)
        self.vectorizer = CountVectorizer(analyzer="char", lowercase=False, binary=True, dtype=np.float32)
        m = self.vectorizer.fit_transform([normalize(t) for t in texts])
        self.index = SurfaceIndex(m, ids)
        # |B| per stored (term-sorted) form
        self._form_sizes = np.asarray(self.index.rows.sum(axis=1)).ravel().astype(np.float32)
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        norm = [normalize(t) for t in queries]
        q = self.vectorizer.transform(norm)
        q_sizes = np.array([len(set(t)) for t in norm], dtype=np.float32)  # |A|, unknown chars included
        form_sizes = self._form_sizes

        return self.index.search(q, k, post=lambda s, rows: intersections_to_jaccard(s, q_sizes[rows], form_sizes))
