"""FAISS indexes over encoded surface forms, and the dense recall strategy.

:class:`TermIndex` holds one vector per *surface form* (a vocabulary name or
synonym, or a coded mention) with the id it resolves to; a search returns the
top-k *ids*, each scored by its best form ("max over forms", approach E's -T
representation). Vectors are L2-normalised, so inner product = cosine.

Index kinds (``kind``):

* ``"flat"`` -- exact ``IndexFlatIP``; the default up to 100k forms (a 10k-40k
  term vocabulary with synonyms and coded mentions stays far below it and
  searches 1,000 queries in milliseconds).
* ``"hnsw"`` -- ``IndexHNSWFlat`` (M = 32, inner product), approximate, for
  >100k forms (UMLS-size vocabularies); supports incremental ``add`` without
  training.
* ``"ivf"`` -- ``IndexIVFFlat`` with ``nlist = 4·sqrt(n)`` lists, trained on the
  first vectors added (needs >= 39·nlist of them, else it stays flat);
  ``nprobe`` 16.
* ``"auto"`` -- flat below :data:`AUTO_APPROX_AT` forms, else HNSW.

:class:`DenseRecaller` is the ``"dense"`` strategy of the recall union
(approaches A, C, D: top-k by embedding similarity) over the vocabulary and,
like approach E's OD search, the coded mentions; ``add_coded_mention`` /
``add_synonym`` are searchable on the next query without retraining.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from termnorm.recall.base import Hits, Recaller
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

AUTO_APPROX_AT = 100_000  # forms; below it exact search costs < 10 ms per 1k queries at dim 384
HNSW_M = 32
IVF_NPROBE = 16


def _as_f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


class TermIndex:
    """Surface-form vectors -> ids, searched by inner product with max-over-forms per id.

    ``encoder`` (a :class:`~termnorm.dense.biencoder.BiEncoder`) is needed only
    for the text-level calls ``add`` / ``search_texts``; ``side`` says whether
    texts are encoded as passages (vocabulary forms) or queries (mentions).
    """

    def __init__(self, dim: int, kind: str = "auto", encoder=None, side: str = "passage"):
        if kind not in ("auto", "flat", "hnsw", "ivf"):
            raise ValueError(f"unknown index kind {kind!r}")
        if side not in ("passage", "query"):
            raise ValueError(f"side must be 'passage' or 'query', not {side!r}")
        self.dim, self.kind, self.encoder, self.side = int(dim), kind, encoder, side
        self._index = None
        self._ids = np.zeros(0, dtype=np.int64)
        self.texts: list[str] = []

    # ---- building -------------------------------------------------------------
    def _make(self, n_first: int):
        import faiss

        kind = self.kind
        if kind == "auto":
            kind = "hnsw" if n_first >= AUTO_APPROX_AT else "flat"
        if kind == "hnsw":
            idx = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            idx.hnsw.efSearch = 128
            return idx
        if kind == "ivf":
            nlist = max(1, int(4 * np.sqrt(max(n_first, 1))))
            if n_first >= 39 * nlist:
                idx = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), nlist, faiss.METRIC_INNER_PRODUCT)
                idx.nprobe = min(IVF_NPROBE, nlist)
                return idx
        return faiss.IndexFlatIP(self.dim)

    def add_vectors(self, vecs: np.ndarray, ids: Sequence[int], texts: Sequence[str] | None = None) -> None:
        """Add already-encoded forms (L2-normalised rows) resolving to ``ids``; searchable at once."""
        vecs = _as_f32(vecs)
        ids = np.asarray(ids, dtype=np.int64)
        if vecs.ndim != 2 or vecs.shape[1] != self.dim or len(vecs) != len(ids):
            raise ValueError(f"expected [{len(ids)}, {self.dim}] vectors, got {vecs.shape}")
        if len(ids) == 0:
            return
        if self._index is None:
            self._index = self._make(len(vecs))
            if not self._index.is_trained:
                self._index.train(vecs)
        self._index.add(vecs)
        self._ids = np.concatenate([self._ids, ids])
        self.texts.extend(texts if texts is not None else [""] * len(ids))

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.encoder is None:
            raise RuntimeError("this TermIndex has no encoder: use add_vectors / search")
        return self.encoder.encode_terms(texts) if self.side == "passage" else self.encoder.encode_queries(texts)

    def add(self, texts: Sequence[str], ids: Sequence[int]) -> None:
        """Encode and add forms (incremental: the next search sees them)."""
        self.add_vectors(self._encode(list(texts)), ids, list(texts))

    @classmethod
    def build(cls, encoder, texts: Sequence[str], ids: Sequence[int], side: str = "passage",
              kind: str = "auto", progress: bool = False) -> "TermIndex":
        idx = cls(encoder.dim, kind, encoder, side)
        texts = list(texts)
        vecs = (encoder.encode_terms if side == "passage" else encoder.encode_queries)(texts, progress=progress)
        idx.add_vectors(vecs, ids, texts)
        return idx

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    # ---- searching ------------------------------------------------------------
    def search_forms(self, vecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw top-k forms: (positions [n, k], scores [n, k]); -1 / -inf pad."""
        n = len(vecs)
        pos = np.full((n, k), -1, dtype=np.int64)
        sc = np.full((n, k), -np.inf, dtype=np.float32)
        if self._index is None or n == 0 or k == 0:
            return pos, sc
        kk = min(k, len(self))
        d, i = self._index.search(_as_f32(vecs), kk)
        pos[:, :kk], sc[:, :kk] = i, d
        sc[pos < 0] = -np.inf
        return pos, sc

    def search(self, vecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ids per query row, each scored by its best form: ``(ids [n, k], scores [n, k])``, -1 / -inf pad.

        Exact for the flat index: the first k distinct ids met in form order are
        the top-k by max-over-forms, so the form search is widened (x4, doubling)
        until k distinct ids are found or every form was seen.
        """
        vecs = _as_f32(vecs)
        n = len(vecs)
        out_ids = np.full((n, k), -1, dtype=np.int64)
        out_sc = np.full((n, k), -np.inf, dtype=np.float32)
        todo = np.arange(n)
        width = min(len(self), max(k, 1) * 4)
        while len(todo) and width > 0:
            pos, sc = self.search_forms(vecs[todo], width)
            tids = np.where(pos >= 0, self._ids[np.maximum(pos, 0)], -1)
            again = []
            for r, q in enumerate(todo):
                valid = tids[r] >= 0
                t, s = tids[r][valid], sc[r][valid]
                _, first = np.unique(t, return_index=True)
                first.sort()
                first = first[:k]
                out_ids[q, :len(first)], out_sc[q, :len(first)] = t[first], s[first]
                if len(first) < k and width < len(self):
                    again.append(q)
            todo = np.asarray(again, dtype=np.int64)
            width = min(len(self), width * 2)
        return out_ids, out_sc

    def search_texts(self, texts: Sequence[str], k: int, side: str = "query") -> tuple[np.ndarray, np.ndarray]:
        if self.encoder is None:
            raise RuntimeError("this TermIndex has no encoder")
        enc = self.encoder.encode_queries if side == "query" else self.encoder.encode_terms
        return self.search(enc(list(texts)), k)

    # ---- persistence ----------------------------------------------------------
    def save(self, directory) -> Path:
        import faiss

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self._index is not None:
            faiss.write_index(self._index, str(directory / "forms.faiss"))
        np.save(directory / "ids.npy", self._ids)
        meta = {"dim": self.dim, "kind": self.kind, "side": self.side, "count": len(self)}
        (directory / "index.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        (directory / "texts.json").write_text(json.dumps(self.texts, ensure_ascii=False), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory, encoder=None) -> "TermIndex":
        import faiss

        directory = Path(directory)
        meta = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        idx = cls(meta["dim"], meta["kind"], encoder, meta["side"])
        if (directory / "forms.faiss").exists():
            idx._index = faiss.read_index(str(directory / "forms.faiss"))
        idx._ids = np.load(directory / "ids.npy")
        idx.texts = json.loads((directory / "texts.json").read_text(encoding="utf-8"))
        if len(idx._ids) != (idx._index.ntotal if idx._index is not None else 0):
            raise ValueError(f"{directory}: id map ({len(idx._ids)}) and index disagree")
        return idx


def saved_form_vectors(encoder, texts: Sequence[str], ids) -> np.ndarray | None:
    """The vocabulary forms' vectors from the index saved beside ``encoder``'s model folder (``run/index/vocabulary``
    by ``termnorm train recall``, ``pipeline/index/vocabulary`` by a pipeline's save), when it holds exactly
    ``texts`` and ``ids``: MEDIC's 76,237 forms take 6 minutes to encode again on a 2-core CPU, each time a
    pipeline with this encoder is built. None otherwise."""
    folder = getattr(encoder, "folder", None)
    saved = Path(folder).parent / "index" / "vocabulary" if folder is not None else None
    if saved is None or not (saved / "index.json").is_file():
        return None
    if (saved / "index.json").stat().st_mtime < max(p.stat().st_mtime for p in Path(folder).iterdir()):
        return None  # the model was written again after its index
    try:
        idx = TermIndex.load(saved)
    except (OSError, ValueError, RuntimeError):
        return None
    if idx._index is None or idx.texts != list(texts) or not np.array_equal(idx.ids, np.asarray(ids)):
        return None
    try:
        return idx._index.reconstruct_n(0, idx._index.ntotal)
    except RuntimeError:  # an index kind that does not keep its vectors
        return None


class DenseRecaller(Recaller):
    """Dense recall (score key ``"dense"``): cosine top-k over vocabulary forms and coded mentions.

    Vocabulary names + synonyms are encoded as passages (-> their term id);
    coded mentions (``history`` and every ``add_coded_mention``) as queries
    (-> their coded-mention id, expanded to its terms). A term's score is its best
    form's cosine in either index (approach E's OD-T search). A mention coded
    again (same :func:`normalize` form) replaces its earlier terms: the later
    decision is the coder's correction.
    """

    name = "dense"

    def __init__(self, encoder, index_kind: str = "auto", use_history: bool = True, batch_size: int = 256):
        self.encoder = encoder
        self.index_kind = index_kind
        self.use_history = use_history
        self.batch_size = batch_size
        self.vocab: Vocabulary | None = None
        self.vocab_index: TermIndex | None = None
        self.mention_index: TermIndex | None = None
        self.coded_texts: list[str] = []
        self.coded_terms: list[list[int]] = []
        self._coded_by_key: dict[str, int] = {}

    # ---- Recaller -------------------------------------------------------------
    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None, progress: bool = False,
            form_vecs: np.ndarray | None = None, mention_vecs: dict[str, np.ndarray] | None = None
            ) -> "DenseRecaller":
        """Index the vocabulary forms and the coded ``history``.

        ``form_vecs`` (rows aligned with ``vocab.surface_forms()``) and
        ``mention_vecs`` ({mention text: vector}) are encodings the caller already
        has from the same encoder (``train_biencoder(state=...)``); missing ones are encoded.
        """
        self.vocab = vocab
        texts, ids = vocab.surface_forms()
        if form_vecs is None:
            form_vecs = saved_form_vectors(self.encoder, texts, ids)
        if form_vecs is not None and len(form_vecs) == len(texts):
            self.vocab_index = TermIndex(self.encoder.dim, self.index_kind, self.encoder, "passage")
            self.vocab_index.add_vectors(form_vecs, ids, texts)
        else:
            self.vocab_index = TermIndex.build(self.encoder, texts, ids, "passage", self.index_kind, progress)
        self.mention_index = TermIndex(self.encoder.dim, self.index_kind, self.encoder, "query")
        self.coded_texts, self.coded_terms, self._coded_by_key = [], [], {}
        if history and self.use_history:
            self._add_coded([(m.text, m.terms) for m in history], mention_vecs)
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        ids, scores = self.search_vectors(self.encoder.encode_queries(queries, self.batch_size), k)
        return [[(int(t), float(s)) for t, s in zip(ri, rs) if t >= 0] for ri, rs in zip(ids, scores)]

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        self._add_coded([(mention, terms)])

    def add_synonym(self, name: str, synonym: str) -> None:
        """A new surface form of a vocabulary term, searchable on the next query."""
        self._need_fit()
        tid = self.vocab.get_id(name)
        if tid is None:
            raise KeyError(f"unknown term {name!r}")
        self.vocab_index.add([synonym], [tid])

    # ---- internals ------------------------------------------------------------
    def _need_fit(self):
        if self.vocab is None:
            raise RuntimeError("call fit(vocab, history) first")

    def _add_coded(self, items: list[tuple[str, Sequence[str]]], known_vecs: dict[str, np.ndarray] | None = None
                   ) -> int:
        """Add coded mentions (terms not in the vocabulary are skipped); returns how many were new."""
        self._need_fit()
        new_texts, new_ids = [], []
        for text, terms in items:
            tids = [t for t in (self.vocab.get_id(x) for x in terms) if t is not None]
            key = normalize(text)
            if not tids or not key:
                continue
            cid = self._coded_by_key.get(key)
            if cid is not None:
                self.coded_terms[cid] = tids  # correction: same vector, new terms
                continue
            cid = len(self.coded_texts)
            self._coded_by_key[key] = cid
            self.coded_texts.append(text)
            self.coded_terms.append(tids)
            new_texts.append(text)
            new_ids.append(cid)
        if new_texts:
            known_vecs = known_vecs or {}
            todo = [t for t in new_texts if t not in known_vecs]
            fresh = dict(zip(todo, self.encoder.encode_queries(todo, self.batch_size))) if todo else {}
            vecs = np.stack([known_vecs[t] if t in known_vecs else fresh[t] for t in new_texts])
            self.mention_index.add_vectors(vecs, new_ids, new_texts)
        return len(new_texts)

    def search_vectors(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """OD search: top-k term ids over vocabulary forms and coded mentions, max score per term."""
        self._need_fit()
        v_ids, v_sc = self.vocab_index.search(qvecs, k)
        if len(self.mention_index) == 0:
            return v_ids, v_sc
        m_ids, m_sc = self.mention_index.search(qvecs, k)
        out_ids = np.full((len(qvecs), k), -1, dtype=np.int64)
        out_sc = np.full((len(qvecs), k), -np.inf, dtype=np.float32)
        for r in range(len(qvecs)):  # merge <= 2k hits per query
            best: dict[int, float] = {}
            for t, s in zip(v_ids[r], v_sc[r]):
                if t >= 0:
                    best[int(t)] = max(best.get(int(t), -np.inf), float(s))
            for c, s in zip(m_ids[r], m_sc[r]):
                if c >= 0:
                    for t in self.coded_terms[c]:
                        best[t] = max(best.get(t, -np.inf), float(s))
            top = sorted(best.items(), key=lambda x: -x[1])[:k]
            out_ids[r, :len(top)] = [t for t, _ in top]
            out_sc[r, :len(top)] = [s for _, s in top]
        return out_ids, out_sc

    # ---- persistence ----------------------------------------------------------
    def save(self, directory) -> Path:
        """Indexes + coded mentions (the encoder is saved separately with ``BiEncoder.save``)."""
        self._need_fit()
        directory = Path(directory)
        self.vocab_index.save(directory / "vocabulary")
        self.mention_index.save(directory / "coded")
        (directory / "coded.json").write_text(json.dumps(
            {"texts": self.coded_texts, "terms": self.coded_terms, "vocabulary_size": len(self.vocab)},
            ensure_ascii=False), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory, encoder, vocab: Vocabulary, **kw) -> "DenseRecaller":
        directory = Path(directory)
        self = cls(encoder, **kw)
        self.vocab = vocab
        self.vocab_index = TermIndex.load(directory / "vocabulary", encoder)
        self.mention_index = TermIndex.load(directory / "coded", encoder)
        coded = json.loads((directory / "coded.json").read_text(encoding="utf-8"))
        if coded.get("vocabulary_size") not in (None, len(vocab)):
            raise ValueError(f"{directory}: index built for a vocabulary of {coded['vocabulary_size']} terms, "
                             f"got {len(vocab)}")
        self.coded_texts, self.coded_terms = coded["texts"], [list(t) for t in coded["terms"]]
        self._coded_by_key = {normalize(t): i for i, t in enumerate(self.coded_texts)}
        return self
