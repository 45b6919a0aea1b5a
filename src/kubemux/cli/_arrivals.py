"""Many contexts answering at their own pace: rows printed as they come, a progress line
while some keep us waiting.

``kubemux get --all-contexts`` over 1,000 contexts printed nothing until the last one
answered (10 s, and one hung context held every row back). Now:

- if every context answers within ``GRACE`` seconds, the output is what it always was: one
  table, contexts in order, columns as wide as their widest cell;
- otherwise, after ``GRACE``, the rows of the contexts that answered are printed (in order),
  then each further context's rows as soon as it answers, lined up as ``get -w`` lines its
  rows up (widths only grow; the columns are the first contexts'). Outputs that are one
  document (``json``, ``yaml``, ``jsonpath``) and several kinds (``get pods,svc``, ``all``)
  still wait for every context;
- while contexts keep the command waiting, a line on stderr every ``PROGRESS_PERIOD`` says
  how many and which (``kubemux: waiting for 3 of 1000 contexts: a, b, c``).

A context whose rows are printed is stopped at once (its informers and session closed), so
the memory held is the contexts still to come, not all of them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TextIO

import anyio
import anyio.abc

from .._redact import terminal_safe
from .._registry.registry import WatcherRegistry
from ._formats import Format
from ._output import TabWriter
from ._tables import Source, TableLayout, by_kind, name_of, object_name, wanted

__all__ = ["GRACE", "PROGRESS_AFTER", "PROGRESS_PERIOD", "Arrivals", "progress"]

GRACE = 1.0  # seconds to wait for every context before printing what came
PROGRESS_AFTER = 2.0  # seconds before the first progress line
PROGRESS_PERIOD = 5.0  # seconds between progress lines


async def progress(contexts: Sequence[str], done: set[str], err: TextIO) -> None:
    """Say on ``err`` which contexts are still awaited, now and then (cancel to stop)."""
    await anyio.sleep(PROGRESS_AFTER)
    while True:
        waiting = [c for c in contexts if c not in done]
        if not waiting:
            return
        names = ", ".join(waiting[:3]) + (
            f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
        )
        err.write(
            terminal_safe(
                f"kubemux: waiting for {len(waiting)} of {len(contexts)} contexts: {names}"
            )
            + "\n"
        )
        err.flush()
        await anyio.sleep(PROGRESS_PERIOD)


class Arrivals:
    """What ``get`` does with each context's views as they come (see the module)."""

    def __init__(
        self,
        registry: WatcherRegistry,
        args: argparse.Namespace,
        fmt: Format,
        contexts: Sequence[str],
        out: TextIO,
        tg: anyio.abc.TaskGroup,
    ) -> None:
        self.registry = registry
        self.args = args
        self.fmt = fmt
        self.contexts = list(contexts)
        self.out = out
        self.tg = tg
        self.waiting: dict[str, list[Source]] = {}  # answered, not printed yet
        self.streaming = False
        self.printed = 0  # lines of rows printed
        self.writer = TabWriter(out)
        self.view: TableLayout | None = None
        self.header_done = fmt.no_headers
        # one document or several kinds: wait for everything
        self.can_stream = fmt.kind in ("table", "wide", "name", "custom-columns")

    def arrived(self, context: str, sources: list[Source]) -> bool:
        """Print a context's rows once streaming, else keep them; True if printed (the
        caller then lets them go: memory is what is still to come)."""
        if not self.streaming:
            self.waiting[context] = sources
            return False
        printed = self._print(sources) if sources else False
        self.tg.start_soon(self.registry.stop_watcher, context)
        return printed

    def start_streaming(self) -> bool:
        """After ``GRACE``: print what came, in order, and stream the rest; False (nothing
        printed) if this output cannot be streamed."""
        ready = [s for c in self.contexts for s in self.waiting.get(c, ())]
        if not self.can_stream or len(by_kind(ready)) > 1:
            return False
        self.streaming = True
        if ready:
            self._print(ready)
        for context in list(self.waiting):
            self.tg.start_soon(self.registry.stop_watcher, context)
        self.waiting.clear()
        return True

    def _print(self, sources: list[Source]) -> bool:
        """Print ``sources``' rows; True if there were any."""
        args, fmt = self.args, self.fmt
        if len(by_kind(sources)) > 1:
            return False  # not one table (a context's discovery said otherwise): left out
        if fmt.kind == "custom-columns":
            rows = [
                [s.context, *fmt.row(obj)]
                for s in sources
                for obj in s.store.list()
                if wanted(args, name_of(obj))
            ]
            head = ["CONTEXT", *fmt.header()]
        elif fmt.kind == "name":
            rows = [
                [object_name(s.resource, r.name)]
                for s in sources
                for r in s.store.rows()
                if wanted(args, r.name)
            ]
            head = []
            self.header_done = True
        else:
            if self.view is None:
                self.view = TableLayout(
                    True, args.all_namespaces, fmt.kind == "wide", "", fmt.labels
                )
                for src in sources:
                    self.view.learn(src.store.columns, src.resource)
            view = self.view
            rows = [
                view.cells(s.context, s.store.columns, r.cells, r.namespace, r.metadata)
                for s in sources
                for r in s.store.rows()
                if wanted(args, r.name)
            ]
            head = view.header()
        if not rows:
            return False
        self.writer.write(rows if self.header_done else [head, *rows])
        self.header_done = True
        self.printed += len(rows)
        return True
