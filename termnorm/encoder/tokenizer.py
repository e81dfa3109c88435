"""Adapt an encoder's tokenizer to a corpus: add missing characters, prune.

Input: a Hugging Face model folder with a fast tokenizer (tokenizer.json,
Unigram/sentencepiece as XLM-R or WordPiece as BERT) -- the e5 build's
copy or the tiny test BERT -- and the corpus texts. Output: the folder
edited in place (:func:`add_medical_chars`) or a pruned copy
(:func:`prune_vocabulary`), weights, tokenizer files and manifest kept
consistent:

* :func:`find_unknown_chars` / :func:`add_medical_chars` -- medical
  characters the XLM-R vocabulary lacks (桡 疖 髌 ...) become pieces instead
  of ``<unk>``;
* :func:`prune_vocabulary` -- keep only the pieces a corpus uses: 96M of the
  118M parameters are the word-embedding table, and pruning it is what makes
  CPU training with unfrozen embeddings practical.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from termnorm.encoder.folder import (
    MANIFEST_NAME, _check_added_tokens_inside, _load_backend, _load_model, _model_pieces,
    _normalizer, _read_tokenizer_json, _refresh_manifest, _refuse_cached_base, _save_model_into,
    _write_json, _write_tokenizer_json,
)


def is_cjk(ch: str) -> bool:
    """CJK unified ideographs (basic, extensions A-F) and compatibility ideographs."""
    cp = ord(ch)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2EBEF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


# --------------------------------------------------------------------------
# medical characters the vocabulary lacks
# --------------------------------------------------------------------------
def find_unknown_chars(tokenizer, texts: Iterable[str]) -> set[str]:
    """Characters of ``texts`` that ``tokenizer`` maps to its unknown token.

    Works on the real tokenisation (offsets of the unk tokens), so a char that
    only exists as a word-initial piece ("▁X") but occurs mid-word counts as
    unknown, and a char the normaliser maps to a known one does not.
    """
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    unk_id = getattr(tokenizer, "unk_token_id", None)
    if unk_id is None:
        raise ValueError("tokenizer has no unknown token")
    uniq = sorted({t for t in texts if t})
    found: set[str] = set()
    suspects: set[str] = set()
    for start in range(0, len(uniq), 4096):
        chunk = uniq[start:start + 4096]
        for text, enc in zip(chunk, backend.encode_batch(chunk, add_special_tokens=False)):
            ids = enc.ids
            if unk_id not in ids:
                continue
            for tid, (s, e) in zip(ids, enc.offsets):
                if tid == unk_id:
                    span = [c for c in text[s:e] if not c.isspace()]
                    if len(span) == 1:
                        found.update(span)
                    else:  # fused unks, or a WordPiece word that failed as a whole
                        suspects.update(span)
    suspects -= found
    if suspects:
        # a char of a multi-char unk span is unknown if it is unknown alone
        cand = sorted(suspects)
        for c, enc in zip(cand, backend.encode_batch(cand, add_special_tokens=False)):
            if unk_id in enc.ids:
                found.add(c)
    return found


#: Noise added to the initial row of a new character, as a fraction of the
#: per-dimension std of the reference rows. Small, so the new rows start in
#: the region of ordinary CJK characters (Hewitt 2021: a row near the mean of
#: existing embeddings barely perturbs the model) yet distinct from each other
#: so fine-tuning can pull them apart.
NEW_ROW_NOISE = 0.1


def add_medical_chars(folder: str | Path, chars: Iterable[str], *,
                      related: dict[str, str] | None = None, seed: int = 0) -> int:
    """Add characters the tokenizer maps to ``<unk>`` as pieces; grow the table.

    Edits ``folder`` in place (tokenizer.json, vocab.txt if present, the
    weights, the manifest) and returns the number of pieces added (0 when all
    are known already). Each character is normalised like the tokenizer does
    (NFKC for XLM-R, lower-case for BERT) before it is added.

    * ids: the new pieces are appended to the model vocabulary, so every
      existing id -- and its embedding row -- is unchanged. The table is only
      ever grown (e5-small has 35 spare rows beyond its 250,002 pieces; those
      never-reachable rows are used first).
    * init: row = mean of the reference rows + N(0, (NEW_ROW_NOISE * std)^2)
      per dimension, seeded by ``seed`` and the code point. Reference rows
      are the pieces of ``related[c]`` when given (e.g. {"髌": "膝盖骨"}),
      otherwise all single-character CJK pieces for a CJK char (all
      single-character pieces for another char). Without radical data this
      is the most neutral choice: before fine-tuning the char behaves like
      "some CJK character" instead of ``<unk>``.
    * Unigram score of a new piece: the lowest single-character score, i.e. a
      rare character; it cannot compete with existing pieces since none of
      them covers the character.
    """
    import torch

    folder = Path(folder)
    _refuse_cached_base(folder)
    tj = _read_tokenizer_json(folder)
    _check_added_tokens_inside(tj)
    backend = _load_backend(folder)
    norm = _normalizer(backend)
    pieces = _model_pieces(tj)
    known = set(pieces)
    kind = tj["model"]["type"]

    new: list[str] = []
    for c in dict.fromkeys(chars):
        if not c or c.isspace() or len(c) != 1:
            continue
        n = norm(c).strip()  # BERT's normaliser pads CJK chars with spaces
        if len(n) != 1:
            continue  # normalises to several known chars (e.g. ligatures) or nothing
        cands = [n] if (kind == "Unigram" or is_cjk(n)) else [n, "##" + n]
        for p in cands:
            if p not in known:
                known.add(p)
                new.append(p)
    if not new:
        return 0

    model = _load_model(folder)
    emb = model.get_input_embeddings()
    W = emb.weight.detach().cpu().numpy()
    n_old = len(pieces)
    if W.shape[0] < n_old:
        raise ValueError(f"{folder}: embedding table ({W.shape[0]} rows) is smaller than the "
                         f"vocabulary ({n_old} pieces)")
    single = np.array([i for i, p in enumerate(pieces) if len(p) == 1], dtype=np.int64)
    single_cjk = np.array([i for i in single if is_cjk(pieces[i])], dtype=np.int64)

    def reference_rows(piece: str) -> np.ndarray:
        ch = piece[-1]
        if related and related.get(ch):
            ids = [i for i in backend.encode(related[ch], add_special_tokens=False).ids
                   if i != backend.token_to_id(tj["model"].get("unk_token", "<unk>"))]
            ids = [i for i in ids if i < n_old]
            if ids:
                return W[np.array(ids)]
        rows = single_cjk if is_cjk(ch) and len(single_cjk) else single
        return W[rows]

    need = max(W.shape[0], n_old + len(new))
    if need > W.shape[0]:
        model.resize_token_embeddings(need, mean_resizing=False)
    emb = model.get_input_embeddings()
    ref_all = W[single_cjk] if len(single_cjk) else W[single]
    std_all = ref_all.std(axis=0)
    with torch.no_grad():
        for k, piece in enumerate(new):
            ref = reference_rows(piece)
            std = ref.std(axis=0) if len(ref) > 1 else std_all
            rng = np.random.default_rng([seed, ord(piece[-1]), len(piece)])
            row = ref.mean(axis=0) + NEW_ROW_NOISE * std * rng.standard_normal(ref.shape[1])
            emb.weight[n_old + k] = torch.from_numpy(row.astype(np.float32))
    model.config.vocab_size = emb.weight.shape[0]

    if kind == "Unigram":
        scores = [s for p, s in tj["model"]["vocab"] if len(p) == 1]
        low = float(min(scores)) if scores else -20.0
        tj["model"]["vocab"].extend([p, low] for p in new)
    else:
        tj["model"]["vocab"].update({p: n_old + k for k, p in enumerate(new)})
    _write_tokenizer_json(folder / "tokenizer.json", tj)
    if (folder / "vocab.txt").exists() and kind == "WordPiece":
        (folder / "vocab.txt").write_text("\n".join(_model_pieces(tj)) + "\n", encoding="utf-8")
    for stale in ("sentencepiece.bpe.model", "spiece.model"):  # would disagree now
        if (folder / stale).exists():
            (folder / stale).unlink()
    _save_model_into(model, folder)
    _refresh_manifest(folder, {"step": "add_medical_chars", "pieces": "".join(
        p.removeprefix("##") for p in new), "n_added": len(new), "rows": int(need)})
    return len(new)


# --------------------------------------------------------------------------
# vocabulary pruning
# --------------------------------------------------------------------------
E5_PREFIXES = ("query: ", "passage: ")


def _remap_post_processor(pp, remap: dict[int, int]):
    if not isinstance(pp, dict):
        return pp
    t = pp.get("type")
    if t == "TemplateProcessing":
        for spec in pp.get("special_tokens", {}).values():
            spec["ids"] = [remap[i] for i in spec["ids"]]
    elif t in ("RobertaProcessing", "BertProcessing"):
        for key in ("sep", "cls"):
            tok, i = pp[key]
            pp[key] = [tok, remap[i]]
    elif t == "Sequence":
        pp["processors"] = [_remap_post_processor(p, remap) for p in pp["processors"]]
    return pp


def prune_vocabulary(folder: str | Path, texts: Iterable[str], out_folder: str | Path, *,
                     prefixes: Sequence[str] = E5_PREFIXES, keep_single_chars: bool = True,
                     progress: bool = False) -> Path:
    """Write a copy of ``folder`` keeping only the pieces ``texts`` use.

    Kept: every piece of the tokenisation of each text (alone and after each
    of ``prefixes``), all special / added tokens, and -- with
    ``keep_single_chars`` -- the single-character pieces ("X", "▁X" / "##X")
    of every character in ``texts``, so unseen strings made of corpus chars
    still tokenise without ``<unk>``. Rows keep their relative order, so
    specials keep small ids.

    Corpus texts get exactly the same token sequence (remapped ids) and hence
    the same embeddings: a Viterbi (Unigram) or greedy longest-match
    (WordPiece) segmentation only uses kept pieces, and removing unused ones
    cannot create a better path. This is verified before writing.

    Why: 96M of e5-small's 118M parameters are the word-embedding table;
    unfrozen, its gradient and AdamW update dominate a CPU training step.
    """
    import torch

    folder, out = Path(folder), Path(out_folder)
    if out.resolve() == folder.resolve():
        raise ValueError("out_folder must differ from folder")
    tj = _read_tokenizer_json(folder)
    _check_added_tokens_inside(tj)
    backend = _load_backend(folder)
    norm = _normalizer(backend)
    pieces = _model_pieces(tj)
    kind = tj["model"]["type"]
    uniq = sorted({t for t in texts if t})
    if not uniq:
        raise ValueError("no texts to prune to")

    variants = list(dict.fromkeys([""] + list(prefixes)))
    used = set()
    from tqdm.auto import tqdm

    for start in tqdm(range(0, len(uniq), 4096), desc="tokenise", disable=not progress):
        chunk = uniq[start:start + 4096]
        for pre in variants:
            for enc in backend.encode_batch([pre + t for t in chunk], add_special_tokens=True):
                used.update(enc.ids)
    used.update(t["id"] for t in tj.get("added_tokens", []))
    unk_tok = "<unk>" if kind == "Unigram" else tj["model"].get("unk_token", "[UNK]")
    if kind == "Unigram":
        used.add(tj["model"]["unk_id"])
    elif unk_tok in tj["model"]["vocab"]:
        used.add(tj["model"]["vocab"][unk_tok])
    if keep_single_chars:
        index = {p: i for i, p in enumerate(pieces)}
        chars = {norm(c).strip() for t in uniq for c in set(t) if not c.isspace()}
        marks = ("\u2581",) if kind == "Unigram" else ("##",)
        for c in chars:
            for p in (c, *(m + c for m in marks)):
                if p in index:
                    used.add(index[p])
    keep = np.array(sorted(used), dtype=np.int64)
    if keep[-1] >= len(pieces):
        raise ValueError("token ids beyond the model vocabulary")
    remap = {int(o): n for n, o in enumerate(keep)}

    # -- tokenizer
    new_tj = json.loads(json.dumps(tj))
    if kind == "Unigram":
        new_tj["model"]["vocab"] = [tj["model"]["vocab"][i] for i in keep]
        new_tj["model"]["unk_id"] = remap[tj["model"]["unk_id"]]
    else:
        new_tj["model"]["vocab"] = {pieces[i]: n for n, i in enumerate(keep)}
    for t in new_tj.get("added_tokens", []):
        t["id"] = remap[t["id"]]
    new_tj["post_processor"] = _remap_post_processor(new_tj.get("post_processor"), remap)

    # -- model
    model = _load_model(folder)
    W = model.get_input_embeddings().weight.detach()
    pad = model.config.pad_token_id
    new_pad = remap.get(pad) if pad is not None else None
    new_emb = torch.nn.Embedding(len(keep), W.shape[1], padding_idx=new_pad)
    with torch.no_grad():
        new_emb.weight.copy_(W[torch.from_numpy(keep)])
    model.set_input_embeddings(new_emb)
    model.config.vocab_size = len(keep)
    model.config.pad_token_id = new_pad
    for attr in ("bos_token_id", "eos_token_id"):
        if getattr(model.config, attr, None) is not None:
            setattr(model.config, attr, remap.get(getattr(model.config, attr)))

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    _write_tokenizer_json(out / "tokenizer.json", new_tj)
    # verify: same segmentation (remapped) for every corpus text before saving weights
    from tokenizers import Tokenizer

    pruned = Tokenizer.from_file(str(out / "tokenizer.json"))
    lut = np.full(len(pieces), -1, dtype=np.int64)
    lut[keep] = np.arange(len(keep))
    for start in range(0, len(uniq), 4096):
        chunk = [variants[-1] + t for t in uniq[start:start + 4096]]
        for t, a, b in zip(chunk, backend.encode_batch(chunk), pruned.encode_batch(chunk)):
            if list(lut[np.array(a.ids, dtype=np.int64)]) != b.ids:
                shutil.rmtree(out)
                raise RuntimeError(f"pruning changed the tokenisation of {t!r}")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (folder / name).exists():
            cfg = json.loads((folder / name).read_text(encoding="utf-8"))
            if isinstance(cfg.get("added_tokens_decoder"), dict):
                cfg["added_tokens_decoder"] = {str(remap[int(k)]): v for k, v in
                                               cfg["added_tokens_decoder"].items()}
            _write_json(out / name, cfg)
    if kind == "WordPiece" and (folder / "vocab.txt").exists():
        (out / "vocab.txt").write_text("\n".join(pieces[i] for i in keep) + "\n", encoding="utf-8")
    if (folder / MANIFEST_NAME).exists():
        shutil.copy2(folder / MANIFEST_NAME, out / MANIFEST_NAME)
    np.save(out / "termnorm_kept_ids.npy", keep)  # pruned id -> original id
    _save_model_into(model, out)
    _refresh_manifest(out, {"step": "prune_vocabulary", "texts": len(uniq),
                            "kept_pieces": int(len(keep)), "original_rows": int(W.shape[0])},
                      derived_from=folder)
    return out
