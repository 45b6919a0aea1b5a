"""kubernetes-asyncio's ``ApiClient``, built for one context without its costs and leaks.

kubernetes-asyncio builds the client (so static tokens, client certificates, proxies and TLS
settings behave exactly as they do there), with three changes made here:

- its TLS context is built beforehand, in a worker thread, and shared between clients that
  will not modify it (``_SSLModule``: loading the system trust store on the event loop
  costs 20-30 ms and ~1 MB per client);
- inline credentials (``*-data``, private keys included) are written to a private folder
  (mode 0600) that lives only while the client is built, not to the shared temp folder
  for the life of the process;
- a refreshing credential (exec plugin, token file, auth-provider) is removed from the
  config it sees: :class:`~kubemux._http.client.ContextClient` sends those itself;
- its HTTP session is replaced by ours: no ``trust_env`` (aiohttp would read ``~/.netrc``
  for every request), the environment's proxies chosen by Go's rules
  (:func:`environment_proxy`), and for a SOCKS5 ``proxy-url`` (which aiohttp cannot use, so
  it is removed from the config kubernetes-asyncio sees) a connector that tunnels every
  connection through the proxy (:class:`~kubemux._http.socks.SocksConnector`), TLS included.

Running out of file descriptors while building (a CA file, an inline credential) is
:class:`~kubemux.TooManyOpenFiles`, not a kubeconfig problem.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextvars
import functools
import hashlib
import ipaddress
import os
import shutil
import ssl
import tempfile
import urllib.parse
import urllib.request
import weakref
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio

from .._errors import KubeconfigError
from .._redact import redact_text
from .._runtime import fd_exhaustion, too_many_open_files
from .socks import SOCKS_SCHEMES, SocksConnector, is_socks

if TYPE_CHECKING:
    from .._kubeconfig.load import ContextConfig

__all__ = ["build_api_client", "environment_proxy", "replacement_session"]

_READ_BUFSIZE = 2**21  # kubernetes-asyncio's: a watch line can hold a 1.5 MiB object


async def build_api_client(
    config: ContextConfig, *, refreshing: bool
) -> tuple[Any, ssl.SSLContext]:
    """kubernetes-asyncio's ``ApiClient`` for one context, and the TLS context it uses.

    Args:
        config: The context.
        refreshing: A refreshing credential will be sent by the caller: kubernetes-asyncio
            must not run it, and the TLS context is the client's own (a client certificate
            may be loaded into it later).

    The caller closes the client (``await api.close()``). Cancellation leaves nothing
    behind (the private folder is removed).

    Raises:
        KubeconfigError: the context's credentials, TLS files or proxy cannot be used.
        TooManyOpenFiles: the process ran out of file descriptors meanwhile.
    """
    from kubernetes_asyncio.client import ApiClient, Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader

    cfg = type.__call__(Configuration)
    base = os.path.dirname(config.source) if os.path.isabs(config.source) else None
    # kubernetes-asyncio would write inline credentials (*-data, private keys included) to
    # the shared temp folder and keep them there, and in a module-level cache, until the
    # process exits. We write them to a private folder that lives only while the client is
    # built: the TLS context has read them by the time ApiClient() returns.
    # Most contexts have nothing to write: the folder (3 ms of blocking mkdir and rmdir on a
    # busy disk) is made only for those that do.
    folder: str | None = None
    try:
        client_config = config.client_config()
        socks = _check_proxy(config, client_config)
        if refreshing:
            _strip_dynamic_credentials(client_config)
        if _writes_files(client_config):
            folder = tempfile.mkdtemp(prefix="kubemux-")
            _materialise_inline_credentials(client_config, folder)
        loader = KubeConfigLoader(
            config_dict=client_config,
            config_base_path=base,
            active_context=config.name,
            temp_file_path=folder,
        )
        await loader.load_and_set(cfg)
        ssl_context = await _ssl_context_for(cfg, private=refreshing)
        token = _PREBUILT_SSL.set(ssl_context)
        try:
            api = ApiClient(configuration=cfg)
        finally:
            _PREBUILT_SSL.reset(token)
        # shielded: a cancellation between ApiClient() and our return would leak its session
        # (closing a session that never connected is immediate)
        with anyio.CancelScope(shield=True):
            try:
                await _own_session(api, ssl_context, socks or environment_proxy(config.server))
            except BaseException:
                await api.close()
                raise
    except (ConfigException, OSError, ssl.SSLError, ValueError, KeyError) as exc:
        code = fd_exhaustion(exc)
        if code is not None:
            raise too_many_open_files(config.display_server, "building its client", code) from exc
        raise KubeconfigError(
            f"context {config.name!r} (from {config.source}): cannot build a client: "
            f"{_shorten(str(exc))}",
            path=config.source,
        ) from exc
    finally:
        if folder is not None:
            _remove_private_folder(folder)
    return api, ssl_context


# kubernetes-asyncio builds an SSL context in RESTClientObject.__init__ with
# ssl.create_default_context(cafile=...). Without a CA file that loads the system trust store:
# 20-30 ms on the event loop and ~1 MB per client, so starting thousands of contexts would
# block the loop for minutes. There is no parameter to pass a context in, so its module's
# `ssl` name is pointed at a stand-in that hands out a context we built beforehand (off the
# loop, and shared when the client will not modify it), and is the real module otherwise.
_PREBUILT_SSL: contextvars.ContextVar[ssl.SSLContext | None] = contextvars.ContextVar(
    "kubemux_prebuilt_ssl", default=None
)
_shared_contexts: collections.OrderedDict[str | None, ssl.SSLContext] = collections.OrderedDict()
_SHARED_MAX = 32  # distinct CA bundles kept; least recently used go first
# contexts being built, by CA content, per event loop: an Event belongs to its loop, and a
# loop that closed while one was being built (a test's) must not hold up the next loop
_building: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str | None, anyio.Event]] = (
    weakref.WeakKeyDictionary()
)


class _SSLModule:
    """Stands in for :mod:`ssl` inside ``kubernetes_asyncio.client.rest``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(ssl, name)

    @staticmethod
    def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        prebuilt = _PREBUILT_SSL.get()
        if prebuilt is not None:
            return prebuilt
        return ssl.create_default_context(*args, **kwargs)


