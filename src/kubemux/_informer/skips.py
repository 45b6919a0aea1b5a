"""What an informer skipped (a line, an object, a row or a column it could not use): counted,
the latest kept for status, and logged without flooding: the first at once, then a summary at
most once per period (a server streaming junk must not fill the log)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from .._wire.types import skip_reason

__all__ = ["Skips"]


class Skips:
    """The skip record of one informer, named ``name`` in the log."""

    __slots__ = (
        "_last",
        "_log",
        "_logged_at",
        "_resource",
        "_unlogged",
        "count",
        "latest",
        "name",
        "period",
    )

    def __init__(
        self, name: Callable[[], str], resource: str, period: float, log: logging.Logger
    ) -> None:
        self.name = name  # "context/key", as the informer's log records start (asked when logged)
        self.period = period  # skip_log_period
        self._log = log
        self.count = 0
        self.latest: tuple[str, float] | None = None  # (reason, wall clock), for status
        self._resource = resource
        self._unlogged = 0  # skipped since the last log record
        self._last = ""  # what the log says of the last skip
        self._logged_at = -math.inf

    def add(self, why: str, detail: str = "") -> None:
        """Count one skip; ``why`` (which names it, when it can be named) goes to the status,
        ``why`` and ``detail`` (a short preview) to the log."""
        self.count += 1
        self.latest = (skip_reason(why, self._resource), time.time())
        if detail:
            why = f"{why}: {detail}"
        now = time.monotonic()
        if now - self._logged_at < self.period:
            self._unlogged += 1
            self._last = why
            return
        self.flush(now)
        self._logged_at = now
        self._log.warning("%s: skipped %s", self.name(), why)

    def flush(self, now: float | None = None) -> None:
        """Log the summary of skips not logged yet, if the period is over."""
        if not self._unlogged:
            return
        now = time.monotonic() if now is None else now
        period = now - self._logged_at
        if period < self.period:
            return
        self._log.warning(
            "%s: skipped %d malformed lines or objects in the last %.0f s (latest: %s)",
            self.name(),
            self._unlogged,
            period,
            self._last,
        )
        self._unlogged = 0
        self._logged_at = now
