"""Batch pre-coding: ``termnorm normalize --input FILE --output FILE`` over millions of rows.

Three passes, each bounded in memory whatever the input's size:

1. *scan*: stream the input, count each distinct mention string, list the rows that cannot be coded;
2. *code*: code every distinct string not coded yet, in one process or on Ray Data engine actors (``--ray``);
3. *write*: stream the input again and write every row with its string's result, then move the file into place.

The distinct strings and their results live in ``OUTPUT.work/coded.sqlite3`` (stdlib sqlite3: a disk-backed
dictionary is all this needs), committed batch by batch, so an interrupted run continues where it stopped and a
re-run, or a run over a new file with the same engine, codes only strings it has never seen.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from termnorm import reading
from termnorm.batch_io import XLSX_MAX_ROWS, RowWriter, count_rows, file_format, read_rows
from termnorm.errors import DataFormatError

RESULT_COLUMNS = ["mention", "chosen_terms", "chosen_codes", "predicted_count", "confidence", "model_version",
                  "spelled_out", "mention_rows", "candidates"]
LOOKUP = 500  # strings per SELECT ... IN (...) (under SQLite's bound-parameter limit)
# the engine options of termnorm normalize that name files or folders
PATH_OPTIONS = ("vocab", "train", "model", "keywords", "dense", "ranker")
ENGINE_OPTIONS = (*PATH_OPTIONS, "no_split", "recall_profile", "max_candidates", "history_extras")


@dataclass
class BatchOptions:
    column: str | None = None
    keep: list[str] = field(default_factory=list)
    document: str | None = None  # the column holding each row's note: the mention is coded as read in it
    header: bool = True
    k: int = 5
    batch_size: int = 256
    restart: bool = False
    progress: bool = True
    ray: str | None = None  # None: one process; "local": a Ray instance on this machine; else a cluster address
    actors: int = 2
    num_cpus: float = 1.0
    num_gpus: float = 0.0


def result_of(s, vocabulary) -> dict:
    """What the output keeps of one suggestion (the same for every row of the string)."""
    return {"chosen_terms": " ## ".join(s.chosen),
            "chosen_codes": " ## ".join(vocabulary.export_code(t) or "" for t in s.chosen),
            "predicted_count": int(s.predicted_count), "confidence": float(s.confidence),
            "model_version": s.model_version, "spelled_out": s.spelled_out,
            "candidates": json.dumps([[c.term, c.code or "", round(float(c.score), 6)] for c in s.candidates],
                                     ensure_ascii=False)}


def code_strings(engine, texts: list[str], k: int) -> list[str]:
    """JSON results for ``texts``; a string the engine fails on gets ``{"error": ...}`` instead of stopping all."""
    try:
        return [json.dumps(result_of(s, engine.vocabulary), ensure_ascii=False)
                for s in engine.suggest_batch(texts, k=k)]
    except Exception:
        if len(texts) == 1:
            raise
    out = []
    for t in texts:
        try:
            out.extend(code_strings(engine, [t], k))
        except Exception as e:
            out.append(json.dumps({"error": f"the engine failed on it: {type(e).__name__}: {e}"}))
    return out


def _progress(total, desc, enabled, unit="mentions"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=f" {unit}", disable=not enabled, file=sys.stderr, smoothing=0.1)


class PrecodeJob:
    def __init__(self, input_path, output_path, engine_options: dict, options: BatchOptions):
        self.input, self.output = Path(input_path), Path(output_path)
        self.engine_options, self.opt = dict(engine_options), options
        file_format(self.input)
        file_format(self.output, "output")
        if not self.input.is_file():
            raise FileNotFoundError(f"{self.input}: no such input file")
        if self.input.resolve() == self.output.resolve():
            raise DataFormatError(self.output, None, "the output would overwrite the input")
        if not self.output.parent.is_dir():
            raise DataFormatError(self.output, None, f"no folder {self.output.parent}")
        # the columns asked for exist (before anything is written): the first row says so
        self._read_keep = list(dict.fromkeys([*options.keep, *([options.document] if options.document else [])]))
        first = next(read_rows(self.input, options.column, self._read_keep, options.header), None)
        if first is not None and first.problem.startswith("has "):
            raise DataFormatError(self.input, first.row, first.problem)
        self.work = Path(str(self.output) + ".work")
        self.bad_path = Path(str(self.output) + ".bad_rows.csv")
        self._engine = None
        self.stats: dict = {}

    # ---- the cache of coded strings --------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self.opt.restart and self.work.exists():
            for p in self.work.iterdir():
                p.unlink()
        self.work.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.work / "coded.sqlite3")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS mentions (id INTEGER PRIMARY KEY, text TEXT UNIQUE NOT NULL, "
                   "rows INTEGER NOT NULL DEFAULT 0, result TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        key = json.dumps({"engine": self.engine_options, "files": _fingerprints(self.engine_options), "k": self.opt.k,
                          **({"document": self.opt.document} if self.opt.document else {})}, sort_keys=True)
        had = db.execute("SELECT value FROM meta WHERE key = 'engine'").fetchone()
        if had and had[0] != key:
            db.close()
            before, now = json.loads(had[0]), json.loads(key)
            what = {"engine": "other engine options", "files": "the vocabulary / model files changed since",
                    "k": f"--k {before.get('k')}",
                    "document": f"document column {before.get('document')!r}, now {now.get('document')!r}"}
            differ = "; ".join(w for k, w in what.items() if before.get(k) != now.get(k))
            raise DataFormatError(self.work, None, f"coded with other settings ({differ}); run with --restart to "
                                                   "code everything again with these, or pick another --output")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('engine', ?)", (key,))
        db.commit()
        return db

    def engine(self):
        if self._engine is None:
            self._engine = build_engine_from(self.engine_options)
        return self._engine

    def _rows(self):
        """(input row, the text it is coded as): the mention, or with --document-column the mention as read in
        its note (termnorm.reading.in_document: the abbreviations the note defines spelled out), so rows whose
        notes read it alike share one coding and PAF in two notes meaning two things are coded apart."""
        doc = self.opt.document
        for r in read_rows(self.input, self.opt.column, self._read_keep, self.opt.header):
            if not doc:
                yield r, r.mention
                continue
            note = r.keep[doc] if doc in self.opt.keep else r.keep.pop(doc, "")
            yield r, (reading.in_document(self.engine(), r.mention, note) if note and not r.problem else r.mention)

    def run(self) -> dict:
        t0 = time.perf_counter()
        db = self._open()
        try:
            self._scan(db)
            self._code(db)
            self._write(db)
        finally:
            db.close()
        self.stats["seconds"] = round(time.perf_counter() - t0, 2)
        return self.stats

    # ---- 1. scan ----------------------------------------------------------------------------------
    def _input_key(self) -> str:
        st = self.input.stat()
        return json.dumps([str(self.input.resolve()), st.st_size, st.st_mtime_ns, self.opt.column, self.opt.header,
                           self.opt.document])

    def _scan(self, db) -> None:
        done = db.execute("SELECT value FROM meta WHERE key = 'scanned'").fetchone()
        if done and done[0] == self._input_key():
            self.stats["scan"] = "kept from the earlier run"
            return
        bar = _progress(count_rows(self.input, self.opt.header), "scan", self.opt.progress, "rows")
        rows = bad = formulas = 0
        first_formula = None
        db.execute("UPDATE mentions SET rows = 0")
        buf: dict[str, int] = {}
        for r, key in self._rows():
            rows += 1
            bar.update(1)
            if r.formulas:
                formulas += r.formulas
                first_formula = first_formula or r.row
            if r.problem:
                bad += 1
                continue
            buf[key] = buf.get(key, 0) + 1
            if len(buf) >= 50_000:
                self._count(db, buf)
        self._count(db, buf)
        bar.close()
        db.execute("INSERT OR REPLACE INTO meta VALUES ('scanned', ?)", (self._input_key(),))
        db.commit()
        self.stats.update(rows=rows, bad_input_rows=bad, formula_cells=formulas, first_formula_row=first_formula)

    @staticmethod
    def _count(db, buf: dict) -> None:
        db.executemany("INSERT INTO mentions (text, rows) VALUES (?, ?) "
                       "ON CONFLICT(text) DO UPDATE SET rows = rows + excluded.rows", buf.items())
        buf.clear()

    # ---- 2. code ----------------------------------------------------------------------------------
    def _code(self, db) -> None:
        pending = db.execute("SELECT COUNT(*) FROM mentions WHERE result IS NULL AND rows > 0").fetchone()[0]
        self.stats["distinct"] = db.execute("SELECT COUNT(*) FROM mentions WHERE rows > 0").fetchone()[0]
        self.stats["coded_now"] = pending
        if not pending:
            return
        bar = _progress(pending, "code", self.opt.progress)
        t0 = time.perf_counter()
        if self.opt.ray:
            from termnorm.batch_ray import code_on_ray

            code_on_ray(self, db, bar)
        else:
            size = self.opt.batch_size
            while True:
                page = db.execute("SELECT id, text FROM mentions WHERE result IS NULL AND rows > 0 ORDER BY id "
                                  "LIMIT ?", (size,)).fetchall()
                if not page:
                    break
                results = code_strings(self.engine(), [t for _, t in page], self.opt.k)
                self._store(db, [(res, i) for (i, _), res in zip(page, results)])
                bar.update(len(page))
        bar.close()
        self.stats["code_seconds"] = round(time.perf_counter() - t0, 2)

    @staticmethod
    def _store(db, pairs) -> None:
        db.executemany("UPDATE mentions SET result = ? WHERE id = ?", pairs)
        db.commit()

    # ---- 3. write ---------------------------------------------------------------------------------
    def _write(self, db) -> None:
        columns = ["row", *self.opt.keep, *RESULT_COLUMNS]
        fmt = file_format(self.output, "output")
        if fmt == "xlsx" and self.stats.get("rows", 0) >= XLSX_MAX_ROWS:
            raise DataFormatError(self.output, None, f"{self.stats['rows']:,} rows do not fit an XLSX sheet "
                                  f"({XLSX_MAX_ROWS - 1:,} at most); write .parquet, .csv or .jsonl instead")
        partial = self.work / f"output.partial{self.output.suffix}"
        writer = RowWriter(partial, columns)
        bar = _progress(count_rows(self.input, self.opt.header), "write", self.opt.progress, "rows")
        written = seen = 0
        with open(self.work / "bad_rows.csv", "w", encoding="utf-8", errors="backslashreplace", newline="") as bf:
            bad = csv.writer(bf)
            bad.writerow(["row", "problem", "mention"])
            chunk: list = []
            for r in self._rows():
                chunk.append(r)
                if len(chunk) >= 5000:
                    written += self._write_chunk(db, chunk, writer, bad)
                    seen += len(chunk)
                    bar.update(len(chunk))
                    chunk = []
            written += self._write_chunk(db, chunk, writer, bad)
            seen += len(chunk)
            bar.update(len(chunk))
        bar.close()
        writer.close()
        os.replace(partial, self.output)
        self.stats.update(written=written, skipped=seen - written)
        if self.stats["skipped"]:
            os.replace(self.work / "bad_rows.csv", self.bad_path)
            self.stats["bad_rows_file"] = str(self.bad_path)
        else:
            (self.work / "bad_rows.csv").unlink()  # an empty report is no report
            self.bad_path.unlink(missing_ok=True)  # an earlier run's report of rows that are fine now

    def _write_chunk(self, db, chunk, writer, bad) -> int:
        texts = sorted({key for r, key in chunk if not r.problem})
        found: dict[str, tuple[int, str | None]] = {}
        for s in range(0, len(texts), LOOKUP):
            part = texts[s:s + LOOKUP]
            q = f"SELECT text, rows, result FROM mentions WHERE text IN ({','.join('?' * len(part))})"
            found.update((t, (n, res)) for t, n, res in db.execute(q, part))
        out = []
        for r, key in chunk:
            n, res = found.get(key, (0, None))
            problem = r.problem or ("was not coded (the run stopped before it)" if res is None else "")
            data = json.loads(res) if res and not problem else {}
            problem = problem or data.get("error", "")
            if problem:
                bad.writerow([r.row, problem, r.mention])
                continue
            if key != r.mention:  # read in its note: say how (the coded text's own spelling out, if any, first)
                data["spelled_out"] = data.get("spelled_out") or key
            out.append({"row": r.row, **r.keep, "mention": r.mention, "mention_rows": n, **data})
        writer.write(out)
        return len(out)


def _fingerprints(engine_options: dict) -> dict:
    """Size and modification time of every file the engine is built from (a folder: of each file in it), so a
    vocabulary or model replaced at the same path does not mix with what the work folder coded before."""
    out = {}
    for key in PATH_OPTIONS:
        path = engine_options.get(key)
        if not path or not Path(path).exists():
            continue
        files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
        out[key] = [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    return out


def build_engine_from(options: dict):
    """An engine from the data options of ``termnorm normalize`` (a plain dict, so Ray can ship it to actors)."""
    import argparse

    from termnorm.cli import build_engine

    defaults = dict(vocab=None, train=None, model=None, keywords=None, no_split=False, dense=None, ranker=None,
                    recall_profile="wide", max_candidates=None, history_extras=())
    return build_engine(argparse.Namespace(**{**defaults, **options}), progress=False)


def summary(stats: dict, output) -> str:
    read = stats.get("written", 0) + stats.get("skipped", 0)  # every row of the input is one or the other
    lines = [f"{output}: {read:,} rows read: {stats.get('written', 0):,} written "
             f"({stats.get('distinct', 0):,} distinct mentions, {stats.get('coded_now', 0):,} coded in this run), "
             f"{stats.get('skipped', 0):,} skipped, in {stats.get('seconds', 0):.1f} s"]
    if stats.get("formula_cells"):
        lines.append(f"{stats['formula_cells']:,} XLSX cell(s) held a formula without a saved value (text typed "
                     f"starting with '='), read as their text; the first in row {stats['first_formula_row']}")
    if stats.get("skipped"):
        lines.append(f"{stats['skipped']:,} rows skipped: their row numbers and problems are in "
                     f"{stats['bad_rows_file']}")
    return "\n".join(lines)
