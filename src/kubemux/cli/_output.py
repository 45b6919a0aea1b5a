"""Shared by the commands: logging, one-line errors, aligned tables, terminal-safe text."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import orjson

from .._errors import KubemuxError
from .._redact import redact_text, terminal_safe
from .._wire.ages import human_duration

KUBECONFIG_HELP = (
    "kubeconfig path(s), os.pathsep-separated (default: $KUBECONFIG or ~/.kube/config)"
)
LEVELS = ("debug", "info", "warning", "error", "critical")

log = logging.getLogger(__name__)


class CommandError(Exception):
    """A problem the command reports as one line (not a kubemux error)."""


class SafeFormatter(logging.Formatter):
    """``kubemux: LEVEL: message``, with URL userinfo redacted and control characters
    escaped (in the message and in any traceback)."""

    def __init__(self) -> None:
        super().__init__("kubemux: %(levelname)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return terminal_safe(redact_text(super().formatMessage(record)))

    def formatException(self, ei: Any) -> str:
        return terminal_safe(redact_text(super().formatException(ei)), newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return terminal_safe(redact_text(super().formatStack(stack_info)), newlines=True)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is now (tests swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


class _StartupFilter(logging.Filter):
    """While a command starts, the library's warnings are held back: the command reports
    the same failure itself, once (as its error, or in its status table)."""

    quiet = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.quiet or record.levelno >= logging.ERROR:
            return True
        name = record.name
        if name == "kubemux.cli" or name.startswith("kubemux.cli."):  # the command's own
            return True
        return not (name == "kubemux" or name.startswith("kubemux."))


_STARTUP = _StartupFilter()


def configure_logging(verbose: int = 0, level: str | None = None) -> None:
    """Log to stderr through :class:`SafeFormatter`: ``verbose`` 1 is info, 2 is debug;
    ``level`` (``KUBEMUX_LOG``) applies when it says more. Idempotent."""
    wanted = logging.WARNING
    if level is not None:
        wanted = getattr(logging, level.upper())
    if verbose:
        wanted = min(wanted, logging.INFO if verbose == 1 else logging.DEBUG)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    handler = _StderrHandler()
    handler.setFormatter(SafeFormatter())
    handler.addFilter(_STARTUP)
    root.addHandler(handler)
    logging.getLogger("kubemux").setLevel(wanted)
    root.setLevel(min(logging.WARNING, wanted) if wanted <= logging.DEBUG else logging.WARNING)


@contextlib.contextmanager
def startup(verbose: int) -> Iterator[None]:
    """Hold the library's warnings back while a command starts, or while it shows a table
    that holds the same errors (unless ``-v``)."""
    if verbose:
        yield
        return
    _STARTUP.quiet = True
    try:
        yield
    finally:
        _STARTUP.quiet = False


REPORTED = (KubemuxError, ValueError, OSError, CommandError)
PIPE_CLOSED = "pipe closed"
OUTCOME: set[str] = set()


def is_closed_pipe(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError)
        and exc.errno in (errno.EPIPE, errno.ECONNRESET)
        and not isinstance(exc, KubemuxError)
    )


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail noisily."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass


def report(exc: BaseException, err: TextIO) -> None:
    print(f"kubemux: error: {terminal_safe(redact_text(_one_line(exc)))}", file=err)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _one_line(exc.exceptions[0])
    return " ".join(str(exc).split()) or type(exc).__name__


def state_text(state: object) -> str:
    """A state's text, whether a plain string or a ``str`` enum member."""
    return str(getattr(state, "value", state))


MAX_CELL_WIDTH = 1000
"""The most characters a table cell prints (``get``, ``get -w``, ``status``); a longer one
is cut and ends in ``...``. kubectl does not cut cells, but a server's cell can be
megabytes, and with columns padded to the widest cell one such cell would widen every
line (a 30 MB cell: 60 MB printed). ``-o json|yaml`` print the objects whole."""


def fit_cell(text: str, limit: int = MAX_CELL_WIDTH) -> str:
    """``text`` terminal-safe (see :func:`terminal_safe`) and at most ``limit`` characters
    (counted after escaping); a longer one is cut to end in ``...``. Costs O(limit), never
    O(len(text))."""
    safe = terminal_safe(text[: limit + 1])
    if len(safe) <= limit:
        return safe
    return safe[: limit - 3] + "..."


def table(header: list[str], rows: list[list[str]]) -> str:
    """Aligned columns; every cell shown terminal-safe (its control characters escaped)
    and at most :data:`MAX_CELL_WIDTH` characters."""
    header = [fit_cell(c) for c in header]
    rows = [[fit_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
        for r in [header, *rows]
    )


class TabWriter:
    """kubectl's tabwriter: columns as wide as their widest cell plus 3 spaces (at least 6),
    the last column unpadded; widths are remembered and only grow, so the rows ``get -w``
    prints one at a time stay aligned with the ones before (``RememberWidths``). Every cell
    is shown terminal-safe and cut to :data:`MAX_CELL_WIDTH` characters (kubectl does not
    cut; one huge cell would otherwise pad every line to its width)."""

    PADDING = 3
    MIN_WIDTH = 6

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.widths: list[int] = []

    def remember(self, rows: list[list[str]]) -> None:
        for row in rows:
            for i, cell in enumerate(row[:-1]):
                width = max(self.MIN_WIDTH, len(fit_cell(cell)) + self.PADDING)
                if i < len(self.widths):
                    self.widths[i] = max(self.widths[i], width)
                else:
                    self.widths.append(width)

    def write(self, rows: list[list[str]]) -> None:
        self.remember(rows)
        for row in rows:
            safe = [fit_cell(c) for c in row]
            cells = [c.ljust(w) for c, w in zip(safe[:-1], self.widths, strict=False)]
            self.out.write("".join(cells) + (safe[-1] if safe else "") + "\n")
        self.out.flush()


def cell_text(value: Any, kind: str = "string") -> str:
    """A Table cell as kubectl prints it; a ``date`` cell holding a timestamp (the
    client-side fallback's Age) becomes an age. Shown terminal-safe, at most
    :data:`MAX_CELL_WIDTH` characters."""
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)  # as Go prints a whole float64 (1e308 stays 1e+308)
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if isinstance(value, int | float):
        text = str(value)
    if kind == "date" and len(text) >= 20 and text[4:5] == "-" and text[10:11] == "T":
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            text = human_duration((dt.datetime.now(dt.UTC) - when).total_seconds())
    return fit_cell(text)
