"""Vocabulary indexes built once: the keyword tagger and the lexical strategies of a large vocabulary are kept on
disk (``indexes/`` in the data directory), keyed by the vocabulary's content, so an app restart or a background job's own engine loads them instead
of building them again (400,000 names: about 50 s to build; benchmarks/large_vocab.py).

The key hashes every name with its codes and synonyms, the keyword folder's files, and :data:`FORMAT` (bumped
when what is cached changes shape). A vocabulary edited in any way gets a new key; old files are removed when
more than :data:`KEEP` are there. Writes go to a temporary file renamed into place, so a crash never leaves a
half-written index behind; an unreadable file is rebuilt. Vocabularies under :data:`CACHE_FROM` names build in
about a second and are not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

FORMAT = 1
CACHE_FROM = 20_000  # names (terms and synonyms)
KEEP = 8  # cached vocabularies kept (the newest used)


def cache_folder() -> Path:
    """indexes/ in the data directory (termnorm settings), beside the database and the models it serves."""
    from termnorm import settings

    return settings.get().data_dir / "indexes"


def n_names(vocabulary) -> int:
    return len(vocabulary) + sum(len(s) for s in vocabulary.synonyms.values())


def content_key(vocabulary, keyword_dir=None, extra=()) -> str:
    h = hashlib.sha256(f"termnorm-index-v{FORMAT}|{vocabulary.language}|{json.dumps(list(extra))}\n".encode())
    for name in vocabulary.names:
        h.update(json.dumps([name, vocabulary.codes.get(name, []), vocabulary.synonyms.get(name, [])],
                            ensure_ascii=False).encode())
        h.update(b"\n")
    if keyword_dir:
        for p in sorted(Path(keyword_dir).rglob("*")):
            if p.is_file():
                h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:32]


def tagger_and_strategies(vocabulary, keyword_dir, build, extra=()):
    """``build()`` -> (tagger, strategies), from the cache when this vocabulary's indexes are there (``extra``:
    more that the result depends on, e.g. the terms coded history added to the vocabulary)."""
    import joblib

    if n_names(vocabulary) < CACHE_FROM:
        return build()
    folder = cache_folder()
    path = folder / f"{content_key(vocabulary, keyword_dir, extra)}.joblib"
    if path.exists():
        try:
            got = joblib.load(path)
            os.utime(path)  # recently used: kept by the clean-up
            return got
        except Exception:  # damaged, or written by an incompatible version: build it again
            path.unlink(missing_ok=True)
    got, tmp = build(), None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        os.close(fd)
        joblib.dump(got, tmp)
        os.replace(tmp, path)
        _clean(folder)
    except OSError:  # a read-only or full disk: serve without the cache
        if tmp:
            Path(tmp).unlink(missing_ok=True)
    return got


def _clean(folder: Path) -> None:
    files = sorted(folder.glob("*.joblib"), key=lambda p: p.stat().st_mtime, reverse=True)
    for p in files[KEEP:]:
        p.unlink(missing_ok=True)
    for p in folder.glob("*.tmp"):  # left by a process killed while writing
        if time.time() - p.stat().st_mtime > 3600:
            p.unlink(missing_ok=True)
