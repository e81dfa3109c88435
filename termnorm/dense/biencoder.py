"""The bi-encoder that embeds mentions and vocabulary terms into one space.

Shared-weight BERT + mean pooling, the candidate generator of approach A
(MTCG), the BI-HARDNCE encoder of approach D and the triplet vector space of
approach E (methods.md). Built on sentence-transformers
(``Transformer`` + ``Pooling("mean")``) from *any* local Hugging Face model
folder -- the multilingual-e5-small rebuild (``termnorm.encoder``) or the tiny
random test BERT (``termnorm.encoder.tiny``); nothing is ever fetched from a hub.

Knobs of :meth:`BiEncoder.from_folder`:

* ``max_seq_length=32`` -- mentions are ~12 characters and terms ~9
  (methods.md, "short text"); 32 word pieces cover prefix + text with room to
  spare and keep CPU training cheap (approach E even used 8).
* ``query_prefix`` / ``passage_prefix`` -- ``"auto"`` (default) switches on
  E5's ``"query: "`` / ``"passage: "`` only when the folder says it is an E5
  model (config / build manifest / folder name mention ``e5``); any other
  model gets no prefix, since prefixes it never saw only add noise.
* ``device`` -- CUDA when present (mixed precision through ``torch.autocast``),
  else CPU.

The count head of approach A (1 / 2 / >=3 terms) lives here too because it
reads the mention embedding; see :class:`CountHead`.
"""

from __future__ import annotations

import json
import re
import unicodedata
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "
CONFIG_NAME = "termnorm_biencoder.json"
COUNT_HEAD_NAME = "count_head.pt"
COUNT_CLASSES = 3  # 1, 2, >=3 terms (approach A)


def default_device() -> str:
    """``$TERMNORM_DEVICE`` if set, else CUDA when present, else CPU (``termnorm.encoder.device``)."""
    from termnorm.encoder.device import pick_device

    return pick_device()


def autocast_for(device: str | torch.device):
    """Mixed precision on CUDA (bf16 where supported, else fp16), a no-op on CPU."""
    from termnorm.encoder.device import autocast_context

    return autocast_context(str(device))


def looks_like_e5(folder: str | Path) -> bool:
    """True when a model folder declares itself an E5 model (config, build manifest or folder name)."""
    folder = Path(folder)
    if re.search(r"(^|[^a-z0-9])e5([^a-z0-9]|$)", folder.name.lower()):
        return True
    for f in sorted(folder.glob("*.json")):
        if f.name.startswith(("tokenizer", "special_tokens", "vocab")) or f.stat().st_size > 1_000_000:
            continue
        try:
            txt = f.read_text(encoding="utf-8").lower()
        except (OSError, UnicodeDecodeError):
            continue
        if re.search(r"(^|[^a-z0-9])(multilingual-)?e5([^a-z0-9]|$)", txt):
            return True
    return False


def clean_text(text: str) -> str:
    """NFKC + trimmed, single-spaced: full-width forms and stray spaces must not change the vector."""
    return " ".join(unicodedata.normalize("NFKC", text or "").split())


def truncate_layers(hf_model, n: int) -> int:
    """Keep the first ``n`` encoder layers of a BERT-like model in place (config updated, so save/load agree)."""
    layer_list = hf_model.encoder.layer
    if not 1 <= n <= len(layer_list):
        raise ValueError(f"layers must be in 1..{len(layer_list)}, got {n}")
    hf_model.encoder.layer = layer_list[:n]
    hf_model.config.num_hidden_layers = n
    return n


# ----------------------------------------------------------------- count head
_SPLIT_RE = re.compile(r"[+＋、;；,，/／|]|(?<=术)(?:及|并|和|加|伴)")


def _splitter():
    """The text helper's mention splitter (it knows the clinical conventions; imported on first use)."""
    from termnorm.text.split import split_mention

    return split_mention




