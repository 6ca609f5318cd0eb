"""Errors shared by rein's commands and runtime."""

from __future__ import annotations


class UserFacingError(RuntimeError):
    """An error caused by the user's input or environment; the CLI prints it without a traceback."""
