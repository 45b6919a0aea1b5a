"""Every context's answer to one question (what it serves, its namespaces), for the pickers.

Asking 1,000 contexts on every request took 2-3 s per call: the answers are kept instead
(:class:`Answers`), each context's asked again in the background once it is older than the
question's ``ttl``, ``FAN_OUT`` at a time, in the app's task group (the hub's). A request
waits at most ``ANSWER_WAIT`` for contexts never asked before, then answers with what it
has and names the rest as ``pending`` (the page asks again). A context that leaves the
kubeconfig is forgotten. A mounted app (no lifespan, no task group) asks in the request,
within ``sync_timeout``, as before.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from kubemux import KubemuxError

from .._redact import redact_text
from ._broadcast import Hub

__all__ = ["ANSWER_WAIT", "FAN_OUT", "Answers", "Gathered"]

T = TypeVar("T")

FAN_OUT = 16  # contexts asked at once
ANSWER_WAIT = 0.1  # seconds a request waits for contexts not answered yet


class Gathered(Generic[T]):
    """What a request gets: the contexts (kubeconfig order), their answers, their errors,
    and the contexts not answered yet."""

    __slots__ = ("answers", "contexts", "errors", "pending")

    def __init__(self, contexts: list[str], answers: dict[str, T], errors: dict[str, str]) -> None:
        self.contexts = contexts
        self.answers = answers
        self.errors = errors
        self.pending = [c for c in contexts if c not in answers and c not in errors]


class Answers(Generic[T]):
    """The kept answers of every context to ``ask(context)``.

    ``peek(context)``, when given, answers at once from what runs (a live store) and
    ``ask`` is only used where it returns None.
    """

    def __init__(
        self,
        ask: Callable[[str], Awaitable[T]],
        *,
        ttl: float,
        peek: Callable[[str], T | None] | None = None,
    ) -> None:
        self._ask = ask
        self._peek = peek
        self._ttl = ttl
        self._answers: dict[str, tuple[float, T]] = {}
        self._errors: dict[str, tuple[float, str]] = {}
        self._busy: set[str] = set()
        self._limiter = anyio.CapacityLimiter(FAN_OUT)
        self._progress = anyio.Event()

    def __len__(self) -> int:
        return len(self._answers) + len(self._errors)

    async def gather(self, contexts: list[str], hub: Hub, sync_timeout: float) -> Gathered[T]:
        """Every context's answer as known now (refreshing old ones in the background),
        waiting at most ``ANSWER_WAIT`` for those never answered."""
        alive = set(contexts)
        for gone in [c for c in self._answers if c not in alive]:
            del self._answers[gone]
        for gone in [c for c in self._errors if c not in alive]:
            del self._errors[gone]
        answers: dict[str, T] = {}
        stale: list[str] = []
        now = time.monotonic()
        for context in contexts:
            value = self._peek(context) if self._peek is not None else None
            if value is not None:
                answers[context] = value
                continue
            at = max(
                (self._answers[context][0] if context in self._answers else -1.0),
                (self._errors[context][0] if context in self._errors else -1.0),
            )
            if now - at > self._ttl and context not in self._busy:
                stale.append(context)
        if not hub.is_running:  # a mounted app: ask now, within the request
            with anyio.move_on_after(sync_timeout):
                async with anyio.create_task_group() as tg:
                    for context in stale:
                        self._busy.add(context)
                        tg.start_soon(self._refresh, context)
        else:
            for context in stale:
                self._busy.add(context)
                hub.start_soon(self._refresh, context)
            with anyio.move_on_after(ANSWER_WAIT):
                while any(c in self._busy and c not in self._answers for c in contexts):
                    await self._progress.wait()
        for context in contexts:
            if context not in answers and context in self._answers:
                answers[context] = self._answers[context][1]
        errors = {c: self._errors[c][1] for c in contexts if c in self._errors and c not in answers}
        return Gathered(contexts, answers, errors)

    async def _refresh(self, context: str) -> None:
        try:
            async with self._limiter:
                try:
                    value = await self._ask(context)
                except KubemuxError as exc:
                    self._errors[context] = (time.monotonic(), redact_text(str(exc)))
                    self._answers.pop(context, None)
                else:
                    self._answers[context] = (time.monotonic(), value)
                    self._errors.pop(context, None)
        finally:
            self._busy.discard(context)
            progress, self._progress = self._progress, anyio.Event()
            progress.set()
