"""The GPU cross-encoder scripts (benchmarks/gpu): resumable training and out-of-sample score selection.

The scripts run on a GPU machine at full size; here they train a tiny real BERT on the CPU.
"""

from __future__ import annotations

import gzip
import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu import kar_cv, train_kar  # noqa: E402
from termnorm.encoder.tiny import make_tiny_encoder  # noqa: E402
from termnorm.text.keywords import KeywordTagger  # noqa: E402

TERMS = ["甲状腺病损切除术", "甲状腺全切除术", "胃造口术", "阑尾切除术", "胆囊切除术", "肾上腺切除术",
         "乳房病损切除术", "腹腔镜胆囊切除术"]
MENTIONS = ["右侧甲状腺肿瘤切除术", "甲状腺全切", "经皮胃造口", "阑尾切除", "胆囊切除术后", "左肾上腺切除",
            "乳腺肿物切除", "腹腔镜下胆囊切除", "甲状腺肿物切除术", "开腹阑尾切除"]
GOLD = [0, 1, 2, 3, 4, 5, 6, 7, 0, 3]


@pytest.fixture
def bundle(tmp_path) -> Path:
    """A bundle as kar_cv.py collect writes it: two mentions per CV part, every term a candidate."""
    b = tmp_path / "bundle"
    make_tiny_encoder(b / "encoder", TERMS + MENTIONS, hidden=32, layers=2)
    mentions = [{"text": m, "terms": [TERMS[g]], "part": i % 5, "cands": TERMS} for i, (m, g) in
                enumerate(zip(MENTIONS, GOLD))]
    pairs = sorted((m, t) for m in MENTIONS for t in TERMS)
    part = {m["text"]: m["part"] for m in mentions}
    need = [[c for c, (a, bb) in enumerate(kar_cv.PAIRS) if part[m] in (a, bb)] for m, _ in pairs]
    doc = {"set": "tiny", "parts": 5, "pairs_models": kar_cv.PAIRS, "vocab": TERMS, "mentions": mentions,
           "pairs": [list(p) for p in pairs], "need": need}
    with gzip.open(b / "tiny.json.gz", "wt", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    (b / "tiny_tagger.pkl").write_bytes(pickle.dumps(KeywordTagger.builtin()))
    return b


def _args(bundle, out, *extra):
    return ["--bundle", str(bundle), "--out", str(out), "--sets", "tiny", "--epochs", "1", "--batch-size", "8",
            "--workers", "0", "--max-length", "32", "--score-batch", "16", *extra]


def test_training_resumes_where_the_last_run_stopped(bundle, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert train_kar.main(_args(bundle, first, "--models", "0,1")) == 0
    run1 = np.load(first / "tiny_scores.npz")
    assert run1["done"].tolist() == [True, True] + [False] * 8
    with gzip.open(bundle / "tiny.json.gz", "rt", encoding="utf-8") as f:
        need = json.load(f)["need"]
    for col in range(10):
        scored = ~np.isnan(run1["scores"][:, col].astype(np.float32))
        expect = np.array([col in n for n in need]) if col < 2 else np.zeros(len(need), dtype=bool)
        assert (scored == expect).all(), col

    assert train_kar.main(_args(bundle, second, "--resume", str(first))) == 0
    run2 = np.load(second / "tiny_scores.npz")
    assert run2["done"].all()
    # the first run's models are kept, not trained again
    assert np.array_equal(run2["scores"][:, :2], run1["scores"][:, :2], equal_nan=True)
    log = json.loads((second / "tiny_train.json").read_text(encoding="utf-8"))
    assert [m["model"] for m in log["models"]] == list(range(10))
    probs = run2["scores"].astype(np.float32)
    assert np.nanmin(probs) >= 0 and np.nanmax(probs) <= 1


def test_a_run_out_of_time_stops_before_a_model_and_says_how_to_go_on(bundle, tmp_path, capsys):
    out = tmp_path / "out"
    assert train_kar.main(_args(bundle, out, "--budget-min", "0")) == 0
    assert "--resume" in capsys.readouterr().out
    assert not np.load(out / "tiny_scores.npz")["done"].any()


def test_each_fold_reads_only_models_that_never_saw_the_mention():
    parts = {"a": [0], "b": [2], "c": [2, 3], "d": [1, 2, 4]}
    cols = lambda text, k: sorted(kar_cv.PAIRS[c] for c in kar_cv.FoldScores({}, np.zeros((0, 10)), parts, k)
                                  .columns(text))
    # outer fold 0 tests on part 0: its test mention by the four models without part 0
    assert cols("a", 0) == [(0, 1), (0, 2), (0, 3), (0, 4)]
    # a training mention of part 2 in fold 0: the model without parts 0 and 2 only
    assert cols("b", 0) == [(0, 2)]
    # a text in parts 2 and 3, tested in fold 3: the one model without either part
    assert cols("c", 3) == [(2, 3)]
    # a text in a part the engine does not know: the fold's four models
    assert cols("zzz", 4) == [(0, 4), (1, 4), (2, 4), (3, 4)]
    table = kar_cv.FoldScores({("a", "t"): 0}, np.array([[0.2, 0.4, 0.6, 0.8] + [np.nan] * 6], dtype=np.float32),
                              parts, 0)
    assert table.score(["a", "a"], [["t"], ["u"]])[0][0] == pytest.approx(0.5)
    assert np.isnan(table.score(["a"], [["u"]])[0][0]) and table.missing == 2


def test_an_outer_fold_is_measured_only_when_its_four_models_are_trained():
    # models in kar_cv.PAIRS order: (0,1) (0,2) (0,3) (0,4) first, so the official split (fold 0) comes first
    assert kar_cv.complete_folds([True] * 4 + [False] * 6) == [0]
    assert kar_cv.complete_folds([True] * 9 + [False]) == [0, 1, 2]
    assert kar_cv.complete_folds([True] * 10) == [0, 1, 2, 3, 4]


def test_batches_built_by_worker_processes_score_the_same(bundle, tmp_path):
    """RankerModel.score_pairs(workers=2), as train_kar.py scores on a GPU machine, against one process."""
    runs = {}
    for w in ("0", "2"):
        args = _args(bundle, tmp_path / f"w{w}", "--models", "3")
        args[args.index("--workers") + 1] = w
        assert train_kar.main(args) == 0
        runs[w] = np.load(tmp_path / f"w{w}" / "tiny_scores.npz")["scores"]
    assert np.array_equal(runs["0"], runs["2"], equal_nan=True) and (~np.isnan(runs["2"][:, 3].astype(float))).any()
