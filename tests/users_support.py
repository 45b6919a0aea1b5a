"""Helpers for the ``--user-tokens`` proxy tests: a FakeCluster with RBAC users, the proxy
in user mode, and raw HTTP to both with a user's own token."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

from kubemux import WatcherRegistry
from kubemux.proxy import ProxyServer, ProxySettings, encode_context
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._state.state import RBAC_RESOURCES
from support import TIMEOUT

RBAC = "rbac.authorization.k8s.io"
PODS_READ = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
ADMIN = "admin-token"


def binding(
    namespace: str, name: str, kind: str, role: str, *subjects: dict[str, str]
) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name} if namespace else {"name": name}
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
        "subjects": list(subjects),
    }


def who(kind: str, name: str, namespace: str = "") -> dict[str, str]:
    out = {"kind": kind, "name": name}
    if namespace:
        out["namespace"] = namespace
    if kind != "ServiceAccount":
        out["apiGroup"] = RBAC
    return out


def role(namespace: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "rules": list(rules)}


def populate(c: FakeCluster) -> None:
    """Pods and ConfigMaps in ``web``, ``db`` and ``other``, a Secret in ``web``, and the
    bindings: alice reads pods in ``web``; the ``db-team`` group views ``db``; carol may
    get and watch the pod ``web-0`` only; the ServiceAccount ``web/deployer`` edits
    ``web``; a binding to a missing ClusterRole for the group ``devs`` in ``web``."""
    for ns in ("web", "db", "other"):
        for i in range(3):
            c.create("pods", make_pod(f"{ns}-{i}", ns))
        c.create(
            "configmaps",
            {"metadata": {"name": "settings", "namespace": ns}, "data": {"k": ns}},
        )
    c.create(
        "secrets",
        {"metadata": {"name": "settings", "namespace": "web"}, "data": {"password": "c2VjcmV0"}},
    )
    rb = RBAC_RESOURCES["rolebindings"]
    c.create(RBAC_RESOURCES["roles"], role("web", "reader", PODS_READ))
    c.create(rb, binding("web", "alice", "Role", "reader", who("User", "alice")))
    c.create(rb, binding("db", "team", "ClusterRole", "view", who("Group", "db-team")))
    one = {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch"],
        "resourceNames": ["web-0"],
    }
    c.create(RBAC_RESOURCES["roles"], role("web", "one-pod", one))
    c.create(rb, binding("web", "carol", "Role", "one-pod", who("User", "carol")))
    c.create(rb, binding("web", "sa", "ClusterRole", "edit", who("ServiceAccount", "deployer")))
    c.create(rb, binding("web", "broken", "ClusterRole", "gone", who("Group", "devs")))


class Client:
    """Raw HTTP with one token, to the proxy (``context`` set) or straight to the cluster."""

    def __init__(
        self, session: aiohttp.ClientSession, base: str, ssl: Any, token: str | None
    ) -> None:
        self.session = session
        self.base = base
        self.ssl = ssl
        self.token = token

    def with_token(self, token: str | None) -> Client:
        return Client(self.session, self.base, self.ssl, token)

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        sent = dict(headers or {})
        if self.token is not None:
            sent["Authorization"] = f"Bearer {self.token}"
        async with self.session.request(
            method, self.base + path, headers=sent, data=data, ssl=self.ssl
        ) as resp:
            return resp.status, resp.headers, await resp.read()

    async def get_json(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, _, body = await self.request("GET", path, **kwargs)
        return status, json.loads(body) if body else None


@contextlib.asynccontextmanager
async def user_proxy(
    cluster: FakeCluster,
    tmp_path: Path,
    *,
    kubeconfig: dict[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[ProxyServer, Client, Client]]:
    """The proxy in ``--user-tokens`` mode for ``cluster`` (context ``prod``; or the
    ``kubeconfig`` given), and a client of the proxy and one of the cluster, both without a
    token yet."""
    path = tmp_path / "config"
    if kubeconfig is None:
        write_kubeconfig(path, {"prod": cluster})
    else:
        path.write_text(yaml.safe_dump(kubeconfig))
    async with contextlib.AsyncExitStack() as stack:
        registry = await stack.enter_async_context(
            WatcherRegistry.from_kubeconfig(str(path), transform=None)
        )
        server = ProxyServer(registry, port=0, settings=ProxySettings(user_tokens=True, **settings))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(TIMEOUT):
                await tg.start(server.serve)
            assert server.url is not None
            proxied = Client(
                session,
                f"{server.url}/clusters/{encode_context('prod')}",
                server.certificates.client_context(),
                None,
            )
            direct = Client(session, cluster.server, cluster.client_ssl_context(), None)
            try:
                yield server, proxied, direct
            finally:
                server.shutdown()
