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
from termnorm.records import MAX_MENTION_CHARS

# a note (--document-column) may be far longer than the csv module's 128 KiB cell limit
csv.field_size_limit(max(csv.field_size_limit(), 32 * 1024 * 1024))

FORMATS = {".csv": "csv", ".tsv": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".xlsx": "xlsx", ".parquet": "parquet"}
NOT_UTF8 = "the mention is not UTF-8 text (shown as GBK would read it): save the file as UTF-8 and run it again"
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
        self.width = len(names) if names is not None else None

    def row(self, row: int, cells, delimiter: str = "") -> InputRow:
        """``delimiter``: of a CSV / TSV row, whose filled cells beyond the header's are a problem (an unquoted
        delimiter inside a cell splits it: the row is reported, not coded cut)."""
        cells = list(cells)
        if self.mention_at >= len(cells):
            return InputRow(row, problem=f"has {len(cells)} cell(s), no mention column ({self.mention_name})")
        extra = extra_cells(cells, self.width, delimiter) if delimiter else None
        if extra:
            return InputRow(row, _text(cells[self.mention_at]).strip(), problem=extra)
        keep = {k: _text(cells[j]) if j < len(cells) else "" for k, j in zip(self.keep, self.keep_at)}
        return _checked(InputRow(row, _text(cells[self.mention_at]).strip(), keep))


def _checked(r: InputRow) -> InputRow:
    if r.problem:
        return r
    if not r.mention:
        r.problem = "the mention is empty"
    elif any("\udc80" <= ch <= "\udcff" for ch in r.mention):
        r.mention = r.mention.encode("utf-8", "surrogateescape").decode("gb18030", errors="replace")
        r.problem = NOT_UTF8
    elif "\n" in r.mention or "\r" in r.mention:
        r.problem = (f"the quoted mention holds a line break ({len(r.mention.splitlines())} lines) but must be one "
                     "line: join them and run the row again")
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
    """Rows of a CSV / TSV file, numbered by the file's line where each starts. A stray ``"`` opens a quoted cell
    that swallows the lines below into one record: a record over several lines is one row (a quoted note with line
    breaks is legitimate) only when none of its later lines reads as a row on its own; otherwise each of its lines
    is read on its own, the one whose quote never closes is reported, and the rest stay rows (the Import page's
    rule, db.imports, streamed here: only the lines of one record are held)."""
    delimiter = "\t" if fmt == "tsv" else ","
    # surrogateescape: one undecodable byte marks its row as bad instead of stopping the whole file
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        taken: list[str] = []  # the physical lines of the record being read

        def lines():
            for ln in f:
                taken.append(ln)
                yield ln

        reader = csv.reader(lines(), delimiter=delimiter)
        cols, line = None, 1
        while True:
            taken.clear()
            try:
                cells, problem = next(reader), ""
            except StopIteration:
                return
            except csv.Error as e:  # e.g. a swallowed record past the field size limit: its lines one by one
                cells, problem = None, f"cannot be read as {fmt.upper()}: {e}"
            start, span = line, list(taken)
            line += len(span)
            if cols is None:
                if cells is None:
                    raise DataFormatError(path, start, f"the first row cannot be read as {fmt.upper()}: {problem}")
                cols = _Columns(path, cells if header else None, column, keep)
                if header:
                    continue
            if cells is not None and (len(span) <= 1 or not _rows_inside(cols, span[1:], delimiter)):
                if any(c.strip() for c in cells):  # a blank line is no row
                    yield cols.row(start, cells, delimiter)
                continue
            for n, ln in enumerate(span, start=start):
                one = line_cells(ln, delimiter)
                if isinstance(one, str):
                    yield InputRow(n, ln.rstrip("\r\n"), problem=one)  # the line as written, in the bad rows file
                elif any(c.strip() for c in one):
                    yield cols.row(n, one, delimiter)


def line_cells(line: str, delimiter: str, again: str = "run the row again") -> list[str] | str:
    """One physical line's cells, or why it cannot be read on its own (a quote that never closes on it): the
    rule this reader and the Import page (db.imports, ``again`` = "import the row again") share."""
    body = line.rstrip("\r\n")
    try:
        # fed with its line break, a cell whose quote never closes ends in that "\n"
        cells = next(csv.reader([body + "\n"], delimiter=delimiter), [])
    except csv.Error as e:  # e.g. a cell over csv.field_size_limit()
        return f"unreadable CSV row ({e})"
    if any("\n" in c for c in cells) or body.count('"') % 2:
        return f'unbalanced quote (") in this row: fix the quoting and {again}'
    return cells


def extra_cells(cells: list, width: int | None, delimiter: str, again: str = "run the row again") -> str | None:
    """Why a CSV / TSV row with filled cells beyond the header's ``width`` is not taken (an unquoted delimiter
    inside a cell split it: taking the row would cut its mention or move its columns), else None."""
    if not width or not any(_text(c).strip() for c in cells[width:]):
        return None
    sign = "tab" if delimiter == "\t" else repr(delimiter)
    return (f"has {len(cells)} cells but the header {width}: an unquoted {sign} inside a cell? Quote that cell "
            f"and {again}")


def _rows_inside(cols: _Columns, continuation: list[str], delimiter: str) -> bool:
    """Whether a later line of a record over several lines reads as a row of the file on its own (as many cells
    as the header, a mention): rows a stray quote swallowed, not a quoted note's lines."""
    width = cols.width or cols.mention_at + 1
    for ln in continuation:
        one = line_cells(ln, delimiter)
        if isinstance(one, list) and len(one) >= width and cols.mention_at < len(one) and one[cols.mention_at].strip():
            return True
    return False


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

