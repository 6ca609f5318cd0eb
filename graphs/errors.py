"""Errors raised by the graphs package; all are user-facing (printed by the CLI without a traceback)."""

from __future__ import annotations

from agent.errors import UserFacingError


class GraphInputError(UserFacingError):
    """A corpus, question, triples or query input is missing or malformed."""


class GraphStoreError(UserFacingError):
    """A saved graph folder is missing, incomplete or corrupted."""


class CheckpointError(UserFacingError):
    """A GFM checkpoint is missing, corrupted or does not match its config."""
