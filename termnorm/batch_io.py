"""Streaming readers and writers of the batch pre-coding job (``termnorm normalize --input/--output``).

Every reader yields ``InputRow`` one at a time (bounded memory whatever the file's size) with the 1-based row
number a person sees in the file (a header row is row 1 of a table), or the problem that makes the row unusable.
Every writer takes rows chunk by chunk. Formats by extension: .csv .tsv .txt .jsonl .xlsx .parquet.
"""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from termnorm.errors import DataFormatError

# a note (--document-column) may be far longer than the csv module's 128 KiB cell limit
csv.field_size_limit(max(csv.field_size_limit(), 32 * 1024 * 1024))

FORMATS = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".xlsx": "xlsx", ".parquet": "parquet"}
MAX_MENTION_CHARS = 1000  # longer cells are notes or pasted documents, not mentions: reported, not coded
XLSX_MAX_ROWS = 1_048_576  # Excel's sheet limit (a header row included)


@dataclass
class InputRow:
    row: int
    mention: str = ""
    keep: dict = field(default_factory=dict)  # the --keep columns' values, as text
    problem: str = ""
    formulas: int = 0  # XLSX cells of the row holding a formula without a saved value: their text was read


def file_format(path, what: str = "input") -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise DataFormatError(path, None, f"the {what} must be one of {', '.join(sorted(FORMATS))} "
                              f"(by its extension), not {Path(path).suffix or 'no extension'}")
    return fmt


def _text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


class _Columns:
    """Which cell is the mention (a column named ``mention``, else --column, else the first) and which are kept."""

    def __init__(self, path, header: list[str] | None, column: str | None, keep: list[str]):
        self.path, self.keep = path, list(keep)
        names = [(_text(h)).strip() for h in header] if header is not None else None
        lower = [n.lower() for n in names] if names is not None else None

        def find(name: str) -> int:
            if lower is None:
                if name.isdigit() and int(name) >= 1:
                    return int(name) - 1
                raise DataFormatError(path, None, "no header row (--no-header), so name columns by number "
                                                  f"(1 = first), not {name!r}")
            if name.lower() in lower:
                return lower.index(name.lower())
            raise DataFormatError(path, None, f"no column {name!r}; the header has {', '.join(map(repr, names))}")

        if column:
            self.mention_at = find(column)
        elif lower is not None and "mention" in lower:
            self.mention_at = lower.index("mention")
        else:
            self.mention_at = 0
        self.keep_at = [find(k) for k in self.keep]
        self.mention_name = names[self.mention_at] if names else str(self.mention_at + 1)

    def row(self, row: int, cells) -> InputRow:
        cells = list(cells)
        if self.mention_at >= len(cells):
            return InputRow(row, problem=f"has {len(cells)} cell(s), no mention column ({self.mention_name})")
        keep = {k: _text(cells[j]) if j < len(cells) else "" for k, j in zip(self.keep, self.keep_at)}
        return _checked(InputRow(row, _text(cells[self.mention_at]).strip(), keep))


def _checked(r: InputRow) -> InputRow:
    if r.problem:
        return r
    if not r.mention:
        r.problem = "the mention is empty"
    elif any("\udc80" <= ch <= "\udcff" for ch in r.mention):
        r.problem = "the mention is not valid UTF-8 text"
    elif len(r.mention) > MAX_MENTION_CHARS:
        r.problem = f"the mention is {len(r.mention)} characters long (at most {MAX_MENTION_CHARS})"
    return r


def read_rows(path, column: str | None = None, keep: list[str] = (), header: bool = True) -> Iterator[InputRow]:
    """The input's rows, streamed. A format problem of the whole file raises DataFormatError naming it."""
    fmt = file_format(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such input file")
    yield from {"csv": _read_delimited, "tsv": _read_delimited, "jsonl": _read_jsonl, "xlsx": _read_xlsx,
                "parquet": _read_parquet}[fmt](Path(path), fmt, column, list(keep), header)


def _read_delimited(path, fmt, column, keep, header):
    # surrogateescape: one undecodable byte marks its row as bad instead of stopping the whole file
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f, delimiter="\t" if fmt == "tsv" else ",")
        cols, first = None, True
        while True:
            line = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                yield InputRow(line, problem=f"cannot be read as {fmt.upper()}: {e}")
                continue
            if first:
                first = False
                cols = _Columns(path, cells if header else None, column, keep)
                if header:
                    continue
            if not any(c.strip() for c in cells):
                continue  # a blank line is no row
            yield cols.row(line, cells)


def _read_jsonl(path, fmt, column, keep, header):
    checked = False  # the fields asked for exist in the first object (a CSV's header says so before any row)
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                yield InputRow(line_no, problem=f"is not JSON: {e}")
                continue
            if isinstance(obj, str):
                obj = {"mention": obj}
            if not isinstance(obj, dict) or not obj:
                yield InputRow(line_no, problem="is neither an object nor a string")
                continue
            if not checked:
                checked = True
                absent = [k for k in keep if k not in obj]
                if absent:
                    raise DataFormatError(path, line_no, f"no field {', '.join(map(repr, absent))}; the first object "
                                                         f"has {', '.join(map(repr, obj))}")
            name = column or ("mention" if "mention" in obj else next(iter(obj)))
            if name not in obj:
                yield InputRow(line_no, problem=f"has no field {name!r}")
                continue
            yield _checked(InputRow(line_no, _text(obj[name]).strip(), {k: _text(obj.get(k)) for k in keep}))


