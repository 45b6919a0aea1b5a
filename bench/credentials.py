"""Credentials that expire while informers run: exec plugin, rotated token file, OIDC.

Three FakeClusters on 127.0.0.1, one context each, watched through a WatcherRegistry:

* ``exec``: the plugin in tests/plugins mints tokens that expire every ``--lifetime`` s
  (default 3), and the server accepts only the newest;
* ``token-file``: the file is rotated every 2 s and the server accepts only the newest;
* ``oidc``: id-tokens from a fake IdP (HTTP on 127.0.0.1) expire every ``--lifetime`` s,
  refresh tokens are single-use and written back to the kubeconfig.

Pods churn on every cluster; every watch ends after 2-4 s (``timeoutSeconds``) and is
re-opened from its resourceVersion, so requests keep carrying credentials. With
``--drop-watches`` every watch is also aborted every 3 s (the informer counts an aborted
stream as a failure and backs off). At the end, per context: requests, 401s, plugin runs / refreshes, relists,
RESETs seen by a subscriber, and whether the store equals the server.

    python bench/credentials.py --duration 60
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import yaml
from aiohttp import web

from kubemux import WatcherRegistry, WatchSettings
from kubemux.testing import FakeCluster, make_pod

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table

PLUGIN = Path(__file__).resolve().parent.parent / "tests" / "plugins" / "exec_plugin.py"
KEY = "bench-signing-key"


def _jwt(exp: float, n: int) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': exp, 'n': n})}.sig"


async def main(duration: float, lifetime: float, reopen_watches: bool) -> None:
    folder = Path(tempfile.mkdtemp(prefix="kubemux-bench-"))
    log = folder / "plugin-runs"
    token_file = folder / "token"
    async with (
        FakeCluster(signing_key=KEY, newest_only=True, name="exec") as c_exec,
        FakeCluster(tokens={"tf-0"}, name="token-file") as c_file,
        FakeCluster(tokens=set(), name="oidc") as c_oidc,
    ):
        clusters = {"exec": c_exec, "token-file": c_file, "oidc": c_oidc}
        idp = {"n": 0, "valid": {"r0"}, "grants": 0, "url": ""}
        issued: dict[str, float] = {}

        async def discovery(request: web.Request) -> web.Response:
            return web.json_response({"token_endpoint": idp["url"] + "/token"})

        async def grant(request: web.Request) -> web.Response:
            form = await request.post()
            refresh = str(form.get("refresh_token"))
            if refresh not in idp["valid"]:  # type: ignore[operator]
                return web.json_response({"error": "invalid_grant"}, status=400)
            idp["valid"] = set()
            idp["n"] = n = int(idp["n"]) + 1  # type: ignore[call-overload]
            idp["grants"] = n
            token = _jwt(time.time() + lifetime, n)
            issued[token] = time.time() + lifetime
            c_oidc.tokens.add(token)
            idp["valid"] = {f"r{n}"}
            return web.json_response({"id_token": token, "refresh_token": f"r{n}"})

        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", discovery)
        app.router.add_post("/token", grant)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        idp["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}"

        token_file.write_text("tf-0")
        env = [
            {"name": "KMX_PLUGIN_LOG", "value": str(log)},
            {"name": "KMX_PLUGIN_KEY", "value": KEY},
            {"name": "KMX_PLUGIN_TTL", "value": str(lifetime)},
        ]
        users = {
            "exec": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(PLUGIN)],
                    "env": env,
                    "interactiveMode": "Never",
                }
            },
            "token-file": {"tokenFile": str(token_file)},
            "oidc": {
                "auth-provider": {
                    "name": "oidc",
                    "config": {
                        "client-id": "bench",
                        "idp-issuer-url": idp["url"],
                        "id-token": _jwt(time.time() - 1, 0),
                        "refresh-token": "r0",
                    },
                }
            },
        }
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": n, "cluster": {"server": c.server}} for n, c in clusters.items()],
            "users": [{"name": n, "user": u} for n, u in users.items()],
            "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in clusters],
        }
        config = folder / "config"
        config.write_text(yaml.safe_dump(doc))
        for c in clusters.values():
            c.create_many("pods", [make_pod(f"p-{i}") for i in range(20)])

        resets = dict.fromkeys(clusters, 0)
        # follow=False: the OIDC write-back changes the file; until the registry's fingerprint
        # uses kubemux._auth.pool.credential_insensitive, following it would restart the context
        settings = WatchSettings(watch_timeout_range=(2.0, 4.0))  # watches end every 2-4 s
        async with WatcherRegistry.from_kubeconfig(
            [str(config)], follow=False, settings=settings
        ) as registry:
            stores = {n: await registry.watch(n, "pods") for n in clusters}
            async with anyio.create_task_group() as tg:

                async def count_resets() -> None:
                    async with registry.subscribe(resource="pods") as changes:
                        async for change in changes:
                            if change.type == "RESET":
                                resets[change.context] += 1

                async def rotate_file() -> None:
                    n = 0
                    while True:
                        await anyio.sleep(2.0)
                        n += 1
                        token_file.write_text(f"tf-{n}")
                        c_file.tokens.clear()
                        c_file.tokens.add(f"tf-{n}")

                async def expire_oidc() -> None:
                    while True:
                        await anyio.sleep(0.1)
                        now = time.time()
                        for token, exp in list(issued.items()):
                            if exp <= now:
                                c_oidc.tokens.discard(token)
                                del issued[token]

                async def churn() -> None:
                    i = 0
                    while True:
                        await anyio.sleep(0.2)
                        i += 1
                        for c in clusters.values():
                            c.update("pods", make_pod(f"p-{i % 20}", labels={"i": str(i)}))

                async def reopen() -> None:
                    while True:
                        await anyio.sleep(3.0)
                        for c in clusters.values():
                            c.drop_watches()

                jobs = [count_resets, rotate_file, expire_oidc, churn]
                if reopen_watches:
                    jobs.append(reopen)
                for job in jobs:
                    tg.start_soon(job)
                await anyio.sleep(duration)
                await anyio.sleep(1.0)  # let the last events arrive
                status = registry.status()
                equal = {}
                for name, c in clusters.items():
                    server = {
                        (o["metadata"]["name"], o["metadata"]["resourceVersion"])
                        for o in c.objects("pods")
                    }
                    mine = {
                        (o["metadata"]["name"], o["metadata"]["resourceVersion"])
                        for o in stores[name].list()
                    }
                    equal[name] = server == mine
                tg.cancel_scope.cancel()
        await runner.cleanup()
        runs = len(log.read_text().splitlines()) if log.exists() else 0
        refreshes = {"exec": runs, "token-file": "-", "oidc": idp["grants"]}
        rows = []
        for name, c in clusters.items():
            ctx = status.contexts[name]
            relists = sum(i.relists for i in ctx.informers)
            rows.append(
                [
                    name,
                    str(len(c.requests)),
                    str(c.unauthorized),
                    str(refreshes[name]),
                    str(relists),
                    str(resets[name]),
                    "yes" if equal[name] else "NO",
                    ctx.state,
                ]
            )
        header = [
            "context",
            "requests",
            "401s",
            "plugin runs/grants",
            "relists",
            "RESETs",
            "store=server",
            "state",
        ]
        print(table(f"credentials, {duration:g} s, lifetime {lifetime:g} s", header, rows))
        print(f"expected plugin runs ~ duration / lifetime = {duration / lifetime:.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--lifetime", type=float, default=3.0)
    parser.add_argument(
        "--drop-watches", action="store_true", help="abort every watch every 3 s as well"
    )
    args = parser.parse_args()
    anyio.run(main, args.duration, args.lifetime, args.drop_watches)
