"""A fake OIDC identity provider for the credential tests, and kubeconfig helpers.

The IdP is strict where real ones are: a refresh token works once (a spent or unknown one is
refused with ``invalid_grant`` and recorded in ``refused``), so a test can see a refresh that
presented a token someone else already spent.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from pathlib import Path
from typing import Any, Self

import anyio
import yaml

from kubemux.testing import FakeCluster


def jwt(exp: float, n: int) -> str:
    """An unsigned JWT carrying ``exp`` (kubemux reads only that claim)."""

    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': exp, 'n': n})}.sig"


class FakeIdP:
    """A tiny OIDC token endpoint over HTTPS on 127.0.0.1; refresh tokens are single-use.

    Each user has a chain of refresh tokens (``{chain}r0``, then ``{chain}r<n>``); every
    accepted refresh spends the token presented and issues the next of its chain.

    Attributes:
        spent: refresh tokens accepted (and so spent), in order.
        refused: refresh tokens presented that were already spent or never issued.
        newest: per chain, the last refresh token issued (the only one that works).
        answer: when set, the JSON (or, as bytes, the raw body) answered instead of the
            real tokens, after spending the token presented: a broken or hostile IdP.
        hold: when set, a token request waits for it (``waiting`` is set meanwhile).
    """

    def __init__(self, cluster: FakeCluster, ttl: float) -> None:
        import trustme

        self.cluster = cluster
        self.ttl = ttl
        self.ca = trustme.CA()
        self.valid_refresh: set[str] = set()
        self.chain_of: dict[str, str] = {}
        self.newest: dict[str, str] = {}
        self.spent: list[str] = []
        self.refused: list[str] = []
        self.answer: Any = None
        self.hold: anyio.Event | None = None
        self.waiting = anyio.Event()
        self.n = 0
        self.url = ""

    def issue_refresh(self, chain: str = "") -> str:
        token = f"{chain}r{self.n}" if chain in self.newest else f"{chain}r0"
        self.valid_refresh.add(token)
        self.chain_of[token] = chain
        self.newest[chain] = token
        return token

    async def __aenter__(self) -> Self:
        from aiohttp import web

        async def discovery(request: web.Request) -> web.Response:
            return web.json_response({"issuer": self.url, "token_endpoint": self.url + "/token"})

        async def token(request: web.Request) -> web.Response:
            form = await request.post()
            if self.hold is not None:
                self.waiting.set()
                await self.hold.wait()
            refresh = str(form.get("refresh_token"))
            if form.get("grant_type") != "refresh_token" or refresh not in self.valid_refresh:
                self.refused.append(refresh)
                return web.json_response({"error": "invalid_grant"}, status=400)
            self.valid_refresh.discard(refresh)
            self.spent.append(refresh)
            self.n += 1
            if self.answer is not None:
                if isinstance(self.answer, bytes):
                    return web.Response(body=self.answer, content_type="application/json")
                return web.json_response(self.answer)
            id_token = jwt(time.time() + self.ttl, self.n)
            self.cluster.tokens.add(id_token)
            new = self.issue_refresh(self.chain_of[refresh])
            return web.json_response({"id_token": id_token, "refresh_token": new})

        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", discovery)
        app.router.add_post("/token", token)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(context)
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.hold is not None:
            self.hold.set()
        await self.runner.cleanup()

    def provider(self, *, trusted: bool = True, chain: str = "", **config: str) -> dict[str, Any]:
        """An ``auth-provider`` entry for this IdP: an expired id-token and the first refresh
        token of ``chain`` (the IdP's CA is trusted unless ``trusted=False``); ``config``
        adds or overrides keys."""
        base = {"client-id": "kubemux", "idp-issuer-url": self.url}
        if trusted:
            base["idp-certificate-authority-data"] = base64.b64encode(
                self.ca.cert_pem.bytes()
            ).decode()
        base |= {"id-token": jwt(time.time() - 10, 0), "refresh-token": self.issue_refresh(chain)}
        return {"name": "oidc", "config": base | config}


def kubeconfig_file(
    path: Path, cluster: FakeCluster, users: dict[str, dict[str, Any]], contexts: dict[str, str]
) -> Path:
    """Write a kubeconfig with cluster ``c``, these users and contexts (name -> user)."""
    entry: dict[str, Any] = {"server": cluster.server}
    if cluster.ca_file:
        entry["certificate-authority"] = cluster.ca_file
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": entry}],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [
            {"name": n, "context": {"cluster": "c", "user": u}} for n, u in contexts.items()
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def provider_config(path: Path, user: str) -> dict[str, Any]:
    """The ``auth-provider.config`` of ``user`` in the kubeconfig at ``path``."""
    doc = yaml.safe_load(path.read_text())
    for item in doc["users"]:
        if item["name"] == user:
            config: dict[str, Any] = item["user"]["auth-provider"]["config"]
            return config
    raise KeyError(user)