def _split_parts(text: str) -> int:
    """Number of parts a mention splits into."""
    split = _splitter()
    if split is not None:
        try:
            return max(1, len(split(text)))
        except Exception as exc:  # noqa: BLE001 - a splitter failure must not break counting
            warnings.warn(f"mention splitter termnorm.text.split.split_mention failed on {text[:80]!r} "
                          f"({type(exc).__name__}: {exc}); counting its parts with the separator "
                          "regex instead", RuntimeWarning, stacklevel=2)
    return max(1, len([p for p in _SPLIT_RE.split(text) if p and p.strip()]))


def count_features(texts: Sequence[str]) -> np.ndarray:
    """Cheap features beside the embedding: one-hot of min(#parts, 3) and length / 32."""
    out = np.zeros((len(texts), COUNT_CLASSES + 1), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i, min(_split_parts(t), COUNT_CLASSES) - 1] = 1.0
        out[i, COUNT_CLASSES] = min(len(t), 64) / 32.0
    return out


def count_class(n_terms: int) -> int:
    """Class index of a gold-set size: 0 -> 1 term, 1 -> 2 terms, 2 -> >=3 terms."""
    return min(max(n_terms, 1), COUNT_CLASSES) - 1


class CountHead(nn.Module):
    """How many terms a mention needs: 1, 2 or >=3 (approach A's multi-task head).

    Approach A puts a 3-way classifier on the mention's [CLS] and adds its
    cross-entropy to the triplet loss. We read the *mean-pooled* mention
    embedding (the vector recall already computes; e5 has no trained pooler)
    plus :func:`count_features` -- the number of parts the splitter finds is
    the strongest single cue for "腹腔镜胆囊切除术+术中胆道造影" style mentions.
    Trained jointly with the recall objective by ``train_biencoder``
    (``count_head=True``, loss = objective + CE as in approach A) and then
    refitted on the final embeddings, or only on frozen embeddings by
    :func:`fit_count_head`. Measured on Yidu-N7K val (1,000 mentions, 95% one
    term): majority class 0.95, the splitter's part count alone 0.911,
    this head refitted on e5-small embeddings + features 0.977.
    """

    def __init__(self, dim: int, n_features: int = COUNT_CLASSES + 1, hidden: int = 64):
        super().__init__()
        self.dim, self.n_features, self.hidden = dim, n_features, hidden
        self.net = nn.Sequential(nn.Linear(dim + n_features, hidden), nn.ReLU(), nn.Linear(hidden, COUNT_CLASSES))

    def forward(self, emb: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        emb = nn.functional.normalize(emb.float(), dim=-1)  # scale-free input: the encoder's norm drifts in training
        return self.net(torch.cat([emb, feats.float()], dim=-1))

    def config(self) -> dict:
        return {"dim": self.dim, "n_features": self.n_features, "hidden": self.hidden}


# ----------------------------------------------------------------- bi-encoder
class BiEncoder:
    """Mention / term encoder: sentence-transformers model + prefixes + optional count head.

    ``encode_queries`` / ``encode_terms`` return float32 L2-normalised rows, so
    inner product = cosine, which is what the FAISS index searches.
    """

    def __init__(self, model, query_prefix: str = "", passage_prefix: str = "", source: str = "",
                 count_head: CountHead | None = None):
        self.model = model  # sentence_transformers.SentenceTransformer
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.source = source
        self.folder: Path | None = None  # the model folder it was loaded from (its run's index is beside it)
        self.count_head = count_head
        if count_head is not None:
            count_head.to(self.device)

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_folder(cls, path, device: str | None = None, max_seq_length: int = 32,
                    query_prefix: str | None = "auto", passage_prefix: str | None = "auto",
                    layers: int | None = None) -> "BiEncoder":
        """Wrap a local Hugging Face model folder (or reload a folder written by :meth:`save`).

        ``layers``: keep only the first N transformer layers (approach A: recall@10
        98.3 with 12 BERT layers, 97.97 with 8, 96.6 with 2, at 507 / 691 / 1,500
        mentions/s) -- the CPU speed knob; None keeps them all.
        """
        path = Path(path)
        if (path / CONFIG_NAME).exists():
            return cls.load(path, device=device)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path}: not a Hugging Face model folder (no config.json)")
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

        device = device or default_device()
        tr = Transformer(str(path), max_seq_length=max_seq_length,
                         model_kwargs={"local_files_only": True}, processor_kwargs={"local_files_only": True})
        pool = Pooling(tr.get_embedding_dimension(), "mean")
        st = SentenceTransformer(modules=[tr, pool], device=device)
        if layers is not None:
            truncate_layers(st.transformers_model, layers)
        e5 = looks_like_e5(path)
        qp = (E5_QUERY_PREFIX if e5 else "") if query_prefix in (None, "auto") else query_prefix
        pp = (E5_PASSAGE_PREFIX if e5 else "") if passage_prefix in (None, "auto") else passage_prefix
        return cls(st, qp, pp, source=str(path.resolve()))

    @classmethod
    def static_from_folder(cls, path, device: str | None = None) -> "BiEncoder":
        """A bag of word pieces (sentence-transformers' ``StaticEmbedding``): the folder's tokenizer, each
        piece's vector started from the model's input embeddings, a text's vector their mean; no attention,
        so CPU training takes many passes over a vocabulary's synonyms in the time a transformer takes one.
        No prefixes: a bag of pieces would only average them in."""
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
        from tokenizers import Tokenizer
        from transformers import AutoModel

        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{path}: a static encoder needs the folder's fast tokenizer (tokenizer.json)")
        weights = AutoModel.from_pretrained(str(path), local_files_only=True).get_input_embeddings().weight
        static = StaticEmbedding(Tokenizer.from_file(str(path / "tokenizer.json")), weights.detach().clone())
        st = SentenceTransformer(modules=[static], device=device or default_device())
        return cls(st, "", "", source=str(path.resolve()))

    @property
    def is_static(self) -> bool:
        """True for a bag of word pieces (:meth:`static_from_folder`), whose pieces' table is the model."""
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding

        return isinstance(self.model[0], StaticEmbedding)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def max_seq_length(self) -> int:
        """Word pieces read per text; 0 for a static encoder, which reads them all."""
        return 0 if self.is_static else int(self.model.max_seq_length)

    def word_embeddings(self) -> nn.Module:
        return self.model[0].embedding if self.is_static else self.model.transformers_model.get_input_embeddings()

    def freeze_word_embeddings(self, frozen: bool = True) -> int:
        """Freeze (or unfreeze) the word-embedding table; returns its parameter count.

        96M of e5-small's 118M parameters are this table: frozen, a 32-pair CPU
        step takes ~0.85 s instead of 6-7 s (methods.md).
        """
        w = self.word_embeddings().weight
        w.requires_grad_(not frozen)
        return int(w.numel())

    # ---- encoding -----------------------------------------------------------
    def _prep(self, texts: Sequence[str], prefix: str) -> list[str]:
        return [prefix + clean_text(t) for t in texts]

    def encode(self, texts: Sequence[str], prefix: str = "", batch_size: int = 256,
               progress: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.model.eval()
        with autocast_for(self.device):
            v = self.model.encode(self._prep(texts, prefix), batch_size=batch_size, show_progress_bar=progress,
                                  convert_to_numpy=True, normalize_embeddings=True)
        return np.ascontiguousarray(v, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        """Mentions (and coded mentions), with the query prefix."""
        return self.encode(texts, self.query_prefix, batch_size, progress)

    def encode_terms(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        """Vocabulary names and synonyms, with the passage prefix."""
        return self.encode(texts, self.passage_prefix, batch_size, progress)

    def embed(self, texts: Sequence[str], prefix: str = "") -> torch.Tensor:
        """Differentiable mean-pooled embeddings (training path; not normalised)."""
        from sentence_transformers.util import batch_to_device

        feats = batch_to_device(self.model.preprocess(self._prep(texts, prefix)), self.device)
        return self.model(feats)["sentence_embedding"]

    # ---- count head ---------------------------------------------------------
    def ensure_count_head(self) -> CountHead:
        if self.count_head is None:
            self.count_head = CountHead(self.dim).to(self.device)
        return self.count_head

    def predict_count(self, mentions: Sequence[str], batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Predicted number of terms per mention (1, 2 or 3 meaning ">=3") and the class probabilities [n, 3]."""
        if self.count_head is None:
            raise RuntimeError("this bi-encoder has no count head (train with count_head=True or fit_count_head)")
        vecs = self.encode_queries(mentions, batch_size)
        head = self.count_head.eval()
        with torch.no_grad():
            logits = head(torch.from_numpy(vecs).to(self.device),
                          torch.from_numpy(count_features(mentions)).to(self.device))
            prob = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        return prob.argmax(1) + 1, prob

    # ---- persistence --------------------------------------------------------
    def save(self, directory, compact: bool = True) -> Path:
        """Write the model to ``directory``. ``compact`` (where the base folder is known): only the weights that
        differ from the base's (``termnorm.dense.delta``), 14 MB instead of 466 MB for e5-small's top 2 layers."""
        from termnorm.dense import delta

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        base = delta.base_of(self) if compact else None
        if base is None:
            self.model.save(str(directory))
        else:
            delta.save_delta(self, directory, base)
        cfg = {"query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix, "source": self.source,
               "max_seq_length": self.max_seq_length, "dim": self.dim, "base": base,
               "count_head": self.count_head.config() if self.count_head is not None else None}
        (directory / CONFIG_NAME).write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
        if self.count_head is not None:
            torch.save({k: v.detach().cpu() for k, v in self.count_head.state_dict().items()},
                       directory / COUNT_HEAD_NAME)
        return directory

    @classmethod
    def load(cls, directory, device: str | None = None) -> "BiEncoder":
        """Reload a folder written by :meth:`save`, or the output folder of ``termnorm train recall``
        (whose ``model`` subfolder is that)."""
        from sentence_transformers import SentenceTransformer

        directory = Path(directory)
        if not (directory / CONFIG_NAME).is_file() and (directory / "model").is_dir():
            directory = directory / "model"
        cfg = json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8"))
        if cfg.get("base"):  # saved as its changes to a base folder
            from termnorm.dense.delta import load_delta

            enc = load_delta(directory, cfg, device or default_device())
        else:
            st = SentenceTransformer(str(directory), device=device or default_device(), local_files_only=True)
            enc = cls(st, cfg.get("query_prefix", ""), cfg.get("passage_prefix", ""), cfg.get("source", ""))
        if cfg.get("count_head"):
            enc.count_head = CountHead(**cfg["count_head"])
            enc.count_head.load_state_dict(torch.load(directory / COUNT_HEAD_NAME, map_location="cpu"))
            enc.count_head.to(enc.device)
        enc.folder = directory
        return enc


def fit_count_head(encoder: BiEncoder, mentions, epochs: int = 300, lr: float = 1e-2, seed: int = 0) -> float:
    """Fit the count head on frozen mention embeddings (full-batch Adam); returns training accuracy.

    The separate-head route of approach A's count prediction, for encoders
    trained without labelled mentions (``data="vocab"``) or loaded from elsewhere.
    ``mentions`` are LabelledMention-like objects (``.text``, ``.terms``).
    """
    texts = [m.text for m in mentions]
    return fit_count_head_vectors(encoder, texts, encoder.encode_queries(texts),
                                  [count_class(len(m.terms)) for m in mentions], epochs, lr, seed)


def fit_count_head_vectors(encoder: BiEncoder, texts: Sequence[str], vecs: np.ndarray, labels: Sequence[int],
                           epochs: int = 300, lr: float = 1e-2, seed: int = 0) -> float:
    """:func:`fit_count_head` on embeddings the caller already has (``labels``: count classes 0/1/2).

    300 full-batch steps at lr 1e-2: on Yidu-N7K train (4k mentions, e5-small
    after 21 NCE steps) this gives 0.977 val accuracy (majority class: 0.95;
    the jointly trained head after those 21 steps: 0.95), see the report.
    """
    y = torch.tensor(list(labels), device=encoder.device)
    x = torch.from_numpy(np.ascontiguousarray(vecs, dtype=np.float32)).to(encoder.device)
    f = torch.from_numpy(count_features(texts)).to(encoder.device)
    torch.manual_seed(seed)
    head = encoder.ensure_count_head().train()
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(epochs):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(x, f), y)
        loss.backward()
        opt.step()
    head.eval()
    with torch.no_grad():
        return float((head(x, f).argmax(1) == y).float().mean())
