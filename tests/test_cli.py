"""The command line end to end, as a user runs it (real subprocesses, real files)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo"


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "termnorm.cli", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture(scope="module")
def demo_split(tmp_path_factory):
    """Demo procedure mentions split in two CSV files (train / test)."""
    d = tmp_path_factory.mktemp("cli")
    with open(DEMO / "mentions.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["vocabulary"] == "procedures"]
    for name, part in (("train.csv", rows[::2]), ("test.csv", rows[1::2])):
        with open(d / name, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["mention", "terms"])
            w.writerows([(r["mention"], r["terms"]) for r in part])
    return d, len(rows[1::2])


def test_normalize_on_the_demo_data():
    p = run("normalize", "右侧甲状腺肿瘤切除术", "--k", "5")
    out = p.stdout
    assert "甲状腺[site]" in out and "切除术[type]" in out and "右侧[laterality]" in out
    # five ranked candidates with codes, the chosen one marked
    lines = [ln for ln in out.splitlines() if ln[:3].strip().isdigit()]
    assert len(lines) == 5 and any("*" in ln[:5] for ln in lines)
    j = json.loads(run("normalize", "腹腔镜胆囊切除术+术中胆道造影", "--json").stdout)
    assert j["chosen"] and all(c["codes"] for c in j["candidates"])


def test_normalize_reads_the_mention_in_its_note(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("入院记录：今日行腹腔镜下阑尾切除术（LAX），术后恢复好。\n", encoding="utf-8")
    plain = json.loads(run("normalize", "LAX", "--json").stdout)
    read = json.loads(run("normalize", "LAX", "--json", "--document", str(note)).stdout)
    assert plain["spelled_out"] == "" and plain["chosen"] != ["腹腔镜下阑尾切除术"]
    assert read["mention"] == "LAX" and read["spelled_out"] == "腹腔镜下阑尾切除术"
    assert read["chosen"] == ["腹腔镜下阑尾切除术"]
    assert "(read as: 腹腔镜下阑尾切除术)" in run("normalize", "LAX", "--document", str(note)).stdout
    bad = run("normalize", "LAX", "--document", str(tmp_path / "missing.txt"), check=False)
    assert bad.returncode != 0 and "--document" in bad.stderr and "missing.txt" in bad.stderr


def test_evaluate_recall_and_full_write_every_metric(demo_split, tmp_path):
    d, n_test = demo_split
    common = ["--vocab", str(DEMO / "procedures.csv"), "--train", str(d / "train.csv"), "--test", str(d / "test.csv")]
    run("evaluate", *common, "--stage", "recall", "--report", str(tmp_path / "r.json"))
    r = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    for key in ("n", "accuracy", "micro_f1", "recall_at_10", "recall_at_20", "candidate_recall", "pair_recall",
                "mean_candidates", "mentions_per_second"):
        assert key in r, key
    assert r["n"] == n_test and 0 < r["candidate_recall"] <= 1 and r["mean_candidates"] > 1
    p = run("evaluate", *common, "--stage", "full", "--report", str(tmp_path / "f.json"), "--errors")
    f = json.loads((tmp_path / "f.json").read_text(encoding="utf-8"))
    assert f["stage"] == "full" and f["model_version"].startswith("lexical-gbm-")
    assert len(f["errors"]) == n_test and "accuracy" in p.stdout
    # accuracy by how familiar the gold terms are to the coded history (here: the train file)
    fam = f["by_familiarity"]
    assert list(fam) == ["unseen", "1-2", "3-9", "10+"] and sum(b["n"] for b in fam.values()) == n_test
    assert "accuracy by how many coded mentions carry the rarest gold term (all gold among the candidates)" in p.stdout
    # a mention right is a mention whose gold was among its candidates
    assert all(b["candidate_recall"] >= b["accuracy"] for b in fam.values() if b["n"])
    assert f["accuracy"] >= r["accuracy"]  # the fitted ranker is no worse than recall order on the demo


def test_train_lexical_save_and_evaluate_with_model(demo_split, tmp_path):
    d, n_test = demo_split
    run("train", "lexical", "--vocab", str(DEMO / "procedures.csv"), "--train", str(d / "train.csv"),
        "--out", str(tmp_path / "m"), "--export-ranker", str(tmp_path / "r.joblib"),
        "--recall-profile", "deep", "--max-candidates", "6", "--rule-metric", "micro_f1")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text(encoding="utf-8"))
    assert cfg["format"] == "termnorm-pipeline/1" and len(cfg["train_sha256"]) == 64
    assert cfg["output_rule_metric"] == "micro_f1"
    assert cfg["surface_diff"] is True and "surface-diff" in cfg["stages"]
    assert cfg["term_classifier"] is True and "term-classifier" in cfg["stages"] and "clf" in cfg["score_keys"]
    assert (cfg["ranker_ensemble"], cfg["context_features"], cfg["part_count"]) == (1, True, True)
    assert cfg["history_extras"] == []
    assert (tmp_path / "r.joblib").stat().st_size > 0
    run("evaluate", "--model", str(tmp_path / "m"), "--test", str(d / "test.csv"), "--stage", "full",
        "--report", str(tmp_path / "e.json"))
    e = json.loads((tmp_path / "e.json").read_text(encoding="utf-8"))
    assert e["n"] == n_test and 1 < e["mean_candidates"] <= 6  # the saved pipeline keeps its candidate budget
    run("train", "lexical", "--vocab", str(DEMO / "procedures.csv"), "--train", str(d / "train.csv"),
        "--out", str(tmp_path / "m2"), "--no-surface-diff", "--no-term-classifier", "--bag", "2", "--seed", "5",
        "--ensemble", "2", "--no-context-features", "--no-part-count", "--history-extras", "analogy,key")
    cfg = json.loads((tmp_path / "m2" / "config.json").read_text(encoding="utf-8"))
    assert cfg["history_extras"] == ["analogy", "key"]
    assert (cfg["ranker_ensemble"], cfg["context_features"], cfg["part_count"]) == (2, False, False)
    assert cfg["surface_diff"] is False and "surface-diff" not in cfg["stages"]
    assert cfg["term_classifier"] is False and "term-classifier" not in cfg["stages"]
    assert "diff" not in cfg["score_keys"] and "clf" not in cfg["score_keys"]
    assert cfg["ranker_bag"] == 2
    p = run("train", "lexical", "--vocab", str(DEMO / "procedures.csv"), "--train", str(d / "train.csv"),
            "--out", str(tmp_path / "m3"), "--bag", "0", check=False)
    assert p.returncode == 2 and "--bag: must be at least 1, got 0" in p.stderr
    p = run("train", "lexical", "--vocab", str(DEMO / "procedures.csv"), "--train", str(d / "train.csv"),
            "--out", str(tmp_path / "m3"), "--history-extras", "key,knn", check=False)
    assert p.returncode == 2 and "unknown history strategies ['knn']; known: key, analogy" in p.stderr
    assert not (tmp_path / "m3").exists()


def test_a_cold_start_ranker_fitted_with_a_history_mix_weighs_history_and_serves_a_new_vocabulary(demo_split,
                                                                                                     tmp_path):
    """A cold-start ranker measured in docs/benchmarks.md: --cold-start --history-mix exports a ranker whose
    features include history recall and the history's size (and no term classifier, which a new vocabulary
    lacks), and a fresh engine of the vocabulary serves it with the coders' history; without --cold-start it is
    refused."""
    from termnorm.engine import Engine
    from termnorm.fitting import HISTORY_MIX
    from termnorm.loaders import load_labelled, load_vocabulary

    d, _ = demo_split
    run("train", "lexical", "--cold-start", "--history-mix", "--no-context-features", "--vocab",
        str(DEMO / "procedures.csv"), "--train", str(d / "train.csv"), "--out", str(tmp_path / "m"),
        "--export-ranker", str(tmp_path / "r.joblib"))
    cfg = json.loads((tmp_path / "m" / "config.json").read_text(encoding="utf-8"))
    assert cfg["fit_options"]["with_history"] == list(HISTORY_MIX) and cfg["fit_options"]["folds"] == len(HISTORY_MIX)
    assert {"history", "history_jaccard", "history_size"} <= set(cfg["score_keys"]) and "clf" not in cfg["score_keys"]
    vocab = load_vocabulary(DEMO / "procedures.csv")
    coded = load_labelled(d / "train.csv", vocab).mentions
    eng = Engine(vocab, history=coded)
    assert eng.use_pretrained_ranker(tmp_path / "r.joblib")
    got = eng.suggest_batch([m.text for m in coded])
    assert all(set(s.chosen) == set(m.terms) for s, m in zip(got, coded))  # the sieve answers what was coded
    p = run("train", "lexical", "--history-mix", "--vocab", str(DEMO / "procedures.csv"), "--train",
            str(d / "train.csv"), "--out", str(tmp_path / "m2"), check=False)
    assert p.returncode == 2 and "--history-mix is a way of fitting a --cold-start ranker" in p.stderr


def test_encoder_command_takes_build_and_refuses_anything_else():
    p = run("encoder", "build", "--help")  # the documented spelling reaches the builder's own options
    assert "--prune-to" in p.stdout and "--add-chars-from" in p.stdout
    for args in (("encoder",), ("encoder", "frobnicate")):
        p = run(*args, check=False)
        assert p.returncode == 2 and "usage: termnorm encoder build" in p.stderr


def test_malformed_vocabulary_names_file_and_row(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("code,name\n06.3100,甲状腺病损切除术\n,没有编码的名称\n", encoding="utf-8")
    p = run("normalize", "甲状腺", "--vocab", str(bad), check=False)
    assert p.returncode == 2
    assert "bad.csv" in p.stderr and "row 3" in p.stderr and "Traceback" not in p.stderr
