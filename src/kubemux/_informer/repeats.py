"""A warning that a retry loop repeats, logged once per period with a count.

An informer or a context that keeps failing the same way (a deleted CA file, a server that
answers 500) logged the same WARNING at every retry: ~50 identical lines before anybody could
read the first. :class:`RepeatedWarning` logs a text the first time, then the same text at
most once per ``period`` seconds, saying how many times it came meanwhile; a different text
is logged at once. What is counted is the text without what changes at every attempt (the
retry delay, the failure's number), which the caller passes apart.
"""

from __future__ import annotations

import logging
import math
import time

__all__ = ["WARNING_PERIOD", "RepeatedWarning"]

WARNING_PERIOD = 60.0
"""Seconds between two log lines of one repeated warning."""


class RepeatedWarning:
    """One retry loop's warnings (see the module)."""

    __slots__ = ("_at", "_log", "_repeats", "_text", "period")

    def __init__(self, log: logging.Logger, period: float = WARNING_PERIOD) -> None:
        self._log = log
        self.period = period
        self._text: str | None = None  # the last text logged
        self._at = -math.inf  # when
        self._repeats = 0  # how many times it came since, not logged

    def warning(self, text: str, detail: str = "") -> bool:
        """Log ``text`` (and ``detail``, what changes from one attempt to the next) unless
        the same text was logged less than ``period`` ago; True if it was logged."""
        now = time.monotonic()
        if text == self._text and now - self._at < self.period:
            self._repeats += 1
            return False
        suffix = detail
        if text == self._text and self._repeats:
            suffix += f" (the same {self._repeats} more times in the last {now - self._at:.0f}s)"
        self._log.warning("%s%s", text, suffix)
        self._text, self._at, self._repeats = text, now, 0
        return True

    def reset(self) -> None:
        """The loop got through: the next failure is news."""
        self._text, self._at, self._repeats = None, -math.inf, 0
