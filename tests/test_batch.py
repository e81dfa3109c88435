"""Batch pre-coding (``termnorm normalize --input --output``): streaming, de-duplication, resume after kill -9,
bad rows, every format, and the same output on a local Ray with two engine actors. Real engine, real files."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import pytest

from termnorm import batch as batch_mod
from termnorm.batch import BatchOptions, PrecodeJob
from termnorm.batch_io import NOT_UTF8
from termnorm.engine import demo_mentions
from tests.helpers import REPO, wait_for

MENTIONS = [m.text for m in demo_mentions()]


def write_csv(path, rows, header=("record_id", "mention")):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def many_rows(n_rows: int, n_distinct: int):
    """Record ids and mentions: ``n_distinct`` strings (demo mentions, numbered past the list's end) repeated."""
    texts = [MENTIONS[i % len(MENTIONS)] + ("" if i < len(MENTIONS) else f" {i // len(MENTIONS)}")
             for i in range(n_distinct)]
    return [(f"r{i}", texts[(i * 7) % n_distinct]) for i in range(n_rows)]


def precode(tmp_path, src, out_name, **opts):
    opts.setdefault("progress", False)
    return PrecodeJob(src, tmp_path / out_name, {}, BatchOptions(**opts)).run()


def test_a_file_larger_than_a_chunk_is_streamed_every_row_written_each_string_coded_once(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_mod, "LOOKUP", 7)  # several lookups per chunk as well
    rows = many_rows(23_000, 60)  # more than four 5,000-row write chunks
    src = write_csv(tmp_path / "in.csv", rows)
    stats = precode(tmp_path, src, "out.csv", keep=["record_id"], batch_size=16)
    assert stats["rows"] == stats["written"] == 23_000 and stats["distinct"] == 60 and stats["coded_now"] == 60
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out["record_id"]) == [r for r, _ in rows] and list(out["mention"]) == [m for _, m in rows]
    assert list(out["row"].astype(int)) == list(range(2, 23_002))  # the file's line numbers (header = row 1)
    counts = pd.Series([m for _, m in rows]).value_counts()
    assert (out["mention_rows"].astype(int) == out["mention"].map(counts)).all()
    # the same string gets the same result on every row; results are the engine's own
    assert out.groupby("mention")["chosen_terms"].nunique().max() == 1
    from termnorm.engine import Engine

    eng = Engine.from_demo()
    first = out.drop_duplicates("mention").head(10)
    for m, terms, conf in zip(first["mention"], first["chosen_terms"], first["confidence"]):
        s = eng.suggest(m, k=5)
        assert terms == " ## ".join(s.chosen) and abs(float(conf) - s.confidence) < 1e-9
    assert not (tmp_path / "out.csv.bad_rows.csv").exists() and not (tmp_path / "out.csv.work" / "bad_rows.csv").exists()
    # a second file with the same engine codes only the strings it has not seen
    write_csv(tmp_path / "in2.csv", rows[:100] + [("new", "腹腔镜下阑尾切除术 新")])
    os.rename(tmp_path / "out.csv.work", tmp_path / "out2.csv.work")
    again = precode(tmp_path, tmp_path / "in2.csv", "out2.csv", keep=["record_id"])
    assert again["coded_now"] == 1 and again["written"] == 101


def test_mentions_are_coded_as_read_in_their_notes(tmp_path):
    """--document-column: TUR in a note that defines it is coded as 经尿道膀胱肿瘤电切术, once for every note that
    reads it so; TUR without a note is another string, coded otherwise; the note column is not copied unless kept."""
    note = "因膀胱肿瘤行经尿道膀胱肿瘤电切术（TUR）。"
    other = "患者3年前行经尿道膀胱肿瘤电切术（TUR），本次复查。" + "很" * 200_000  # over the csv module's cell limit
    src = write_csv(tmp_path / "in.csv", [("a", "TUR", note), ("b", "TUR", ""), ("c", "TUR", other),
                                          ("d", "胆囊切除术", note)], header=("record_id", "mention", "病历"))
    stats = precode(tmp_path, src, "out.csv", keep=["record_id"], document="病历")
    assert stats["distinct"] == 3 and stats["written"] == 4
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert "病历" not in out.columns and list(out["mention"]) == ["TUR", "TUR", "TUR", "胆囊切除术"]
    assert list(out["spelled_out"]) == ["经尿道膀胱肿瘤电切术", "", "经尿道膀胱肿瘤电切术", ""]
    assert list(out["mention_rows"].astype(int)) == [2, 1, 2, 1]
    from termnorm.engine import Engine

    eng = Engine.from_demo()
    in_note, alone = eng.suggest_batch(["TUR", "TUR"], k=5, documents=[note, ""])
    assert out["chosen_terms"][0] == " ## ".join(in_note.chosen) == out["chosen_terms"][2]
    assert out["chosen_terms"][1] == " ## ".join(alone.chosen) != out["chosen_terms"][0]
    # the same work folder with another document column (or none) is refused, not mixed
    with pytest.raises(Exception, match="document column '病历', now None"):
        precode(tmp_path, src, "out.csv", keep=["record_id"])


