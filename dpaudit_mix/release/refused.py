"""A release the gate refuses: where it stopped and why (exit 3 for a failed check, 2 for bad input)."""

from __future__ import annotations

from ..base.errors import EXIT_VIOLATION


class Refused(Exception):
    """A check failed (exit 3) or the input is bad (exit 2); ``stage`` says where."""

    def __init__(self, stage: str, reason: str, exit_code: int = EXIT_VIOLATION, private: str = "") -> None:
        super().__init__(reason)
        self.stage, self.reason, self.exit_code = stage, reason, exit_code
        self.private = private  # said to the user, never written into the (publishable) folder
