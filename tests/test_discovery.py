"""kubemux._informer.discovery: parsing discovery documents, kubectl's name resolution, the cache."""

from __future__ import annotations

import anyio
import pytest

from kubemux import ContextConfig, Resource, ResourceNotFound
from kubemux._errors import ClusterUnreachable, Forbidden, UnknownResource
from kubemux._http.client import open_client
from kubemux._informer.discovery import (
    Discovery,
    in_category,
    parse_aggregated,
    parse_resource_list,
    preferred,
    resolve,
    suggest,
)
from kubemux.testing import FakeCluster, kubeconfig_dict
from kubemux.testing._apiserver.discovery import aggregated, resource_list
from kubemux.testing._state.state import ObjectStore

TOKEN = "t"


def fake_store() -> ObjectStore:
    """A fake cluster's data (no server): built-ins plus a few CRDs."""
    store = ObjectStore(history_limit=10, on_change=lambda: None)
    store.create(
        "customresourcedefinitions",
        crd("example.com", "widgets", "Widget", ["v1", "v1beta1"], short=["wd"], cats=["all"]),
    )
    # a short name that collides with a built-in's short name, in a later group
    store.create(
        "customresourcedefinitions", crd("zoo.io", "pandas", "Panda", ["v1"], short=["po"])
    )
    # a plural that another group also has
    store.create("customresourcedefinitions", crd("other.io", "deployments", "Deployment", ["v1"]))
    return store


def crd(
    group: str,
    plural: str,
    kind: str,
    versions: list[str],
    *,
    short: list[str] | None = None,
    cats: list[str] | None = None,
) -> dict[str, object]:
    names: dict[str, object] = {"plural": plural, "singular": kind.lower(), "kind": kind}
    if short:
        names["shortNames"] = short
    if cats:
        names["categories"] = cats
    return {
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {"name": v, "served": True, "storage": i == 0} for i, v in enumerate(versions)
            ],
        },
    }


@pytest.fixture(scope="module")
def served() -> list[Resource]:
    store = fake_store()
    core = parse_aggregated(aggregated(store, core=True, version="v2"))
    named = parse_aggregated(aggregated(store, core=False, version="v2"))
    return core + named


# ------------------------------------------------------------------------------ parsing
def test_parse_aggregated_fields(served: list[Resource]) -> None:
    pods = next(r for r in served if r.plural == "pods")
    assert pods == Resource(group="", version="v1", plural="pods", kind="Pod")
    assert (pods.singular, pods.short_names, pods.categories) == ("pod", ("po",), ("all",))
    assert pods.verbs == ("get", "list", "watch") and pods.namespaced
    nodes = next(r for r in served if r.plural == "nodes")
    assert not nodes.namespaced
    widgets = [r for r in served if r.plural == "widgets"]
    assert [w.version for w in widgets] == ["v1", "v1beta1"]  # every version, preferred first
    assert widgets[0].short_names == ("wd",) and widgets[0].kind == "Widget"
    assert [w.version for w in preferred(served) if w.plural == "widgets"] == ["v1"]


def test_parse_legacy_matches_aggregated() -> None:
    store = fake_store()
    legacy = parse_resource_list(resource_list(store, "", "v1") or {})
    legacy_apps = parse_resource_list(resource_list(store, "apps", "v1") or {})
    agg = parse_aggregated(aggregated(store, core=True, version="v2"))
    assert [(r, r.singular, r.short_names, r.verbs) for r in legacy] == [
        (r, r.singular, r.short_names, r.verbs) for r in agg
    ]
    assert {r.kind for r in legacy_apps} >= {"Deployment", "StatefulSet"}
    with_sub = parse_resource_list(
        {
            "groupVersion": "v1",
            "resources": [
                {"name": "pods", "kind": "Pod", "namespaced": True},
                {"name": "pods/log", "kind": "Pod", "namespaced": True},
            ],
        }
    )
    assert [r.plural for r in with_sub] == ["pods"] and with_sub[0].singular == "pod"


def test_resource_equality_ignores_discovery_fields() -> None:
    plain = Resource(group="apps", version="v1", plural="deployments", kind="Deployment")
    found = Resource(
        group="apps",
        version="v1",
        plural="deployments",
        kind="Deployment",
        short_names=("deploy",),
        verbs=("list",),
    )
    assert plain == found and hash(plain) == hash(found)
    assert {plain: 1}[found] == 1


