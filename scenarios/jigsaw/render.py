"""Pictures for the agent: arrangements with position numbers, crops and zooms, PNG content parts."""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Callable, Sequence
from typing import Any

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np
    import PIL  # noqa: F401  (imported lazily below; a missing extra shows here, not mid-render)

MAX_SIDE = 1024
"""Largest side, in pixels, of any picture produced by crop/zoom."""
_MAX_DEPTH = 8


class SpecError(ValueError):
    """A picture request from the sandbox is malformed."""


def decorate(image: np.ndarray, grid: int) -> np.ndarray:
    """The arrangement with thin grid lines and each cell's position number at its top-left corner."""
    from PIL import Image, ImageDraw

    height, width = image.shape[:2]
    ph, pw = height // grid, width // grid
    canvas = Image.fromarray(np.ascontiguousarray(image))
    draw = ImageDraw.Draw(canvas)
    font = _font(max(10, min(ph, pw) // 6))
    for k in range(1, grid):
        draw.line([(k * pw, 0), (k * pw, height)], fill=(255, 255, 255), width=1)
        draw.line([(0, k * ph), (width, k * ph)], fill=(255, 255, 255), width=1)
    for position in range(grid * grid):
        row, col = divmod(position, grid)
        x, y = col * pw + 2, row * ph + 2
        label = str(position)
        box = draw.textbbox((x, y), label, font=font)
        draw.rectangle((box[0] - 2, box[1] - 2, box[2] + 2, box[3] + 2), fill=(0, 0, 0))
        draw.text((x, y), label, fill=(255, 255, 0), font=font)
    return np.asarray(canvas)


@functools.lru_cache(maxsize=8)
def _font(size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def render_spec(spec: Any, draw_arrangement: Callable[[list[int]], np.ndarray], labels: Sequence[int]) -> np.ndarray:
    """Render a picture request: {"op": "observe"|"crop"|"zoom", ...}; raises SpecError when malformed."""
    return _render(spec, draw_arrangement, sorted(labels), 0)


def _render(spec: Any, draw: Callable[[list[int]], np.ndarray], labels: list[int], depth: int) -> np.ndarray:
    if depth > _MAX_DEPTH:
        raise SpecError(f"pictures may be nested at most {_MAX_DEPTH} deep")
    if not isinstance(spec, dict):
        raise SpecError("a picture request must be an object")
    op = spec.get("op")
    if op == "observe":
        state = spec.get("state")
        if not isinstance(state, list) or sorted(v for v in state if isinstance(v, int)) != labels or len(state) != len(labels):
            raise SpecError("observation state must list every piece label once")
        return draw(state)
    if op == "crop":
        box = spec.get("box")
        if not isinstance(box, list) or len(box) != 4 or not all(isinstance(v, (int, float)) for v in box):
            raise SpecError("crop box must be four numbers")
        x1, y1, x2, y2 = (float(v) for v in box)
        if not (0.0 <= x1 < x2 <= 1.0 and 0.0 <= y1 < y2 <= 1.0):
            raise SpecError("crop box must satisfy 0 <= x1 < x2 <= 1 and 0 <= y1 < y2 <= 1")
        source = _render(spec.get("src"), draw, labels, depth + 1)
        height, width = source.shape[:2]
        top, bottom = int(y1 * height), max(int(y1 * height) + 1, round(y2 * height))
        left, right = int(x1 * width), max(int(x1 * width) + 1, round(x2 * width))
        return np.ascontiguousarray(source[top:bottom, left:right])
    if op == "zoom":
        factor = spec.get("factor")
        if not isinstance(factor, (int, float)) or not 0.25 <= float(factor) <= 4.0:
            raise SpecError("zoom factor must be from 0.25 to 4")
        return resize(_render(spec.get("src"), draw, labels, depth + 1), float(factor))
    raise SpecError(f"unknown picture operation {op!r}")


def resize(image: np.ndarray, factor: float) -> np.ndarray:
    """The image scaled by factor, capped so that no side exceeds MAX_SIDE."""
    from PIL import Image

    height, width = image.shape[:2]
    factor = min(factor, MAX_SIDE / max(height, width))
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(size, Image.Resampling.BICUBIC))


def to_png(image: np.ndarray) -> bytes:
    """PNG bytes of an RGB array."""
    from PIL import Image

    buffer = io.BytesIO()
    # Level 1: about 2% larger than the default level 6 on photos, and several times faster.
    Image.fromarray(np.ascontiguousarray(image)).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def image_part(image: np.ndarray) -> dict[str, Any]:
    """An OpenAI vision content part carrying the image as a PNG data URL."""
    encoded = base64.b64encode(to_png(image)).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}}
