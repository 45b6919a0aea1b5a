"""``kubemux proxy --user-tokens`` (issue 33): each client with its own token, cached reads
authorized per user exactly as the API server would, the rest upstream with the user's
token, revocation reaching open watches, and no answer carried from one user to another."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubemux.testing import FakeCluster
from support import TIMEOUT
from users_support import ADMIN, populate, user_proxy



@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={ADMIN}, rbac=True, tls=True, name="prod") as c:
        populate(c)
        yield c


async def test_a_user_reads_what_the_api_server_lets_them(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    alice = cluster.add_user("alice")
    async with user_proxy(cluster, tmp_path) as (server, proxied, direct):
        p, d = proxied.with_token(alice), direct.with_token(alice)
        for path in (
            "/api/v1/namespaces/web/pods",
            "/api/v1/namespaces/web/pods/web-1",
            "/api/v1/namespaces/db/pods",
            "/api/v1/pods",
            "/api/v1/namespaces/web/secrets/settings",
            "/api/v1/namespaces/web",
        ):
            ps, _, pb = await p.request("GET", path)
            ds, _, db = await d.request("GET", path)
            assert (ps, json.loads(pb)) == (ds, json.loads(db)), path
        status, _, _ = await proxied.with_token("not-a-token").request("GET", "/api/v1/pods")
        assert status == 401
