"""benchmarks/gpu/dense_cv.py and termnorm.dense.table: per-fold bi-encoders trained where a GPU is, their
answers brought back as tables, and the CV's dense row recalled from the tables.

The GPU run trains e5-small at full length; here a tiny real BERT trains a few steps on the CPU, on the demo
procedures in Yidu-N7K's layout, through the same code."""

import copy
import gzip
import json
import pickle
import sys
from pathlib import Path

import pytest

from tests.helpers import tiny_yidu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HOSPITAL_TERM = "甲状腺次全切除术（本院）"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The bundle collected, and folds 0 and 1 trained with their models kept (fold 2 left for later)."""
    from benchmarks.gpu import dense_cv
    from termnorm.encoder.tiny import make_tiny_encoder

    import pandas as pd

    tmp = tmp_path_factory.mktemp("dense")
    data = tiny_yidu(tmp / "data")
    for f in ("train.xlsx", "val.xlsx"):  # a hospital's own name coded in every fold: the engine adds it as a term
        rows = pd.read_excel(data / "yidu-n7k" / f, dtype=str)
        rows.loc[len(rows)] = ["左甲状腺次全切", HOSPITAL_TERM]
        rows.to_excel(data / "yidu-n7k" / f, index=False)
    assert dense_cv.main(["collect", "--data", str(data), "--sets", "yidu", "--work", str(tmp / "work"),
                          "--no-encoder"]) == 0
    with gzip.open(tmp / "work" / "bundle" / "yidu_dense.pkl.gz", "rb") as f:
        doc = pickle.load(f)
    make_tiny_encoder(tmp / "enc", [*doc["vocab"].names, *doc["queries"]], hidden=32, layers=2)
    train = ["train", "--bundle", str(tmp / "work" / "bundle"), "--out", str(tmp / "out"), "--encoder",
             str(tmp / "enc"), "--sets", "yidu", "--epochs", "1", "--batch-size", "8", "--max-steps", "3",
             "--device", "cpu", "--save-models"]
    assert dense_cv.main([*train, "--folds", "0,1"]) == 0
    return {"data": data, "doc": doc, "out": tmp / "out", "train": train, "tmp": tmp}


def test_the_bundle_holds_each_folds_training_mentions_and_every_text_the_union_asks(trained):
    from benchmarks.cv import outer_fold
    from termnorm.loaders import load_labelled, load_vocabulary

    doc, data = trained["doc"], trained["data"] / "yidu-n7k"
    vocab = load_vocabulary(data / "code.txt")
    train, val = load_labelled(data / "train.xlsx", vocab).mentions, load_labelled(data / "val.xlsx", vocab).mentions
    assert doc["vocab"].names == vocab.names and doc["k"] == 10
    for k in range(5):
        assert [m.text for m in doc["folds"][k]] == [m.text for m in outer_fold(train, val, k)[0]]
    texts = {m.text for m in [*train, *val]}
    assert texts <= set(doc["queries"]) and len(doc["queries"]) == len(set(doc["queries"]))
    # the parts of a split mention are asked too: the demo holds 'a；b' mentions
    assert len(doc["queries"]) > len(texts)


def test_a_table_answers_what_the_live_encoder_answers_and_refuses_what_it_lacks(trained):
    from termnorm.dense.biencoder import BiEncoder
    from termnorm.dense.index import DenseRecaller
    from termnorm.dense.table import DenseTable
    from termnorm.recall.history import add_history_terms
    from termnorm.vocabulary import Vocabulary

    doc, out = trained["doc"], trained["out"]
    assert sorted(p.name for p in out.glob("*.npz")) == ["yidu_fold0.npz", "yidu_fold1.npz"]
    report = json.loads((out / "yidu_fold0.json").read_text(encoding="utf-8"))
    assert report["steps"] == 3 and report["queries"] == len(doc["queries"]) and report["gpu"] == "cpu"
    assert report["names_added_from_history"] == 1 and HOSPITAL_TERM not in doc["vocab"]
    assert report["timing"]["steps_per_s"] > 0 and [e["steps"] for e in report["epochs"]] == [3]
    served = copy.deepcopy(doc["vocab"])  # as the engine serves it: the fold's coded names it lacked added last
    add_history_terms(served, doc["folds"][0])
    assert served.names[-1] == HOSPITAL_TERM
    live = DenseRecaller(BiEncoder.from_folder(out / "yidu_fold0_model", device="cpu"), use_history=False)
    live.fit(served)
    table = DenseTable(out / "yidu_fold0.npz").fit(served)
    assert table.unindexed == 0
    queries = [*doc["queries"][:40], "左甲状腺次全切"]
    for a, b in zip(live.recall_batch(queries, 10), table.recall_batch(queries, 10)):
        assert [t for t, _ in a] == [t for t, _ in b]
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-5)
    with pytest.raises(KeyError, match="1 of 2 query texts are not in the table"):
        table.recall_batch([queries[0], "不在表中的文字"], 10)
    with pytest.raises(ValueError, match="holds 10"):
        table.recall_batch(queries[:1], 11)
    served.add_term("胆囊切除术（本院）")  # a name added after the table was written: read, never answered
    assert DenseTable(out / "yidu_fold0.npz").fit(served).unindexed == 1
    with pytest.raises(ValueError, match="another vocabulary"):  # the vocabulary without the fold's name
        DenseTable(out / "yidu_fold0.npz").fit(doc["vocab"])
    other = Vocabulary(name="other")
    other.add_term("胆囊切除术")
    with pytest.raises(ValueError, match="another vocabulary"):
        DenseTable(out / "yidu_fold0.npz").fit(other)


def test_training_continues_with_the_folds_that_have_no_table(trained):
    from benchmarks.gpu import dense_cv

    out = trained["out"]
    before = (out / "yidu_fold0.npz").stat().st_mtime_ns
    assert dense_cv.main([*trained["train"], "--folds", "0,1,2", "--budget-min", "30"]) == 0
    assert (out / "yidu_fold0.npz").stat().st_mtime_ns == before  # kept, not trained again
    assert (out / "yidu_fold2.npz").is_file()


def test_the_cv_dense_row_from_tables_gives_the_live_encoders_answers(trained):
    """The whole CV fold (recall, ranker fit, answers) with each fold's table gives, mention by mention, what the
    same fold with its live encoder gives: nothing the pipeline asks is missing from the tables."""
    import benchmarks.cv as cv

    tmp, out = trained["tmp"], trained["out"]
    base = ["--data", str(trained["data"]), "--sets", "yidu", "--folds", "0", "--jobs", "1"]  # one fold says it
    assert cv.main([*base, "--rows", "shipped,dense", "--dense", str(out / "yidu_fold{k}_model"),
                    "--out", str(tmp / "live.json")]) == 0
    assert cv.main([*base, "--rows", "dense", "--dense", str(out / "yidu_fold{k}.npz"),
                    "--against", f"{tmp / 'live.json'}:dense", "--out", str(tmp / "table.json")]) == 0
    live = json.loads((tmp / "live.json").read_text(encoding="utf-8"))["results"]["yidu"]["rows"]["dense"]
    res = json.loads((tmp / "table.json").read_text(encoding="utf-8"))["results"]["yidu"]
    assert res["rows"]["dense"]["answers"] == live["answers"]
    vs = res["against"]["rows"]["dense"]
    assert vs["right_only_here"] == vs["right_only_there"] == 0


def test_recall_alone_of_a_table_is_its_encoders_recall(trained):
    """``dense_cv.py recall`` reads each table's recall on its fold's test mentions; the model that wrote the
    table, run live, gives the same figures."""
    from benchmarks.gpu import dense_cv

    out, tmp = trained["out"], trained["tmp"]
    assert dense_cv.main(["recall", "--data", str(trained["data"]), "--out", str(out), "--sets", "yidu",
                          "--folds", "0", "--encoder", str(out / "yidu_fold0_model"),
                          "--json", str(tmp / "recall.json")]) == 0
    (row,) = json.loads((tmp / "recall.json").read_text(encoding="utf-8"))["folds"]
    assert row["test"]["mentions"] > 10 and row["training"]["mentions"] > 10
    assert row["test"]["recall@1"] <= row["test"]["recall@10"]
    assert row["encoder_test"] == row["test"]


@pytest.mark.parametrize("objective", ["batch_hard", "triplet_online"])
def test_each_objective_trains_a_fold_into_its_own_folder(trained, objective):
    """``--objective`` reaches the trainer (its report names it) and each objective's tables go to their own OUT."""
    from benchmarks.gpu import dense_cv

    out = trained["tmp"] / objective
    args = [a if a != str(trained["out"]) else str(out) for a in trained["train"]]
    assert dense_cv.main([*args, "--folds", "0", "--objective", objective]) == 0
    report = json.loads((out / "yidu_fold0.json").read_text(encoding="utf-8"))
    assert report["settings"]["objective"] == objective and report["steps"] == 3
    assert (out / "yidu_fold0.npz").is_file() and not (out / "yidu_fold1.npz").exists()


