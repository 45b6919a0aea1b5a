"""A hostile discovery document (issue 18, point 1).

An aggregated API server can serve any discovery document. None of it may point a request
at another resource (``/api/v1/secrets``, with the user's token): group, version and plural
must be names kube-apiserver could serve, legacy per-resource group/version overrides are
ignored, a plural holding ``/`` is never a top-level resource, and every URL segment is
quoted. Whether values are redacted or kept out of Redis follows what is read (the core
``secrets`` resource), never the kind discovery declares.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemux import KubemuxError, Resource, UnknownResource, WatcherRegistry
from kubemux._http.client import open_client
from kubemux._informer import discovery as _discovery
from kubemux._informer.discovery import Discovery, parse_aggregated, parse_resource_list
from kubemux._resources import name_problem, path_segment
from kubemux.dashboard import views
from kubemux.testing import FakeCluster, write_kubeconfig

TIMEOUT = 10
PASSWORD = "aHVudGVyMi10aGUtcGxhaW50ZXh0"  # base64 of a password


def secret(name: str = "db") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"password": PASSWORD},
    }


def aggregated_group(group: str, version: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = {"name": group} if group else {}
    return {
        "metadata": metadata,
        "versions": [{"version": version, "resources": resources, "freshness": "Current"}],
    }


def aggregated_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": list(items),
    }


def api_resource(plural: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "resource": plural,
        "responseKind": {"group": "", "version": "", "kind": kind},
        "scope": "Namespaced",
        "singularResource": kind.lower(),
        "verbs": ["get", "list", "watch"],
        **extra,
    }


def secrets_requests(cluster: FakeCluster) -> list[str]:
    """Every request that reached the core secrets resource (or any path naming secrets)."""
    return [r.path for r in cluster.requests if "secrets" in r.path]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """What was warned about is remembered process-wide: each test starts with none."""
    monkeypatch.setattr(_discovery, "_warned", {})


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(name="hostile") as c:
        c.create("secrets", secret())
        yield c


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "kubemux._informer.discovery"
        and r.levelno == logging.WARNING
        and text in r.getMessage()
    ]


# ------------------------------------------------------------------ names and paths
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("version", "../../api/v1/secrets#"),
        ("version", "../../api/v1/secrets?x="),
        ("version", "v1/../../api/v1"),
        ("version", ".."),
        ("version", "V1"),
        ("version", "1"),
        ("version", ""),
        ("version", "v" * 64),
        ("plural", "../../../api/v1/secrets"),
        ("plural", "widgets/status"),
        ("plural", "Widgets"),
        ("plural", "wid%2Fgets"),
        ("plural", "wid gets"),
        ("plural", "."),
        ("plural", ""),
        ("group", ".."),
        ("group", "evil.io/../../api"),
        ("group", "Evil.io"),
        ("group", "evil.io."),
        ("group", "a" * 254),
        ("group", 5),
    ],
)
def test_names_kube_apiserver_could_not_serve_are_refused(field: str, value: object) -> None:
    assert name_problem(field, value) is not None
    parts: dict[str, Any] = {"group": "evil.io", "version": "v1", "plural": "widgets"}
    parts[field] = value
    with pytest.raises(ValueError, match=f"invalid resource: {field}"):
        Resource(**parts)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group", ""),
        ("group", "metrics.k8s.io"),
        ("group", "x-1.example.com"),
        ("version", "v1"),
        ("version", "v1beta1"),
        ("version", "v2alpha3"),
        ("plural", "pods"),
        ("plural", "horizontalpodautoscalers"),
        ("plural", "queue_messages_ready"),  # a metrics adapter's resource name
    ],
)
def test_names_real_servers_use_are_accepted(field: str, value: str) -> None:
    assert name_problem(field, value) is None


def test_every_path_segment_is_quoted_and_dot_segments_refused() -> None:
    pods = Resource(group="", version="v1", plural="pods")
    assert pods.path("a/b?c#d") == "/api/v1/namespaces/a%2Fb%3Fc%23d/pods"
    assert pods.object_path("ns", "web/../x?y") == "/api/v1/namespaces/ns/pods/web%2F..%2Fx%3Fy"
    for bad in (".", ".."):
        with pytest.raises(ValueError, match="may not be"):
            pods.path(bad)
        with pytest.raises(ValueError, match="may not be"):
            pods.object_path("ns", bad)
        with pytest.raises(ValueError, match="may not be"):
            path_segment(bad)
    with pytest.raises(ValueError, match="needs a name"):
        pods.object_path("ns", "")


def test_the_secret_predicate_is_what_is_read_not_the_kind() -> None:
    assert Resource(group="", version="v1", plural="secrets", kind="Widget").is_secret
    assert Resource(group="", version="v1", plural="secrets").is_secret
    assert not Resource(group="evil.io", version="v1", plural="secrets", kind="Secret").is_secret
    assert not Resource(group="", version="v1", plural="configmaps", kind="Secret").is_secret


# ------------------------------------------------------------------ parsing
def test_aggregated_drops_bad_names_and_slashed_plurals() -> None:
    doc = aggregated_list(
        aggregated_group("evil.io", "../../api/v1/secrets#", [api_resource("widgets", "Widget")]),
        aggregated_group(
            "evil.io",
            "v1",
            [
                api_resource("../../../api/v1/secrets", "Widget"),
                api_resource("widgets/status", "Widget"),
                api_resource("gadgets", "Gadget"),
            ],
        ),
        aggregated_group("", "v1", [api_resource("pods", "Pod")]),  # the core group in /apis
    )
    dropped: _discovery.Dropped = []
    found = parse_aggregated(doc, core=False, dropped=dropped)
    assert [(r.group, r.version, r.plural) for r in found] == [("evil.io", "v1", "gadgets")]
    text = "\n".join(why for _, why in dropped)
    for bad in ("'../../api/v1/secrets#'", "'../../../api/v1/secrets'", "'widgets/status'"):
        assert bad in text
    assert "/apis lists no core group" in text


def test_aggregated_responsekind_group_and_version_are_ignored() -> None:
    entry = api_resource("widgets", "Widget")
    entry["responseKind"] = {"group": "", "version": "v1", "kind": "Widget"}
    (found,) = parse_aggregated(aggregated_list(aggregated_group("evil.io", "v1", [entry])))
    assert (found.group, found.version, found.plural) == ("evil.io", "v1", "widgets")


def test_legacy_per_resource_group_and_version_are_ignored() -> None:
    doc = {
        "kind": "APIResourceList",
        "groupVersion": "evil.io/v1",
        "resources": [
            {"name": "secrets", "kind": "Widget", "group": "", "version": "v1", "namespaced": True},
            {"name": "widgets", "kind": "Widget", "version": "../../api/v1/secrets#"},
        ],
    }
    found = parse_resource_list(doc, "evil.io/v1")
    assert [(r.group, r.version, r.plural) for r in found] == [
        ("evil.io", "v1", "secrets"),
        ("evil.io", "v1", "widgets"),
    ]
    assert not any(r.is_secret for r in found)


def test_a_legacy_list_that_says_it_is_another_group_version_is_dropped() -> None:
    doc = {
        "kind": "APIResourceList",
        "groupVersion": "v1",  # asked for evil.io/v1, answers as the core group
        "resources": [{"name": "secrets", "kind": "Widget", "namespaced": True}],
    }
    dropped: _discovery.Dropped = []
    assert parse_resource_list(doc, "evil.io/v1", dropped=dropped) == []
    assert "groupVersion 'v1'" in dropped[0][1]


@pytest.mark.parametrize(
    "doc",
    [
        {"items": [{"metadata": [], "versions": {}}]},
        {"items": [{"metadata": {"name": 5}, "versions": [{"version": ["v1"]}]}]},
        {"items": [{"versions": [{"version": "v1", "resources": [{"resource": {"a": 1}}]}]}]},
        {
            "items": [
                {
                    "versions": [
                        {"version": "v1", "resources": [{"resource": "x", "responseKind": "K"}]}
                    ]
                }
            ]
        },
        {"items": "nope"},
    ],
)
def test_malformed_aggregated_documents_never_crash(doc: dict[str, Any]) -> None:
    found = parse_aggregated(doc, core=True, dropped=[])
    assert all(isinstance(r, Resource) for r in found)


# ------------------------------------------------------------------ end to end
HOSTILE = {
    "version #": ("../../api/v1/secrets#", "widgets"),
    "version ?": ("../../api/v1/secrets?x=", "widgets"),
    "plural": ("v1", "../../../api/v1/secrets"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_aggregated_document_never_reaches_secrets(
    tmp_path: Path, cluster: FakeCluster, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    version, plural = HOSTILE[case]
    caplog.set_level(logging.WARNING, logger="kubemux")
    cluster.serve_discovery(
        "/apis",
        aggregated_list(
            aggregated_group(
                "evil.io", version, [api_resource(plural, "Widget", shortNames=["wd"])]
            ),
            aggregated_group("good.io", "v1", [api_resource("gadgets", "Gadget")]),
        ),
    )
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            names = {r.name for r in await registry.resources("c")}
            assert "gadgets.good.io" in names and "widgets.evil.io" not in names
            for name in ("widgets", "wd", "Widget", "widgets.evil.io"):
                with pytest.raises(UnknownResource):
                    await registry.watch("c", name)
            await registry.resources("c")
    assert secrets_requests(cluster) == []
    bad = version if case != "plural" else plural
    # named once, though discovery was fetched again on each miss
    assert len(warnings_about(caplog, repr(bad))) == 1, caplog.text


async def test_a_hostile_legacy_document_never_reaches_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kubemux")
    async with FakeCluster(name="legacy", aggregated_discovery=False) as cluster:
        cluster.create("secrets", secret())
        cluster.serve_discovery("/api", {"kind": "APIVersions", "versions": ["v1", ".."]})
        hostile_gv = "evil.io/../../api/v1/secrets#"
        cluster.serve_discovery(
            "/apis",
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": "evil.io",
                        "versions": [
                            {"groupVersion": hostile_gv, "version": "../../api/v1/secrets#"},
                            {"groupVersion": "evil.io/v1", "version": "v1"},
                            {"groupVersion": "evil.io/v2", "version": "v2"},
                        ],
                        "preferredVersion": {"groupVersion": hostile_gv},
                    }
                ],
            },
        )
        # per-resource overrides that would make "widgets" the core secrets
        cluster.serve_discovery(
            "/apis/evil.io/v1",
            {
                "kind": "APIResourceList",
                "groupVersion": "evil.io/v1",
                "resources": [
                    {
                        "name": "secrets",
                        "singularName": "widget",
                        "kind": "Widget",
                        "group": "",
                        "version": "v1",
                        "namespaced": True,
                        "verbs": ["list", "watch"],
                    }
                ],
            },
        )
        # a list that answers as the core group
        cluster.serve_discovery(
            "/apis/evil.io/v2",
            {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [{"name": "secrets", "kind": "Gadget", "namespaced": True}],
            },
        )
        path = write_kubeconfig(tmp_path / "config", {"c": cluster})
        async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
            with anyio.fail_after(TIMEOUT):
                served = await registry.resources("c")
                (widget,) = [r for r in served if r.kind == "Widget"]
                assert (widget.group, widget.version, widget.plural) == ("evil.io", "v1", "secrets")
                assert not widget.is_secret
                assert not [r for r in served if r.kind == "Gadget"]
                with pytest.raises(KubemuxError):  # /apis/evil.io/v1/secrets: not served
                    await registry.watch("c", "widget")
                with pytest.raises(UnknownResource):
                    await registry.watch("c", "gadget")
        # only the resource discovery named: evil.io's own secrets, never the core ones
        assert [p for p in secrets_requests(cluster) if not p.startswith("/apis/evil.io/v1/")] == []
        assert "/" not in {r.path for r in cluster.requests}  # "/api/.." was never asked for
    assert len(warnings_about(caplog, repr(hostile_gv))) == 1, caplog.text
    assert len(warnings_about(caplog, "groupVersion 'v1'")) == 1, caplog.text


async def test_a_bad_value_is_warned_about_once_per_context_not_per_fetch(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kubemux")
    many = [api_resource(f"Bad{i}", "Widget") for i in range(50)]
    cluster.serve_discovery(
        "/apis",
        aggregated_list(aggregated_group("evil.io", "v1", [api_resource("w/x", "W"), *many])),
    )
    from kubemux import ContextConfig
    from kubemux.testing import kubeconfig_dict

    config = ContextConfig.from_dict("c", kubeconfig_dict({"c": cluster}))  # type: ignore[arg-type]
    async with open_client(config) as client:
        disco = Discovery(client)
        with anyio.fail_after(TIMEOUT):
            for _ in range(4):
                await disco.refresh()
        assert disco.fetches == 4
        assert len(disco.dropped) == 51
    named = warnings_about(caplog, "dropped:")
    # 51 bad values: 20 named per fetch, each once; the rest announced as waiting
    assert len(named) == 51 and len(set(named)) == 51
    assert len(warnings_about(caplog, "'w/x'")) == 1
    assert len(warnings_about(caplog, "more invalid names")) == 2


# ------------------------------------------------------------------ what is read decides
def core_secrets_called_widgets() -> dict[str, Any]:
    """``/api`` serving the core secrets under another kind and short name."""
    return aggregated_list(
        aggregated_group(
            "",
            "v1",
            [
                api_resource("pods", "Pod", shortNames=["po"]),
                api_resource("secrets", "Widget", shortNames=["wd"]),
            ],
        )
    )


def test_the_dashboard_redacts_by_what_is_read() -> None:
    listed = {"metadata": {"name": "db", "namespace": "default"}, "data": {"password": PASSWORD}}
    # a LIST item (no kind of its own) read from the core secrets called "Widget"
    shown = views.redact(Resource(group="", version="v1", plural="secrets", kind="Widget"), listed)
    assert shown["data"] == {"password": "(redacted)"}
    # a custom resource declaring kind Secret is still redacted (it says it is one)
    evil = Resource(group="evil.io", version="v1", plural="widgets", kind="Widget")
    assert views.redact(evil, {**listed, "kind": "Secret"})["data"] == {"password": "(redacted)"}


async def test_core_secrets_under_another_name_resolve_as_secrets(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    cluster.serve_discovery("/api", core_secrets_called_widgets())
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})
    async with WatcherRegistry.from_kubeconfig(str(path)) as registry:
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("c", "wd")
        assert store.resource.kind == "Widget" and store.resource.is_secret
        (obj,) = store.list()
        assert views.redact(store.resource, obj)["data"] == {"password": "(redacted)"}


async def test_core_secrets_under_another_name_stay_out_of_redis(
    tmp_path: Path, cluster: FakeCluster, redis_server: Any
) -> None:
    pytest.importorskip("redis")
    from kubemux.share import Redis
    from test_share_secrets import redis_dump

    cluster.serve_discovery("/api", core_secrets_called_widgets())
    path = write_kubeconfig(tmp_path / "config", {"c": cluster})

    def replica() -> WatcherRegistry:
        share = Redis(redis_server.url, prefix="t", lease_ttl=1.5, acquire_period=0.25)
        return WatcherRegistry.from_kubeconfig(str(path), share=share)

    async with replica() as one, replica() as two:
        with anyio.fail_after(TIMEOUT):
            await one.watch("c", "wd")
            await two.watch("c", "wd")
            await one.watch("c", "pods")  # shared: Redis is in use
        roles = {
            i.share_role
            for r in (one, two)
            for i in r.status().contexts["c"].informers
            if i.resource == "secrets"
        }
        assert roles == {"local"}
        dump = await redis_dump(redis_server)
    assert PASSWORD.encode() not in dump and b'"db"' not in dump
