"""A command run until its output shows what a test waits for, then ended by Ctrl-C.

Commands that run until interrupted (``kubemux watch``, ``status -f``) were run for a fixed
``--duration``: under a load of 13-14 (the suite beside other work on two cores) two seconds
ran out before the first row. ``run_until`` waits for the output instead, then watches a grace
period more (what a retry storm or a repeated warning would print shows there), then sends
SIGINT, as a person ends the command. Exit code 130 is that Ctrl-C.
"""

from __future__ import annotations

import functools
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import IO

import anyio

INTERRUPTED = 130
"""The exit code of a command ended by Ctrl-C, as a shell reports it."""


async def run_until(
    command: list[str],
    done: Callable[[str, str], bool],
    *,
    env: Mapping[str, str] | None = None,
    grace: float = 1.0,
    wait_at_most: float = 90.0,
) -> tuple[int, str, str]:
    """Run ``command`` until ``done(stdout, stderr)`` holds (or it exits, or ``wait_at_most`` seconds pass),
    then ``grace`` seconds more, then Ctrl-C; its exit code, stdout and stderr."""
    run = functools.partial(
        _run_until, command, dict(env) if env else None, done, grace, wait_at_most
    )
    return await anyio.to_thread.run_sync(run)  # the waiting blocks: a worker thread's


def _run_until(
    command: list[str],
    env: dict[str, str] | None,
    done: Callable[[str, str], bool],
    grace: float,
    timeout: float,
) -> tuple[int, str, str]:
    out: list[str] = []
    err: list[str] = []
    changed = threading.Condition()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:  # closes the pipes
        assert proc.stdout is not None and proc.stderr is not None

        def pump(stream: IO[str], into: list[str]) -> None:
            for line in stream:
                with changed:
                    into.append(line)
                    changed.notify_all()
            with changed:
                changed.notify_all()

        readers = [
            threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, err), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            with changed:
                changed.wait_for(
                    lambda: proc.poll() is not None or done("".join(out), "".join(err)),
                    timeout=timeout,
                )
            if proc.poll() is None:
                with changed:
                    changed.wait_for(lambda: proc.poll() is not None, timeout=grace)
                proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    return code, "".join(out), "".join(err)
