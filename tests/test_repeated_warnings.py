"""A failure a retry loop repeats is logged once per period, with how many times it came."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import yaml

from kubemux import Backoff, WatcherRegistry
from kubemux._informer.repeats import RepeatedWarning
from kubemux.testing import FakeCluster, kubeconfig_dict
from support import wait_until


async def test_a_deleted_ca_file_is_one_warning_not_a_flood(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeCluster(tls=True) as a:
        ca = tmp_path / "ca.crt"
        shutil.copy(a.ca_file, ca)
        doc = kubeconfig_dict({"prod": a})
        doc["clusters"][0]["cluster"]["certificate-authority"] = str(ca)
        path = tmp_path / "config"
        path.write_text(yaml.safe_dump(doc))
        ca.unlink()
        caplog.set_level(logging.WARNING, logger="kubemux")
        fast = Backoff(initial_delay=0.01, max_delay=0.02)
        async with WatcherRegistry.from_kubeconfig(
            str(path), autowatch=["pods"], start_backoff=fast
        ) as registry:
            attempts: list[int] = []

            def retried_often() -> bool:
                status = registry.status().contexts["prod"]
                attempts.append(1) if status.last_error else None
                return len(attempts) >= 20

            await wait_until(retried_often, registry=registry)
        lines = [r.getMessage() for r in caplog.records if "ca.crt" in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("context 'prod': ") and "(retry in " in lines[0]


def test_the_same_text_once_per_period_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("kubemux.test_repeats")
    caplog.set_level(logging.WARNING, logger="kubemux.test_repeats")
    warnings = RepeatedWarning(log, period=0.0)
    assert warnings.warning("x: refused", " (failure 1)")
    assert warnings.warning("x: refused", " (failure 2)")  # period 0: every time
    warnings = RepeatedWarning(log, period=3600)
    assert warnings.warning("y: refused", " (failure 1)")
    assert not any(warnings.warning("y: refused", f" (failure {n})") for n in range(2, 50))
    assert warnings.warning("y: something else")  # news: at once
    warnings.period = 0.0
    assert warnings.warning("y: something else")
    texts = [r.getMessage() for r in caplog.records]
    assert texts == [
        "x: refused (failure 1)",
        "x: refused (failure 2)",
        "y: refused (failure 1)",
        "y: something else",
        "y: something else",
    ]
    warnings = RepeatedWarning(log, period=3600)
    warnings.warning("z")
    warnings.warning("z")
    warnings.period = 0.0
    warnings.warning("z")
    assert caplog.records[-1].getMessage().startswith("z (the same 1 more times in the last ")