# ------------------------------------------------------------------------------ resolution
@pytest.mark.parametrize(
    ("name", "group", "version", "plural"),
    [
        ("pods", "", "v1", "pods"),
        ("pod", "", "v1", "pods"),
        ("PODS", "", "v1", "pods"),
        ("Pod", "", "v1", "pods"),
        ("po", "", "v1", "pods"),  # the core short name wins over the later pandas' "po"
        ("deploy", "apps", "v1", "deployments"),
        ("Deployment", "apps", "v1", "deployments"),  # apps is listed before other.io
        ("deployments.other.io", "other.io", "v1", "deployments"),
        ("Deployment.other.io", "other.io", "v1", "deployments"),
        ("deployments.apps", "apps", "v1", "deployments"),
        ("deployments.v1.apps", "apps", "v1", "deployments"),
        ("deploy.apps", "apps", "v1", "deployments"),
        ("po.zoo.io", "zoo.io", "v1", "pandas"),
        ("events", "", "v1", "events"),  # core before events.k8s.io
        ("events.events.k8s.io", "events.k8s.io", "v1", "events"),
        ("ev", "", "v1", "events"),
        ("widgets", "example.com", "v1", "widgets"),
        ("widget", "example.com", "v1", "widgets"),
        ("WIDGET", "example.com", "v1", "widgets"),
        ("wd", "example.com", "v1", "widgets"),
        ("widgets.example.com", "example.com", "v1", "widgets"),
        ("widgets.v1beta1.example.com", "example.com", "v1beta1", "widgets"),
        ("Widget.v1beta1.example.com", "example.com", "v1beta1", "widgets"),
        ("wd.example", "example.com", "v1", "widgets"),  # group prefix, short names only
        ("crd", "apiextensions.k8s.io", "v1", "customresourcedefinitions"),
        ("ns", "", "v1", "namespaces"),
        ("  svc ", "", "v1", "services"),
    ],
)
def test_resolve_like_kubectl(
    served: list[Resource], name: str, group: str, version: str, plural: str
) -> None:
    res = resolve(name, served)
    assert (res.group, res.version, res.plural) == (group, version, plural)


def test_resolve_unknown_names_suggest(served: list[Resource]) -> None:
    with pytest.raises(UnknownResource) as info:
        resolve("widgts", served, context="prod")
    err = info.value
    assert isinstance(err, ResourceNotFound) and isinstance(err, LookupError)
    assert err.suggestions[0] == "widgets.example.com"
    assert "doesn't have a resource type 'widgts' (context 'prod')" in str(err)
    assert "did you mean 'widgets.example.com'" in str(err)
    assert suggest("deploymnts", served)[0] == "deployments.apps"
    for bad in ("", "pods.v1", "widgets.v2.example.com", "deployments.nope.io", "nothinglikeit"):
        with pytest.raises(UnknownResource):
            resolve(bad, served)
    with pytest.raises(UnknownResource) as nothing:
        resolve("qqqqqqq", served)
    assert nothing.value.suggestions == () and "did you mean" not in str(nothing.value)


def test_categories(served: list[Resource]) -> None:
    names = [r.name for r in in_category("all", served)]
    assert names.index("pods") < names.index("deployments.apps")  # priority order
    assert {"pods", "services", "deployments.apps", "widgets.example.com"} <= set(names)
    assert "configmaps" not in names and "nodes" not in names
    assert [r.version for r in in_category("All", served) if r.plural == "widgets"] == ["v1"]
    assert in_category("nope", served) == []


def test_resource_values_resolve_without_discovery() -> None:
    custom = Resource(group="x.io", version="v9", plural="things")
    assert resolve(custom, []) is custom


# ------------------------------------------------------------------------------ Discovery
def config_for(cluster: FakeCluster) -> ContextConfig:
    return ContextConfig.from_dict("fake", kubeconfig_dict({"fake": cluster}))  # type: ignore[arg-type]


def discovery_requests(cluster: FakeCluster) -> list[str]:
    return [
        r.path
        for r in cluster.requests
        if r.path.startswith("/api") and r.path.count("/") <= 3 and "namespaces" not in r.path
    ]