def test_bad_rows_are_reported_with_their_row_numbers_and_skipped(tmp_path):
    src = tmp_path / "in.csv"
    good = MENTIONS[:3]
    with open(src, "wb") as f:
        f.write("id,mention\n".encode())
        f.write(f"a,{good[0]}\n".encode())
        f.write(b"b,\n")                                    # row 3: empty
        f.write(b"c,\xff\xfe broken bytes\n")               # row 4: not UTF-8
        f.write(f"d,{'x' * 1500}\n".encode())               # row 5: a pasted note
        f.write(b"e\n")                                     # row 6: no mention column
        f.write(f'f,"{good[1]}\n'.encode())                 # rows 7-8: a quoted mention over a line break
        f.write('continued"\n'.encode())
        f.write(f"g,{good[2]}\n".encode())                  # row 9
        f.write(f"h,{good[0]},extra\n".encode())            # row 10: an unquoted comma (a cell too many)
        f.write(f'i,"{good[1]}\n'.encode())                 # row 11: a stray quote that never closes...
        for n in range(12, 17):                             # ...above rows 12-16, which are rows all the same
            f.write(f"r{n},{good[n % 3]}\n".encode())
        f.write(f"j,{good[0]},\n".encode())                 # row 17: an empty cell too many is no problem
    stats = precode(tmp_path, src, "out.jsonl", keep=["id"])
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["row"], r["id"]) for r in out] == [(2, "a"), (9, "g"), *((n, f"r{n}") for n in range(12, 17)), (17, "j")]
    bad = list(csv.DictReader(open(tmp_path / "out.jsonl.bad_rows.csv", encoding="utf-8")))
    assert [(b["row"], b["problem"]) for b in bad] == [
        ("3", "the mention is empty"), ("4", NOT_UTF8),
        ("5", "the mention is 1500 characters long (at most 500)"),
        ("6", "has 1 cell(s), no mention column (mention)"),
        ("7", "the quoted mention holds a line break (2 lines) but must be one line: join them and run the row again"),
        ("10", "has 3 cells but the header 2: an unquoted ',' inside a cell? Quote that cell and run the row again"),
        ("11", 'unbalanced quote (") in this row: fix the quoting and run the row again')]
    assert bad[-1]["mention"] == f'i,"{good[1]}'  # the line as written
    assert batch_mod.summary(stats, "out.jsonl").startswith("out.jsonl: 15 rows read: 8 written")
    assert stats["skipped"] == 7 and stats["written"] == 8
    # a JSON lines input: a broken line is a bad row too, the rest goes through
    jl = tmp_path / "in.jsonl"
    jl.write_text(json.dumps({"mention": good[0]}, ensure_ascii=False) + "\n{not json\n"
                  + json.dumps(good[1], ensure_ascii=False) + "\n", encoding="utf-8")
    precode(tmp_path, jl, "out2.csv")
    assert list(pd.read_csv(tmp_path / "out2.csv")["row"]) == [1, 3]
    bad = list(csv.DictReader(open(tmp_path / "out2.csv.bad_rows.csv", encoding="utf-8")))
    assert bad[0]["row"] == "2" and bad[0]["problem"].startswith("is not JSON")
    # a field asked to be kept must be in the first object, as a CSV column must be in the header
    from termnorm.batch_io import read_rows
    from termnorm.errors import DataFormatError

    with pytest.raises(DataFormatError, match="no field 'id'"):
        next(read_rows(jl, keep=["id"]))


def test_every_format_in_and_out(tmp_path):
    rows = many_rows(40, 12)
    df = pd.DataFrame(rows, columns=["record_id", "Mention"])
    df.to_excel(tmp_path / "in.xlsx", index=False)
    df.to_parquet(tmp_path / "in.parquet", index=False)
    df.to_csv(tmp_path / "in.tsv", sep="\t", index=False)
    results = {}
    for src, out in (("in.xlsx", "a.parquet"), ("in.parquet", "b.xlsx"), ("in.tsv", "c.tsv")):
        precode(tmp_path, tmp_path / src, out, keep=["record_id"])
        path = tmp_path / out
        got = (pd.read_parquet(path) if out.endswith("parquet") else pd.read_excel(path, dtype=str)
               if out.endswith("xlsx") else pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False))
        assert list(got["record_id"]) == list(df["record_id"]) and list(got["mention"]) == list(df["Mention"])
        results[src] = list(got["chosen_codes"].astype(str))
    assert results["in.xlsx"] == results["in.parquet"] == results["in.tsv"]
    with pytest.raises(Exception, match="no column 'visit'"):
        precode(tmp_path, tmp_path / "in.tsv", "d.csv", keep=["visit"])
    with pytest.raises(Exception, match="must be one of"):
        precode(tmp_path, tmp_path / "in.tsv", "d.docx")


