"""Reading JSON Lines files whose every line is an object, with errors that name the line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; UserFacingError names the first bad line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserFacingError(f"{path} is not UTF-8 text: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserFacingError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise UserFacingError(f"{path}:{number}: each line must be a JSON object")
        yield number, item
