"""The per-context client: TLS contexts built off the event loop and shared when safe."""

from __future__ import annotations

import ssl
from pathlib import Path

import anyio

from kubemux import ContextConfig
from kubemux._client import open_client
from kubemux.testing import FakeCluster, FakeContext, kubeconfig_dict


def _context(name: str, contexts: dict[str, FakeCluster | FakeContext | str]) -> ContextConfig:
    return ContextConfig.from_dict(name, kubeconfig_dict(contexts))  # type: ignore[arg-type]


def _ssl_of(client: object) -> object:
    return client._api.rest_client.pool_manager.connector._ssl  # type: ignore[attr-defined]


async def test_clients_without_a_client_cert_share_one_tls_context() -> None:
    a = _context("a", {"a": "https://127.0.0.1:1"})
    b = _context("b", {"b": "https://127.0.0.1:2"})
    async with open_client(a) as ca, open_client(b) as cb:
        assert isinstance(_ssl_of(ca), ssl.SSLContext)
        assert _ssl_of(ca) is _ssl_of(cb)


async def test_tls_cluster_with_its_ca_works_and_other_code_gets_real_contexts(
    tmp_path: Path,
) -> None:
    async with FakeCluster(tls=True, tokens={"t"}) as c:
        cfg = _context("c", {"c": FakeContext(cluster=c, token="t")})
        from kubemux import parse_resource

        async with open_client(cfg) as client:
            with anyio.fail_after(10):
                body = await client.list(
                    parse_resource("pods"), None, {}, request_timeout=5, connect_timeout=5
                )
        assert b'"kind":"PodList"' in body
    # outside open_client, kubernetes-asyncio's module builds contexts as usual
    from kubernetes_asyncio.client import rest

    from kubemux._client import _shared_contexts

    fresh = rest.ssl.create_default_context()
    assert isinstance(fresh, ssl.SSLContext)
    assert all(fresh is not shared for shared in _shared_contexts.values())
