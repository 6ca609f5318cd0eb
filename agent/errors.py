"""Errors shared by rein's commands and runtime."""

from __future__ import annotations


class UserFacingError(RuntimeError):
    """An error caused by the user's input or environment; the CLI prints it without a traceback."""


class ThreadBusy(UserFacingError):
    """A turn could not run because another turn holds its thread (in this process or another).

    Raised before the turn touches the thread when the wait (`Agent(thread_wait_s=...)`) runs out,
    and at a step boundary when a turn finds it has lost its thread's lease to another process.
    """

    def __init__(self, thread_id: str, detail: str) -> None:
        super().__init__(f"thread {thread_id!r} is busy: {detail}")
        self.thread_id = thread_id
        """The thread that was busy."""
        self.detail = detail
        """What held it, and how long this turn waited."""