def xlsx_rows(source, sheet: int = 0, reset: bool = False) -> Iterator[tuple[int, list, list[int]]]:
    """``(row number, cells, formula columns)`` of one sheet of an XLSX file (a path or its bytes), streamed.
    A cell holding a formula without a saved value (text typed starting with "=", which writers store as a
    formula) reads as empty among the saved values: its formula text is read instead and its 0-based column
    listed. openpyxl gives saved values or formulas, not both: the sheet is streamed twice side by side.
    ``reset``: read every row whatever dimensions the writer stored. Raises what openpyxl raises on a
    damaged file (zipfile / KeyError / InvalidFileException)."""
    import io

    import openpyxl

    def book(data_only):
        return openpyxl.load_workbook(io.BytesIO(source) if isinstance(source, bytes) else source,
                                      read_only=True, data_only=data_only)

    wb = book(True)
    try:
        raw = book(False)
    except Exception:
        wb.close()
        raise
    try:
        ws, written_ws = wb.worksheets[sheet], raw.worksheets[sheet]
        if reset:
            ws.reset_dimensions()
            written_ws.reset_dimensions()
        pairs = zip(ws.iter_rows(values_only=True), written_ws.iter_rows(values_only=True))
        for row_no, (cells, written) in enumerate(pairs, 1):
            cells, at = list(cells), []
            for j, (v, w) in enumerate(zip(cells, written)):
                if v is None and isinstance(w, str) and w.startswith("="):
                    cells[j] = w
                    at.append(j)
            yield row_no, cells, at
    finally:
        wb.close()
        raw.close()


def _read_xlsx(path, fmt, column, keep, header):
    """The first sheet's rows (:func:`xlsx_rows`: formula cells without a saved value read as their text,
    counted in the row's ``formulas``)."""
    rows = xlsx_rows(path)
    try:
        first = next(rows, None)  # the workbook opens here
    except Exception as e:  # openpyxl raises zipfile / KeyError / InvalidFileException on a damaged file
        raise DataFormatError(path, None, f"not a readable XLSX workbook ({type(e).__name__}: {e})") from None
    cols = None
    for row_no, cells, at in itertools.chain([first] if first else [], rows):
        if cols is None:
            cols = _Columns(path, cells if header else None, column, keep)
            if header:
                continue
        if all(c is None or not str(c).strip() for c in cells):
            continue
        r = cols.row(row_no, cells)
        r.formulas = len(at)
        yield r


def _read_parquet(path, fmt, column, keep, header):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:
        raise DataFormatError(path, None, f"not a readable Parquet file ({e})") from None
    names = pf.schema_arrow.names
    cols = _Columns(path, names, column, keep)
    wanted = [names[cols.mention_at]] + [names[j] for j in cols.keep_at]
    row = 0
    for batch in pf.iter_batches(batch_size=10_000, columns=wanted):
        data = [batch.column(i).to_pylist() for i in range(len(wanted))]
        for values in zip(*data):
            row += 1
            yield _checked(InputRow(row, _text(values[0]).strip(), dict(zip(cols.keep, map(_text, values[1:])))))


def count_rows(path, header: bool = True) -> int | None:
    """The rows for the progress bar, cheaply (lines of a text file less its header, rows of a table); a quoted
    cell spanning lines makes it an upper bound."""
    fmt = file_format(path)
    if fmt in ("csv", "tsv", "jsonl"):
        n = 0
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                n += block.count(b"\n")
        return max(0, n - (header and fmt != "jsonl"))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    return None


class RowWriter:
    """Writes output rows chunk by chunk in the format of the path's extension; ``close`` finishes the file."""

    def __init__(self, path, columns: list[str]):
        self.path, self.columns, self.fmt = Path(path), list(columns), file_format(path, "output")
        self._pq = self._wb = None
        if self.fmt == "xlsx":
            import openpyxl

            self._wb = openpyxl.Workbook(write_only=True)
            self._ws = self._wb.create_sheet("precoded")
            self._ws.append(self.columns)
        elif self.fmt != "parquet":
            self._f = open(self.path, "w", encoding="utf-8", newline="")
            if self.fmt in ("csv", "tsv"):
                self._csv = csv.writer(self._f, delimiter="\t" if self.fmt == "tsv" else ",")
                self._csv.writerow(self.columns)

    def write(self, rows: list[dict]) -> None:
        if not rows:
            return
        if self.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist(rows, schema=self._schema(rows))
            if self._pq is None:
                self._pq = pq.ParquetWriter(self.path, table.schema)
            self._pq.write_table(table)
        elif self.fmt == "xlsx":
            for r in rows:
                self._ws.append([r[c] for c in self.columns])
        elif self.fmt == "jsonl":
            self._f.writelines(json.dumps({c: r[c] for c in self.columns}, ensure_ascii=False) + "\n" for r in rows)
        else:
            self._csv.writerows([r[c] for c in self.columns] for r in rows)

    def _schema(self, rows):
        import pyarrow as pa

        if self._pq is not None:
            return self._pq.schema
        ints = {"row", "predicted_count", "mention_rows"}
        types = {**{c: pa.int64() for c in ints}, "confidence": pa.float64()}
        return pa.schema([(c, types.get(c, pa.string())) for c in self.columns])

    def close(self) -> None:
        if self.fmt == "parquet":
            if self._pq is None:  # no row at all: still a valid, empty file
                import pyarrow as pa
                import pyarrow.parquet as pq

                pq.write_table(pa.Table.from_pylist([], schema=self._schema([])), self.path)
            else:
                self._pq.close()
        elif self.fmt == "xlsx":
            self._wb.save(self.path)
        else:
            self._f.flush()
            self._f.close()

