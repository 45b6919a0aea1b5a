"""The container logs of a fake cluster, kept per (pod uid, container).

A pod deleted and created again under the same name starts with an empty log, as a new
container does; at most ``LOG_LINES`` lines per container are kept (the oldest go first), and
the logs of deleted pods are forgotten on the next append. A container that restarts keeps
its last instance's log as its previous one (``previous=true``), as the kubelet does.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable

__all__ = ["LOG_LINES", "ContainerLog", "LogBook"]

LOG_LINES = 100_000


@dataclasses.dataclass(slots=True)
class ContainerLog:
    """One container's log: ``(unix time, line)`` pairs; ``dropped`` lines were trimmed."""

    lines: deque[tuple[float, str]] = dataclasses.field(default_factory=deque)
    dropped: int = 0


class LogBook:
    """Every container log of a fake cluster."""

    def __init__(self, limit: int = LOG_LINES) -> None:
        self.limit = limit
        self.logs: dict[tuple[str, str], ContainerLog] = {}
        self.previous: dict[tuple[str, str], ContainerLog] = {}  # the last instance's
        self.restarts: dict[tuple[str, str], int] = {}  # a follower ends when this moves
        self.owners: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, name)

    def append(
        self,
        uid: str,
        container: str,
        text: str,
        *,
        owner: tuple[str, str] = ("", ""),
        when: float | None = None,
    ) -> int:
        """Append ``text`` (one line per ``\\n``; a last line without one counts too)."""
        self.owners[uid] = owner
        log = self.logs.setdefault((uid, container), ContainerLog())
        stamp = time.time() if when is None else when
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for line in lines:
            log.lines.append((stamp, line))
        excess = len(log.lines) - self.limit
        for _ in range(max(0, excess)):
            log.lines.popleft()
            log.dropped += 1
        return len(lines)

    def restart(self, uid: str, container: str, *, owner: tuple[str, str] = ("", "")) -> None:
        """The container starts again: its log becomes its previous one, a new one starts."""
        self.owners[uid] = owner
        key = (uid, container)
        self.previous[key] = self.logs.pop(key, ContainerLog())
        self.restarts[key] = self.restarts.get(key, 0) + 1

    def lines(self, uid: str, container: str) -> list[str]:
        """The lines kept for one container."""
        log = self.logs.get((uid, container))
        return [line for _, line in log.lines] if log is not None else []

    def prune(self, alive: Callable[[str, str, str], bool]) -> None:
        """Forget the logs of pods for which ``alive(namespace, name, uid)`` is false."""
        gone = {uid for uid, (ns, name) in self.owners.items() if not alive(ns, name, uid)}
        if gone:
            for book in (self.logs, self.previous, self.restarts):
                for key in [k for k in book if k[0] in gone]:
                    del book[key]
            for uid in gone:
                del self.owners[uid]