def _install_ssl_module() -> None:
    from kubernetes_asyncio.client import rest

    if not isinstance(getattr(rest, "ssl", None), _SSLModule):
        rest.ssl = _SSLModule()  # type: ignore[attr-defined]


async def _ssl_context_for(cfg: Any, *, private: bool = False) -> ssl.SSLContext:
    """The context RESTClientObject would build, made in a worker thread.

    A client that will not change it (no client certificate, verification on, strict
    flags kept) shares one context per CA file; others get their own.
    """
    _install_ssl_module()
    cafile: str | None = cfg.ssl_ca_cert
    shareable = (
        not private
        and not cfg.cert_file
        and cfg.verify_ssl
        and not cfg.disable_strict_ssl_verification
    )
    if not shareable:
        return await _build_ssl_context(cafile)
    # (a thread hop even without a CA file: skipping it exposed a race in the dashboard's
    # contexts panel, tests/test_dashboard.py::test_context_states_reach_the_page_...)
    key = await anyio.to_thread.run_sync(_ca_key, cafile)
    building_here = _building.setdefault(asyncio.get_running_loop(), {})
    while True:
        cached = _shared_contexts.get(key)
        if cached is not None:
            _shared_contexts.move_to_end(key)
            return cached
        building = building_here.get(key)
        if building is None:
            break
        # single flight: 300 contexts starting at once load the trust store once, not 300
        # times (20-30 ms of CPU each)
        await building.wait()
    done = building_here[key] = anyio.Event()
    try:
        context = await _build_ssl_context(cafile)
        _shared_contexts[key] = context
        while len(_shared_contexts) > _SHARED_MAX:
            _shared_contexts.popitem(last=False)
    finally:
        del building_here[key]
        done.set()
    return context


