"""Resource names on their own: parse_resource, known_resource, register_resource, Resource."""

from __future__ import annotations

import dataclasses
import re

import pytest

from kubemux import _resources
from kubemux._resources import (
    BUILTIN_RESOURCES,
    Resource,
    known_resource,
    parse_resource,
    register_resource,
)

PODS = Resource(group="", version="v1", plural="pods", kind="Pod")
NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
DEPLOYMENTS = Resource(group="apps", version="v1", plural="deployments", kind="Deployment")
WIDGETS = Resource(group="example.com", version="v1", plural="widgets", kind="Widget")


@pytest.fixture(autouse=True)
def builtins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registration is process-wide (other tests register CRDs such as ``widgets``): each
    test here starts from the built-in table, and what it registers goes away after it."""
    monkeypatch.setattr(_resources, "_registry", dict(_resources._builtin_registry))
    monkeypatch.setattr(_resources, "_bare", dict(_resources._builtin_bare))


# ---------------------------------------------------------------- parse_resource


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("pods", PODS),
        ("nodes", NODES),
        ("deployments", DEPLOYMENTS),
        (" Pods ", PODS),  # trimmed, case-insensitive like kubectl
        ("DEPLOYMENTS.APPS", DEPLOYMENTS),
    ],
)
def test_plural(spec: str, expected: Resource) -> None:
    found = parse_resource(spec)
    assert found == expected
    assert (found.kind, found.namespaced) == (expected.kind, expected.namespaced)


@pytest.mark.parametrize(
    ("spec", "plural", "group"),
    [
        ("po", "pods", ""),
        ("pod", "pods", ""),
        ("svc", "services", ""),
        ("cm", "configmaps", ""),
        ("ns", "namespaces", ""),
        ("no", "nodes", ""),
        ("pvc", "persistentvolumeclaims", ""),
        ("deploy", "deployments", "apps"),
        ("sts", "statefulsets", "apps"),
        ("ds", "daemonsets", "apps"),
        ("cj", "cronjobs", "batch"),
        ("ing", "ingresses", "networking.k8s.io"),
        ("crd", "customresourcedefinitions", "apiextensions.k8s.io"),
        ("crds", "customresourcedefinitions", "apiextensions.k8s.io"),
    ],
)
def test_short_names(spec: str, plural: str, group: str) -> None:
    found = parse_resource(spec)
    assert (found.plural, found.group) == (plural, group)


def test_short_name_with_group() -> None:
    assert parse_resource("deploy.apps") == DEPLOYMENTS


def test_plural_dot_group() -> None:
    assert parse_resource("deployments.apps") == DEPLOYMENTS
    events = parse_resource("events.events.k8s.io")
    assert (events.group, events.version, events.kind) == ("events.k8s.io", "v1", "Event")


def test_bare_plural_prefers_the_core_group() -> None:
    assert parse_resource("events").group == ""
    assert parse_resource("ev").group == ""


def test_plural_version_group_of_a_builtin() -> None:
    assert parse_resource("deployments.v1.apps") == DEPLOYMENTS
    other = parse_resource("deployments.v1beta2.apps")
    assert other == dataclasses.replace(DEPLOYMENTS, version="v1beta2")
    assert other.kind == "Deployment"  # what is known about it is kept


def test_plural_version_group_of_a_custom_resource() -> None:
    found = parse_resource("gadgets.v1alpha1.test-resources.example.com")
    assert found == Resource(
        group="test-resources.example.com", version="v1alpha1", plural="gadgets", kind=""
    )
    assert found.namespaced  # unknown scope: the default


@pytest.mark.parametrize(("spec", "expected"), [("pods.v1", PODS), ("nodes.v1", NODES)])
def test_core_with_explicit_version(spec: str, expected: Resource) -> None:
    assert parse_resource(spec) == expected


def test_resource_passes_through() -> None:
    assert parse_resource(WIDGETS) is WIDGETS


@pytest.mark.parametrize(
    "spec",
    [
        "widgets",  # not built in, not registered
        "widgets.example.com",  # a group without a version: unknown
        "pods.notagroup",
        "deployments.v1",  # "v1" alone means the core group, and deployments are not core
        "gadgets.v1",
        "gadgets.v.example.com",  # "v" is not a version
        "gadgets.version1.example.com",
    ],
)
def test_unknown_names(spec: str) -> None:
    message = f"unknown resource {spec!r}: use plural.version.group for custom resources"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_resource(spec)


@pytest.mark.parametrize("spec", ["", "   ", "\t\n"])
def test_empty_names(spec: str) -> None:
    with pytest.raises(ValueError, match=r"^empty resource name$"):
        parse_resource(spec)


def test_every_builtin_resolves_to_itself() -> None:
    for resource in BUILTIN_RESOURCES:
        assert parse_resource(resource.name) == resource
        if resource.group:
            assert (
                parse_resource(f"{resource.plural}.{resource.version}.{resource.group}") == resource
            )


# ---------------------------------------------------------------- register_resource


def test_registered_resource_resolves_by_short_forms() -> None:
    with pytest.raises(ValueError, match="unknown resource 'widgets'"):
        parse_resource("widgets")
    assert register_resource(WIDGETS) is WIDGETS
    assert parse_resource("widgets") is WIDGETS
    assert parse_resource("widgets.example.com") is WIDGETS
    v2 = parse_resource("widgets.v2.example.com")
    assert (v2.version, v2.kind) == ("v2", "Widget")
    assert register_resource(WIDGETS) is WIDGETS  # idempotent
    assert parse_resource("widgets") is WIDGETS


def test_registering_does_not_shadow_a_builtin_bare_name() -> None:
    other_events = Resource(group="example.com", version="v1", plural="events", kind="Event")
    register_resource(other_events)
    assert parse_resource("events").group == ""
    assert parse_resource("events.example.com") is other_events


# ---------------------------------------------------------------- known_resource


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("pods", PODS),
        ("po", PODS),
        (" PODS ", PODS),
        ("nodes", NODES),
        ("deployments.apps", DEPLOYMENTS),
        ("deploy.apps", DEPLOYMENTS),
        ("deployments.v1.apps", DEPLOYMENTS),  # the full form skips discovery too
    ],
)
def test_known_builtins(spec: str, expected: Resource) -> None:
    assert known_resource(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "widgets",
        "widgets.example.com",
        "widgets.v1.example.com",
        "pods.nogroup",
        "deployments.v1beta1.apps",  # another version: discovery decides whether it is served
    ],
)
def test_unknown_is_none(spec: str) -> None:
    assert known_resource(spec) is None


def test_registered_resources_are_not_known() -> None:
    register_resource(WIDGETS)
    assert parse_resource("widgets") is WIDGETS
    assert known_resource("widgets") is None
    assert known_resource("widgets.example.com") is None


# ---------------------------------------------------------------- Resource


@pytest.mark.parametrize(
    ("resource", "namespace", "path"),
    [
        (PODS, None, "/api/v1/pods"),
        (PODS, "default", "/api/v1/namespaces/default/pods"),
        (PODS, "", "/api/v1/pods"),  # an empty namespace: cluster-wide
        (PODS, "a/b c", "/api/v1/namespaces/a%2Fb%20c/pods"),  # quoted
        (NODES, None, "/api/v1/nodes"),
        (NODES, "default", "/api/v1/nodes"),  # cluster-scoped: the namespace is ignored
        (DEPLOYMENTS, None, "/apis/apps/v1/deployments"),
        (DEPLOYMENTS, "prod", "/apis/apps/v1/namespaces/prod/deployments"),
        (WIDGETS, "prod", "/apis/example.com/v1/namespaces/prod/widgets"),
        (
            Resource(group="example.com", version="v2", plural="clusterwidgets", namespaced=False),
            "prod",
            "/apis/example.com/v2/clusterwidgets",
        ),
    ],
)
def test_path(resource: Resource, namespace: str | None, path: str) -> None:
    assert resource.path(namespace) == path


def test_path_defaults_to_cluster_wide() -> None:
    assert DEPLOYMENTS.path() == "/apis/apps/v1/deployments"


def test_api_version_and_name() -> None:
    assert PODS.api_version == "v1"
    assert DEPLOYMENTS.api_version == "apps/v1"
    assert WIDGETS.api_version == "example.com/v1"
    assert (PODS.name, str(PODS)) == ("pods", "pods")
    assert (DEPLOYMENTS.name, str(DEPLOYMENTS)) == ("deployments.apps", "deployments.apps")


def test_equality_ignores_discovery_fields() -> None:
    discovered = dataclasses.replace(
        DEPLOYMENTS,
        singular="deployment",
        short_names=("deploy",),
        categories=("all",),
        verbs=("get", "list", "watch"),
    )
    assert discovered == DEPLOYMENTS
    assert hash(discovered) == hash(DEPLOYMENTS)
    assert {discovered: 1}[DEPLOYMENTS] == 1
    assert repr(discovered) == repr(DEPLOYMENTS)
    assert "short_names" not in repr(discovered)


@pytest.mark.parametrize(
    "change",
    [
        {"group": "extensions"},
        {"version": "v2"},
        {"plural": "replicasets"},
        {"kind": "Other"},
        {"namespaced": False},
    ],
)
def test_equality_counts_identity_fields(change: dict[str, object]) -> None:
    assert dataclasses.replace(DEPLOYMENTS, **change) != DEPLOYMENTS  # type: ignore[arg-type]


def test_resource_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        PODS.plural = "services"  # type: ignore[misc]