def test_xlsx_cells_stored_as_formulas_are_read_as_their_text(tmp_path):
    """Text typed starting with "=" is stored as a formula without a saved value: the mention was skipped as
    empty and the note lost without a word. Both are read as written, and the summary says how many and where."""
    import openpyxl

    wb = openpyxl.Workbook()
    wb.active.append(["record_id", "mention", "病历"])
    wb.active.append(["a", "TUR", "=== 出院小结 === 因膀胱肿瘤行经尿道膀胱肿瘤电切术（TUR）。"])
    wb.active.append(["b", "=胆囊切除术", None])
    wb.active.append(["c", "阑尾切除术", "阑尾炎"])
    wb.save(tmp_path / "in.xlsx")
    stats = precode(tmp_path, tmp_path / "in.xlsx", "out.csv", keep=["record_id"], document="病历")
    assert stats["written"] == 3 and stats["formula_cells"] == 2 and stats["first_formula_row"] == 2
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out["mention"]) == ["TUR", "=胆囊切除术", "阑尾切除术"]
    assert out["spelled_out"][0] == "经尿道膀胱肿瘤电切术"  # the note was read
    assert "2 XLSX cell(s) held a formula without a saved value" in batch_mod.summary(stats, "out.csv")


def _cli(*args):
    return [sys.executable, "-m", "termnorm.cli", "normalize", *args]


def test_a_run_killed_mid_way_continues_where_it_stopped(tmp_path):
    src = write_csv(tmp_path / "in.csv", many_rows(3000, 1500))
    out = tmp_path / "out.csv"
    proc = subprocess.Popen(_cli("--input", str(src), "--output", str(out), "--batch-size", "8", "--quiet"),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def coded():
        try:
            with sqlite3.connect(tmp_path / "out.csv.work" / "coded.sqlite3", timeout=1) as db:
                return db.execute("SELECT COUNT(*) FROM mentions WHERE result IS NOT NULL").fetchone()[0]
        except sqlite3.Error:
            return 0

    wait_for(lambda: coded() >= 40 or proc.poll() is not None, timeout=120)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = coded()
    assert 40 <= before < 1500 and not out.exists()  # no half-written output in its place
    p = subprocess.run(_cli("--input", str(src), "--output", str(out), "--quiet"), cwd=REPO, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "3,000 rows read: 3,000 written (1,500 distinct mentions, " in p.stdout
    assert f"{1500 - before:,} coded in this run" in p.stdout
    # the same file as a run that was never interrupted
    whole = precode(tmp_path, src, "whole.csv")
    assert whole["coded_now"] == 1500
    assert (tmp_path / "whole.csv").read_bytes() == out.read_bytes()
    # settings that change the results do not mix with what was coded before
    p = subprocess.run(_cli("--input", str(src), "--output", str(out), "--k", "3", "--quiet"), cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and "coded with other settings" in p.stderr and "--restart" in p.stderr


def test_ray_with_two_engine_actors_writes_the_same_rows(tmp_path):
    pytest.importorskip("ray", reason="pip install 'ray[data]'")
    src = write_csv(tmp_path / "in.csv", many_rows(900, 300))
    t0 = time.perf_counter()
    single = precode(tmp_path, src, "single.csv", keep=["record_id"], batch_size=32)
    on_ray = precode(tmp_path, src, "ray.csv", keep=["record_id"], batch_size=32, ray="local", actors=2)
    assert single["coded_now"] == on_ray["coded_now"] == 300, time.perf_counter() - t0
    a = pd.read_csv(tmp_path / "single.csv", dtype=str, keep_default_na=False)
    b = pd.read_csv(tmp_path / "ray.csv", dtype=str, keep_default_na=False)
    assert len(a) == 900
    pd.testing.assert_frame_equal(a, b)
    assert on_ray["ray_actors_used"] == 2  # both engine actors (processes of their own) coded part of it
    import ray

    ray.shutdown()


def test_mistakes_are_refused_before_anything_is_written(tmp_path):
    src = write_csv(tmp_path / "in.csv", many_rows(30, 10))
    with pytest.raises(Exception, match="no column 'mentionz'"):
        precode(tmp_path, src, "a.csv", column="mentionz")
    with pytest.raises(Exception, match="has 2 cell\\(s\\), no mention column"):
        precode(tmp_path, src, "b.csv", column="5", header=False)
    with pytest.raises(Exception, match="no folder"):
        precode(tmp_path, src, "missing/c.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # no work folder, no missing/ made
    # a vocabulary replaced at the same path is not mixed with what was coded against the old one
    vocab = tmp_path / "vocab.csv"
    vocab.write_text((REPO / "assets" / "demo" / "procedures.csv").read_text(encoding="utf-8"), encoding="utf-8")
    PrecodeJob(src, tmp_path / "d.csv", {"vocab": str(vocab)}, BatchOptions(progress=False)).run()
    with open(vocab, "a", encoding="utf-8") as f:
        f.write("99.9999,新加的术语,\n")
    with pytest.raises(Exception, match="coded with other settings"):
        PrecodeJob(src, tmp_path / "d.csv", {"vocab": str(vocab)}, BatchOptions(progress=False)).run()
