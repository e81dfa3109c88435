"""Errors that name the file, the row and the problem."""

from __future__ import annotations


class DataFormatError(ValueError):
    """A malformed input file.

    ``row`` is 1-based as a person counts lines / spreadsheet rows (``None``
    when the problem concerns the whole file).
    """

    def __init__(self, path, row: int | None, problem: str):
        self.path = str(path)
        self.row = row
        self.problem = problem
        where = f"{self.path}, row {row}" if row is not None else self.path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # a worker process (Ray, a process pool) sends it back pickled: keep its three fields
        return type(self), (self.path, self.row, self.problem)
