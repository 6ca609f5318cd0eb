"""Jigsaw actions available to code in the sandbox. Sandbox preamble: the host sends this file's source to the worker.

The sandbox worker runs this file before its limits apply and binds `emit` (send plain data to
the host) and `user_namespace` (the agent code's namespace). Every call records an event that
the host replays on the real puzzle: swaps move pieces, images are rendered by the host, answer
ends the episode. The host re-sends the true state before each step, so the copy kept here is
only what the agent's code sees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # What the worker binds before running this file (tools/sandbox_worker.py, Worker.host).
    def emit(event: Any) -> None: ...
    def user_namespace() -> dict[str, Any]: ...

EXPORTS = ["swap", "observation", "crop", "zoom", "answer"]
_MAX_ZOOM = 4.0
_MIN_ZOOM = 0.25
_MIN_CROP = 0.02
_puzzle: dict = {"grid": 0, "state": [], "view": None, "answered": False}


class _Image:
    """A picture the host renders: the arrangement, or a crop or zoom of another picture."""

    def __init__(self, spec: dict) -> None:
        self._spec = spec

    def __repr__(self) -> str:
        return "<image: " + _describe(self._spec) + ">"


def _describe(spec: dict) -> str:
    if spec["op"] == "observe":
        return "arrangement " + str(spec["state"])
    if spec["op"] == "crop":
        return "crop " + str(spec["box"]) + " of " + _describe(spec["src"])
    return "zoom x" + str(spec["factor"]) + " of " + _describe(spec["src"])


def _begin(grid: int, state: list) -> None:
    """New episode: forget the agent's variables and load the scrambled state."""
    namespace = user_namespace()
    for name in [n for n in namespace if not n.startswith("__") and n not in EXPORTS]:
        del namespace[name]
    _puzzle["answered"] = False
    _sync(grid, state)


def _sync(grid: int, state: list) -> None:
    """Load the host's true state before a step; `state` in the agent's namespace is a fresh copy."""
    _puzzle["grid"] = grid
    _puzzle["state"] = list(state)
    _puzzle["view"] = list(state)
    namespace = user_namespace()
    namespace["state"] = _puzzle["view"]
    # Code that rebound a helper name (`answer = 1`) gets the helper back on the next step.
    for name in EXPORTS:
        namespace[name] = globals()[name]


def _position(value: object, name: str) -> int:
    size = _puzzle["grid"] * _puzzle["grid"]
    if type(value) is not int or not 0 <= value < size:
        raise ValueError(f"swap: {name} must be a position from 0 to {size - 1}, got {value!r}")
    return value


def swap(i: int, j: int) -> None:
    """Exchange the pieces at positions i and j (positions run row by row from 0 at the top left)."""
    if _puzzle["answered"]:
        raise RuntimeError("swap: the puzzle was already answered")
    i, j = _position(i, "i"), _position(j, "j")
    state = _puzzle["state"]
    state[i], state[j] = state[j], state[i]
    # The agent's copy follows only while it is still the list observation() gave it.
    view = user_namespace().get("state")
    if view is _puzzle["view"] and view is not None and len(view) == len(state):
        view[i], view[j] = view[j], view[i]
    emit({"op": "swap", "i": i, "j": j})


def observation(state: list | None = None) -> _Image:
    """The picture of an arrangement (default: the current one); it becomes the next observation."""
    if state is None:
        state = _puzzle["state"]
    if not isinstance(state, (list, tuple)) or sorted(state) != sorted(_puzzle["state"]):
        raise ValueError("observation: state must list every piece label once, like the `state` variable")
    return _show({"op": "observe", "state": list(state)})


def crop(img: _Image, box: list) -> _Image:
    """A region of a picture; box = [x1, y1, x2, y2] as fractions (0 to 1) of its width and height."""
    if not isinstance(img, _Image):
        raise TypeError("crop: img must be a picture from observation(), crop() or zoom()")
    if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in box
    ):
        raise ValueError("crop: box must be [x1, y1, x2, y2] with numbers from 0 to 1")
    x1, y1, x2, y2 = (float(v) for v in box)
    if not (0.0 <= x1 < x2 <= 1.0 and 0.0 <= y1 < y2 <= 1.0):
        raise ValueError("crop: need 0 <= x1 < x2 <= 1 and 0 <= y1 < y2 <= 1")
    if x2 - x1 < _MIN_CROP or y2 - y1 < _MIN_CROP:
        raise ValueError(f"crop: the box must be at least {_MIN_CROP} wide and high")
    return _show({"op": "crop", "src": img._spec, "box": [x1, y1, x2, y2]})


def zoom(img: _Image, factor: float) -> _Image:
    """A picture scaled by factor (0.25 to 4)."""
    if not isinstance(img, _Image):
        raise TypeError("zoom: img must be a picture from observation(), crop() or zoom()")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not _MIN_ZOOM <= factor <= _MAX_ZOOM:
        raise ValueError(f"zoom: factor must be a number from {_MIN_ZOOM} to {_MAX_ZOOM}")
    return _show({"op": "zoom", "src": img._spec, "factor": float(factor)})


def answer() -> None:
    """Submit the current arrangement; the episode ends after this step."""
    _puzzle["answered"] = True
    emit({"op": "answer"})


def _show(spec: dict) -> _Image:
    emit({"op": "image", "spec": spec})
    return _Image(spec)