@pytest.mark.parametrize("aggregated_discovery", [True, False])
async def test_discovery_fetches_and_caches(aggregated_discovery: bool) -> None:
    async with FakeCluster(tokens={TOKEN}, aggregated_discovery=aggregated_discovery) as cluster:
        cluster.add_crd(
            "example.com", "widgets", "Widget", short_names=["wd"], versions=["v1", "v2"]
        )
        async with open_client(config_for(cluster)) as client:
            disco = Discovery(client)
            assert disco.cached() is None
            with anyio.fail_after(10):
                resources = await disco.resources()
                names = {r.name for r in resources}
                assert {"pods", "deployments.apps", "widgets.example.com"} <= names
                widgets = next(r for r in resources if r.plural == "widgets")
                assert widgets.version == "v2" and widgets.short_names == ("wd",)
                assert disco.is_aggregated is aggregated_discovery
                paths = [r.path for r in cluster.requests]
                if aggregated_discovery:
                    assert paths == ["/api", "/apis"]
                else:
                    assert paths[:3] == ["/api", "/api/v1", "/apis"]
                    assert {
                        "/api/v1",
                        "/apis/apps/v1",
                        "/apis/example.com/v2",
                        "/apis/example.com/v1",
                    } <= set(paths)
                assert (await disco.resolve("wd")).version == "v2"
                assert (await disco.resolve("widgets.v1.example.com")).version == "v1"
                count = len(cluster.requests)
                await disco.resources()
                assert len(cluster.requests) == count and disco.fetches == 1  # cached


async def test_miss_refreshes_once_then_resolves_a_new_crd() -> None:
    now = [0.0]
    async with (
        FakeCluster(tokens={TOKEN}) as cluster,
        open_client(config_for(cluster)) as client,
    ):
        disco = Discovery(
            client, min_refresh_interval=5.0, refresh_period=60.0, clock=lambda: now[0]
        )
        with anyio.fail_after(10):
            await disco.resources()
            cluster.add_crd("example.com", "gadgets", "Gadget", short_names=["gd"])
            # within min_refresh_interval of the last fetch: no refresh, a clear error
            with pytest.raises(UnknownResource):
                await disco.resolve("gd")
            assert disco.fetches == 1
            now[0] = 10.0
            assert (await disco.resolve("gd")).plural == "gadgets"
            assert disco.fetches == 2
            # an unknown name refreshes at most once per call, and not again at once
            now[0] = 20.0
            with pytest.raises(UnknownResource) as info:
                await disco.resolve("gadgts")
            assert info.value.suggestions == ("gadgets.example.com",)
            assert disco.fetches == 3
            with pytest.raises(UnknownResource):
                await disco.resolve("gadgts")
            assert disco.fetches == 3
            # periodic: stale after refresh_period; a CRD gone is gone
            cluster.delete_crd("gadgets.example.com")
            now[0] = 100.0
            assert "gadgets.example.com" not in {r.name for r in await disco.resources()}
            assert disco.fetches == 4
            # Resource values never fetch
            assert await disco.resolve(Resource(group="a.io", version="v1", plural="x"))
            assert disco.fetches == 4


async def test_concurrent_refreshes_share_one_fetch() -> None:
    async with (
        FakeCluster(tokens={TOKEN}) as cluster,
        open_client(config_for(cluster)) as client,
    ):
        disco = Discovery(client)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(disco.resources)
        assert disco.fetches == 1
        assert [r.path for r in cluster.requests] == ["/api", "/apis"]


async def test_errors_and_stale_cache() -> None:
    now = [0.0]
    async with (
        FakeCluster(tokens={TOKEN}) as cluster,
        open_client(config_for(cluster)) as client,
    ):
        disco = Discovery(client, refresh_period=10.0, clock=lambda: now[0])
        cluster.fail_next(1, 403, reason="Forbidden", path_prefix="/apis")
        with anyio.fail_after(10), pytest.raises(Forbidden):
            await disco.resources()
        with anyio.fail_after(10):
            assert await disco.resources()
        now[0] = 50.0
        await cluster.stop()  # stale and unreachable: the cache is kept
        with anyio.fail_after(20):
            assert (await disco.resolve("po")).plural == "pods"
        await cluster.start()


async def test_legacy_group_failure_is_left_out() -> None:
    async with FakeCluster(tokens={TOKEN}, aggregated_discovery=False) as cluster:
        cluster.add_crd("example.com", "widgets", "Widget")
        cluster.fail_next(1, 503, reason="ServiceUnavailable", path_prefix="/apis/example.com/v1")
        async with open_client(config_for(cluster)) as client:
            disco = Discovery(client)
            with anyio.fail_after(10):
                names = {r.name for r in await disco.resources()}
            assert "pods" in names and "widgets.example.com" not in names
            assert disco.failed_groups == ("example.com/v1",)


async def test_unreachable_server_raises() -> None:
    cluster = FakeCluster(tokens={TOKEN})
    await cluster.start()
    config = config_for(cluster)
    await cluster.stop()
    async with open_client(config) as client:
        with anyio.fail_after(20), pytest.raises(ClusterUnreachable):
            await Discovery(client, request_timeout=5).resources()
