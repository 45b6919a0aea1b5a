"""Issue 29, point 5: ``kubectl get --raw PATH`` through the proxy prints what it prints
against the server, with kubectl 1.27 and 1.33 (before 1.34 kubectl drops the server URL's
path for ``--raw``, kubernetes#131165): each context's ``tls-server-name`` (its SNI) names
it. And the SNI never moves a request to another context than its path names."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import yaml
from cryptography import x509

from kubectl_support import kubectl_version, kubectl_versions, run_kubectl
from kubemux.proxy import ProxyServer
from kubemux.testing import FakeCluster, FakeContext, make_pod, write_kubeconfig
from proxy_support import running_proxy
from support import TIMEOUT

EKS = "arn:aws:eks:eu-west-1:123456789012:cluster/Prod"
OTHER = "my other context"


VERSIONS = kubectl_versions("1.27", "1.33")


@pytest.fixture
async def two() -> AsyncIterator[tuple[FakeCluster, FakeCluster]]:
    async with (
        FakeCluster(tokens={"t1"}, tls=True, name="one") as one,
        FakeCluster(tokens={"t2"}, tls=True, name="two") as two,
    ):
        one.create("pods", make_pod("web-1"))
        two.create("pods", make_pod("db-1"))
        yield one, two


def _source(tmp_path: Path, one: FakeCluster, two: FakeCluster) -> Path:
    return write_kubeconfig(
        tmp_path / "direct" / "config",
        {EKS: FakeContext(cluster=one, token="t1"), OTHER: FakeContext(cluster=two, token="t2")},
    )


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_get_raw_through_the_proxy_matches_the_server(
    two: tuple[FakeCluster, FakeCluster], tmp_path: Path, version: str
) -> None:
    one, other = two
    kubectl = kubectl_version(version)
    assert kubectl is not None
    source = _source(tmp_path, one, other)
    out = tmp_path / "proxied" / "config"
    paths = ["/version", "/api/v1/namespaces/default/pods", "/api/v1/namespaces/default/pods/web-1"]
    async with running_proxy(source) as (server, _):
        server.write_kubeconfig(out)
        for context in (EKS, OTHER):
            for path in paths:
                args = ("--context", context, "get", "--raw", path)
                direct = await run_kubectl(kubectl, source, *args, run_timeout=30)
                proxied = await run_kubectl(kubectl, out, *args, run_timeout=30)
                if "web-1" in path and context == OTHER:  # a 404, printed alike
                    assert direct[0] == proxied[0] == 1
                    assert _unescaped(direct[2]) == _unescaped(proxied[2])
                    continue
                assert proxied[0] == 0, proxied[2]
                assert json.loads(proxied[1]) == json.loads(direct[1]), (context, path)
        # each context's own objects: the SNI chose the context, not the first one
        pods = await run_kubectl(kubectl, out, "--context", OTHER, "get", "--raw", paths[1])
        assert [p["metadata"]["name"] for p in json.loads(pods[1])["items"]] == ["db-1"]
        # and kubectl's ordinary requests (the path kept) still work alongside
        code, listed, err = await run_kubectl(
            kubectl, out, "--context", EKS, "get", "pods", "-o", "name"
        )
        assert (code, listed.split()) == (0, ["pod/web-1"]), err


def _unescaped(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_every_context_gets_a_server_name_the_certificate_covers() -> None:
    from kubemux.proxy._serve.sni import server_name
    from kubemux.proxy._serve.tls import make_certificates

    names = [EKS, OTHER, "prod", "PROD", "a" * 300, "ünïcødé", ".", "--", "x.y"]
    served = [server_name(n) for n in names]
    assert len(set(served)) == len(names)  # "prod" and "PROD" too
    assert server_name("prod") == "prod-m5kk7frsuj2f5boc.kubemux.invalid"  # as docs/proxy.md
    cert = x509.load_pem_x509_certificate(make_certificates().cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "*.kubemux.invalid" in sans.get_values_for_type(x509.DNSName)
    for sni in served:
        label, _, domain = sni.partition(".")
        assert domain == "kubemux.invalid"  # one label under the wildcard
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", label), sni


async def test_the_written_kubeconfig_names_each_context_by_its_server_name(
    two: tuple[FakeCluster, FakeCluster], tmp_path: Path
) -> None:
    from kubemux.proxy._serve.sni import server_name

    one, other = two
    async with running_proxy(_source(tmp_path, one, other)) as (server, _):
        written = yaml.safe_load(server.kubeconfig_text())
    clusters = {c["name"]: c["cluster"] for c in written["clusters"]}
    assert {n: c["tls-server-name"] for n, c in clusters.items()} == {
        EKS: server_name(EKS),
        OTHER: server_name(OTHER),
    }


async def _request(server: ProxyServer, sni: str, path: str, token: str | None) -> tuple[int, str]:
    """One GET over a connection whose SNI is ``sni``: (status, body)."""
    assert server.url is not None
    context = server.certificates.client_context()
    context.check_hostname = False  # hostile names too: the proxy's CA is still checked
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=context, server_hostname=sni
    )
    try:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{auth}"
            "Connection: close\r\n\r\n".encode()
        )
        with anyio.fail_after(TIMEOUT):
            answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", "replace")


async def test_the_path_and_the_server_name_must_agree(
    two: tuple[FakeCluster, FakeCluster], tmp_path: Path
) -> None:
    """SNI is the client's choice, like the path: when both name a context and they differ,
    the request is refused (421) rather than sent to either; a name under the proxy's domain
    that names no context is refused too; without the token, nothing is said about names."""
    from kubemux.proxy import encode_context
    from kubemux.proxy._serve.sni import server_name

    one, other = two
    async with running_proxy(_source(tmp_path, one, other)) as (server, _):
        token = server.token
        pods = "/api/v1/namespaces/default/pods"
        eks, mine = server_name(EKS), f"/clusters/{encode_context(EKS)}{pods}"
        theirs = f"/clusters/{encode_context(OTHER)}{pods}"
        assert (await _request(server, eks, pods, token))[0] == 200  # the SNI decides
        assert (await _request(server, eks.upper(), pods, token))[0] == 200  # any case
        assert (await _request(server, eks, mine, token))[0] == 200  # both agree
        code, body = await _request(server, eks, theirs, token)  # they disagree
        assert code == 421 and "db-1" not in body and "web-1" not in body
        assert json.loads(body)["kind"] == "Status"
        unknown = "nobody-aaaaaaaaaaaaaaaa.kubemux.invalid"
        assert (await _request(server, unknown, pods, token))[0] == 421
        assert (await _request(server, unknown, mine, token))[0] == 421
        for hostile in (("a" * 63 + ".") * 3 + "kubemux.invalid", "a.b." + eks, "kubemux.invalid"):
            code, body = await _request(server, hostile, pods, token)
            assert code == (421 if hostile.endswith(".kubemux.invalid") else 404), hostile
        # another name (the loopback's): the path decides, as before
        assert (await _request(server, "localhost", theirs, token))[0] == 200
        assert (await _request(server, "localhost", pods, token))[0] == 404
        # no token: 401 whatever the names (no oracle for which names exist)
        assert (await _request(server, eks, theirs, None))[0] == 401
        assert (await _request(server, unknown, pods, None))[0] == 401
