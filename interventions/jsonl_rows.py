"""The detector datasets' file format: one dataclass row per JSON line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from agent.errors import UserFacingError

Row = TypeVar("Row")


def write_rows(rows: Iterable[Any], path: Path) -> None:
    """Write dataclass rows as JSON lines."""
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(asdict(r), ensure_ascii=False) + "\n")


def read_rows(path: Path, row_type: type[Row], what: str) -> Iterator[Row]:
    """Read rows written by write_rows; a clear error names a bad line ("not a WHAT")."""
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield row_type(**json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                raise UserFacingError(f"{path}:{n}: not {what} ({exc})") from None