def test_an_encoder_trained_on_the_vocabulary_alone_is_trained_once_and_writes_every_fold_s_table(trained,
                                                                                                  monkeypatch):
    """``--data vocab`` (NCBI disease's MEDIC synonyms): the encoder learns synonym -> name pairs, never a mention,
    so one training serves every fold; each fold still gets its own table and report."""
    import numpy as np

    import termnorm.dense.train as dense_train
    from benchmarks.gpu import dense_cv

    tmp, doc = trained["tmp"], copy.deepcopy(trained["doc"])
    for name in doc["vocab"].names[:8]:  # synonyms in the encoder's characters: the name less its last one
        doc["vocab"].add_synonym(name, name[:-1])
    bundle = tmp / "vocab_bundle"
    bundle.mkdir()
    with gzip.open(bundle / "yidu_dense.pkl.gz", "wb") as f:
        pickle.dump(doc, f)
    calls = []
    real = dense_train.train_biencoder
    monkeypatch.setattr(dense_train, "train_biencoder", lambda *a, **kw: calls.append(a[3]) or real(*a, **kw))
    out = tmp / "vocab_out"
    args = [a if a != str(trained["out"]) else str(out) for a in trained["train"]]
    args[args.index(str(tmp / "work" / "bundle"))] = str(bundle)
    assert dense_cv.main([*args, "--folds", "0,1", "--data", "vocab"]) == 0
    assert [c.data for c in calls] == ["vocab"] and not calls[0].count_head  # trained once, on synonyms
    reports = [json.loads((out / f"yidu_fold{k}.json").read_text(encoding="utf-8")) for k in (0, 1)]
    assert [r["trained_for_fold"] for r in reports] == [0, 0] and reports[1]["settings"]["data"] == "vocab"
    assert reports[0]["train_mentions"] != reports[1]["train_mentions"]  # the folds' own reports
    one, two = (np.load(out / f"yidu_fold{k}.npz") for k in (0, 1))
    assert (one["ids"] == two["ids"]).all() and one["ids"].shape[0] == len(doc["queries"])
    labelled = np.load(trained["out"] / "yidu_fold0.npz")  # the mention-trained encoder answers otherwise
    assert not np.array_equal(labelled["scores"], one["scores"])


