"""What every benchmark script does with its figures: write them as JSON next to the others."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path, result) -> Path:
    """Write ``result`` to ``path`` (folders created, UTF-8, numpy scalars as floats) and say where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, ensure_ascii=False, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"written to {path}")
    return path