async def _build_ssl_context(cafile: str | None) -> ssl.SSLContext:
    return await anyio.to_thread.run_sync(
        functools.partial(ssl.create_default_context, cafile=cafile)
    )


def _ca_key(cafile: str | None) -> str | None:
    # by content: inline CAs live in a new private folder for every generation
    if cafile is None:
        return None
    try:
        with open(cafile, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return f"unreadable:{cafile}"


_INLINE_FIELDS = (
    ("clusters", "cluster", ("certificate-authority",)),
    ("users", "user", ("client-certificate", "client-key")),
)


def _writes_files(config: Any) -> bool:
    """Whether kubernetes-asyncio would write a file for this config: inline data
    (``*-data``, an auth provider's too) or an exec plugin (its certificates)."""
    if isinstance(config, dict):
        return any(
            (isinstance(key, str) and key.endswith("-data") and bool(value))
            or key == "exec"
            or _writes_files(value)
            for key, value in config.items()
        )
    if isinstance(config, list):
        return any(_writes_files(item) for item in config)
    return False


def _materialise_inline_credentials(config: dict[str, Any], folder: str) -> None:
    """Replace ``*-data`` fields by files (mode 0600) in ``folder``."""
    for section, inner, fields in _INLINE_FIELDS:
        for i, item in enumerate(config.get(section) or ()):
            body = item.get(inner) if isinstance(item, dict) else None
            if not isinstance(body, dict):
                continue
            for field in fields:
                data = body.pop(f"{field}-data", None)
                if not data:
                    continue
                try:
                    content = base64.b64decode(data, validate=True)
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{field}-data is not valid base64") from exc
                path = os.path.join(folder, f"{section}-{i}-{field}")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(content)
                body[field] = path


def _check_proxy(config: ContextConfig, client_config: dict[str, Any]) -> str | None:
    """The SOCKS5 proxy URL to tunnel through (taken out of ``client_config``: aiohttp
    speaks to HTTP(S) proxies only), or None. Other schemes than http, https and SOCKS5 are
    refused clearly here (the kubeconfig loader refuses them first), not at connect time."""
    socks: str | None = None
    for item in client_config.get("clusters") or ():
        body = item.get("cluster") if isinstance(item, dict) else None
        proxy = body.get("proxy-url") if isinstance(body, dict) else None
        if not proxy or not isinstance(body, dict):
            continue
        scheme = str(proxy).partition("://")[0].lower()
        if is_socks(str(proxy)):
            socks = str(body.pop("proxy-url"))
        elif scheme not in ("http", "https"):
            raise KubeconfigError(
                f"context {config.name!r} (from {config.source}): proxy-url: unsupported "
                f"scheme {scheme!r}, must be http, https or {' or '.join(SOCKS_SCHEMES)}",
                path=config.source,
            )
    return socks


async def _own_session(api: Any, ssl_context: ssl.SSLContext, proxy: str | None) -> None:
    """Give ``api`` our HTTP session: through ``proxy`` (the kubeconfig's or the
    environment's; a SOCKS5 one tunnels every connection), never reading ``~/.netrc``.

    kubernetes-asyncio's session has ``trust_env=True``: aiohttp then reads ``~/.netrc`` in
    a worker thread for every request (a file opened per request: one more way to run out of
    descriptors, and credentials kubectl never sends) and applies the environment's proxies
    by its own rules. kubectl follows Go's (:func:`environment_proxy`)."""
    rest = api.rest_client
    unused: aiohttp.ClientSession = rest.pool_manager  # never connected: closes at once
    limit = unused.connector.limit if unused.connector is not None else 100
    socks = proxy if proxy is not None and is_socks(proxy) else None
    rest.pool_manager = _session(ssl_context, limit, socks)
    if rest.proxy is None and socks is None:
        rest.proxy = proxy  # an HTTP(S) proxy from the environment
    if socks is not None:
        rest.proxy = None
    await unused.close()


def environment_proxy(server: str) -> str | None:
    """The proxy Go's ``http.ProxyFromEnvironment`` (kubectl's default) uses for
    ``server``: ``HTTPS_PROXY`` for https, ``HTTP_PROXY`` for http (lower case first), none
    for a host ``NO_PROXY`` lists, and never one for localhost or a loopback address."""
    try:
        parts = urllib.parse.urlsplit(server)
        host = parts.hostname
    except ValueError:
        return None
    if not host or host == "localhost" or _is_loopback(host):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme.lower())
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if not proxy or bypass(host, proxies):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"  # Go: no scheme means http


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def replacement_session(old: aiohttp.ClientSession, ssl_context: ssl.SSLContext) -> Any:
    """A new session like ``old`` (the same proxy, connection limit and buffer), with
    ``ssl_context``: new connections for a client certificate that changed."""
    connector = old.connector
    limit = connector.limit if connector is not None else 100
    proxy = connector.proxy_url if isinstance(connector, SocksConnector) else None
    return _session(ssl_context, limit, proxy)