def test_throughput_times_recall_rerank_and_count_for_each_batch_size(trained):
    """``benchmarks/gpu/throughput.py`` on the bundle: every timed mention recalled, its k terms re-ranked by the
    keyword-attentive cross-encoder and counted, per batch size; the report says on what it ran."""
    from benchmarks.gpu import throughput

    tmp = trained["tmp"]
    bundle, doc = tmp / "work" / "bundle", trained["doc"]
    assert throughput.main(["--bundle", str(bundle), "--encoder", str(tmp / "enc"), "--set", "yidu",
                            "--data", str(trained["data"]), "--device", "cpu", "--batches", "1,4",
                            "--mentions", "20", "--k", "5", "--out", str(tmp / "speed.json")]) == 0
    report = json.loads((tmp / "speed.json").read_text(encoding="utf-8"))
    assert report["device"] == "cpu" and report["gpu"] == "cpu" and report["k"] == 5
    assert report["setup"]["terms"] == len(doc["vocab"].names)
    one, four = report["rows"]
    assert (one["batch"], one["mentions"], one["batches"]) == (1, 2, 2)  # batch 1 times a tenth of --mentions
    assert (four["batch"], four["mentions"], four["batches"]) == (4, 20, 5)
    for row in report["rows"]:
        assert row["pairs"] == 5 * row["mentions"]  # k terms of every mention re-ranked
        assert row["mentions_per_s"] > 0 and all(v > 0 for v in row["stage_seconds"].values())
    assert (bundle / "yidu_tagger.pkl").is_file()  # the tagger the device reads, written on the CPU side
