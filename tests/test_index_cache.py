"""Vocabulary indexes built once (termnorm.index_cache): a second engine on the same vocabulary loads them from
disk and answers the same; any change to the vocabulary builds new ones; a damaged file is rebuilt."""

from __future__ import annotations

import time

from termnorm import index_cache
from termnorm.demo import demo_mentions, demo_vocabulary
from termnorm.engine import Engine
from termnorm.records import LabelledMention


def answers(eng):
    return [(s.chosen, [c.term for c in s.candidates]) for s in eng.suggest_batch([m.text for m in demo_mentions()[:30]])]


def test_a_second_engine_on_the_same_vocabulary_loads_its_indexes(monkeypatch):
    monkeypatch.setattr(index_cache, "CACHE_FROM", 100)  # the demo vocabulary (a few hundred names) counts as large
    folder = index_cache.cache_folder()
    built = Engine(demo_vocabulary())
    files = list(folder.glob("*.joblib"))
    assert len(files) == 1
    calls = []
    with monkeypatch.context() as m:
        m.setattr("termnorm.engine.build_vocab_strategies", lambda *a, **k: calls.append(a) or [])
        again = Engine(demo_vocabulary())
    assert calls == []  # nothing built: the strategies came from the file
    assert answers(again) == answers(built) and again.tagger.words() == built.tagger.words()
    # a vocabulary that differs by one synonym, or by a term coded history adds, is another key
    v = demo_vocabulary()
    v.add_synonym(v.names[0], "一个新的同义词")
    keys = {index_cache.content_key(demo_vocabulary()), index_cache.content_key(v)}
    assert len(keys) == 2
    with_history = Engine(demo_vocabulary(), history=[LabelledMention("某手术", ["医院自定义术语"])])
    assert "医院自定义术语" in with_history.vocabulary and len(list(folder.glob("*.joblib"))) == 2
    # a damaged file is rebuilt, not served
    newest = max(folder.glob("*.joblib"), key=lambda p: p.stat().st_mtime)
    newest.write_bytes(b"not a pickle")
    time.sleep(0.01)
    rebuilt = Engine(demo_vocabulary(), history=[LabelledMention("某手术", ["医院自定义术语"])])
    assert answers(rebuilt) == answers(with_history) and newest.stat().st_size > 100


def test_small_vocabularies_are_not_cached():
    Engine(demo_vocabulary())
    assert not index_cache.cache_folder().exists() or not list(index_cache.cache_folder().glob("*.joblib"))