def _session(ssl_context: ssl.SSLContext, limit: int, socks: str | None) -> aiohttp.ClientSession:
    """A session for one context: plain TCP, or tunnels through the SOCKS5 proxy ``socks``.
    An HTTP(S) proxy is passed per request (kubernetes-asyncio's ``rest.proxy``).

    No cookie jar (kubectl keeps none): a cookie an API server sets would otherwise be sent
    on every later request of the context, for every client of ``kubemux proxy``. And an
    upgrade (exec, attach, port-forward over WebSocket) never follows a redirect: aiohttp's
    ``ws_connect`` would, presenting the context's client certificate and credential to
    wherever the redirect points; the redirect is a refusal of the upgrade instead."""
    connector = (
        aiohttp.TCPConnector(limit=limit, ssl=ssl_context)
        if socks is None
        else SocksConnector(socks, limit=limit, ssl=ssl_context)
    )
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        read_bufsize=_READ_BUFSIZE,
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=[_NO_UPGRADE_REDIRECTS],
    )


async def _refuse_upgrade_redirect(
    session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestRedirectParams
) -> None:
    """A redirect answering an upgrade request ends it: aiohttp's ``ws_connect`` has no
    ``allow_redirects``; raised here, before the redirect is followed."""
    if "Upgrade" not in params.headers:
        return
    resp = params.response
    resp.close()
    raise aiohttp.WSServerHandshakeError(
        resp.request_info,
        (),
        status=resp.status,
        message=f"a redirect answered the upgrade ({resp.headers.get('Location', '')[:200]!r} "
        "not followed)",
        headers=resp.headers,
    )


_NO_UPGRADE_REDIRECTS = aiohttp.TraceConfig()
_NO_UPGRADE_REDIRECTS.on_request_redirect.append(_refuse_upgrade_redirect)
_NO_UPGRADE_REDIRECTS.freeze()


def _strip_dynamic_credentials(config: dict[str, Any]) -> None:
    """Leave a refreshing credential to our provider: kubernetes-asyncio must not run it."""
    for item in config.get("users") or ():
        body = item.get("user") if isinstance(item, dict) else None
        if isinstance(body, dict):
            for key in ("exec", "tokenFile", "auth-provider"):
                body.pop(key, None)


def _remove_private_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    # anything kubernetes-asyncio wrote there itself (exec plugin certificates) sits in its
    # module-level cache too: drop those entries, their files are gone
    from kubernetes_asyncio.config import kube_config

    cache = getattr(kube_config, "_temp_files", None)
    if isinstance(cache, dict):
        prefix = folder + os.sep
        for key in [k for k, v in cache.items() if str(v).startswith(prefix)]:
            del cache[key]


def _shorten(text: str) -> str:
    # kubernetes-asyncio error messages can quote config values (a server URL with a
    # password): redact URL userinfo and keep them short.
    text = redact_text(text)
    return text if len(text) < 300 else text[:300] + "..."
