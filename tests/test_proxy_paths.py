"""Context names in paths, and API path parsing (pure functions)."""

from __future__ import annotations

import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemux.proxy import decode_context, encode_context
from kubemux.proxy._api.paths import parse_api_path, split_raw_path

NAMES = [
    "prod",
    "arn:aws:eks:eu-west-1:123456789012:cluster/prod",
    "gke_my-project_europe-west1-b_prod",
    "alice@prod",
    "my context",
    "~tilde",
    "..",
    ".hidden",
    "a%2Fb",
    "über/ß",
]


@pytest.mark.parametrize("name", NAMES)
def test_encoded_names_round_trip_and_use_only_safe_characters(name: str) -> None:
    segment = encode_context(name)
    assert set(segment) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:@"
    )
    assert segment not in (".", "..")
    assert "/" not in segment and "%" not in segment
    assert decode_context(segment.encode()) == name


def test_readable_names_stay_readable() -> None:
    assert encode_context("prod") == "prod"
    assert encode_context("alice@prod") == "alice@prod"
    assert encode_context("arn:aws:eks:r:1:cluster/prod") == "arn:aws:eks:r:1:cluster~2Fprod"
    assert encode_context("my context") == "my~20context"


@given(st.text(min_size=1, max_size=60).filter(lambda s: "\x00" not in s))
def test_any_name_round_trips(name: str) -> None:
    assert decode_context(encode_context(name).encode()) == name


def test_percent_encoded_segments_are_accepted() -> None:
    # a frontend writing encodeURIComponent(name), as Headlamp's does
    name = "arn:aws:eks:r:1:cluster/prod"
    assert decode_context(urllib.parse.quote(name, safe="").encode()) == name


@pytest.mark.parametrize("segment", [b"", b"a~", b"a~2", b"a~zz", b"a%00b", b"a~00", b"\xff"])
def test_malformed_segments(segment: bytes) -> None:
    assert decode_context(segment) is None


def test_empty_name_has_no_segment() -> None:
    with pytest.raises(ValueError, match="empty"):
        encode_context("")


@pytest.mark.parametrize(
    "raw",
    [
        b"/api/v1/namespaces/default/pods/../../secrets",
        b"/api/v1/./pods",
        b"/api/v1/namespaces/a%2F..%2Fb/pods",
        b"/api/v1/namespaces/a%2fb/pods",
        b"/api/v1/pods%5Cx",
        b"/api//v1/pods",
        b"/api/v1/pods/%2E%2E",
        b"/api/v1/pods/%00",
    ],
)
def test_paths_that_could_mean_something_else_are_refused(raw: bytes) -> None:
    assert parse_api_path(raw) is None


def test_api_paths() -> None:
    pod = parse_api_path(b"/api/v1/namespaces/default/pods/web-1")
    assert pod is not None and pod.is_object
    assert (pod.group, pod.version, pod.namespace, pod.plural, pod.name) == (
        "",
        "v1",
        "default",
        "pods",
        "web-1",
    )
    log = parse_api_path(b"/api/v1/namespaces/default/pods/web-1/log")
    assert log is not None and log.subresource == "log" and not log.is_object
    deployments = parse_api_path(b"/apis/apps/v1/deployments")
    assert deployments is not None and deployments.is_collection
    assert (deployments.group, deployments.plural) == ("apps", "deployments")
    namespace = parse_api_path(b"/api/v1/namespaces/web")
    assert namespace is not None and (namespace.plural, namespace.name) == ("namespaces", "web")
    status = parse_api_path(b"/api/v1/namespaces/web/status")
    assert status is not None
    assert (status.plural, status.name, status.subresource) == ("namespaces", "web", "status")
    for raw in (b"/api", b"/apis", b"/api/v1", b"/apis/apps", b"/apis/apps/v1", b"/version"):
        found = parse_api_path(raw)
        assert found is not None and found.kind == "discovery", raw
    openapi = parse_api_path(b"/openapi/v3/apis/apps/v1")
    assert openapi is not None and openapi.kind == "discovery"
    other = parse_api_path(b"/healthz")
    assert other is not None and other.kind == "other"


def test_split_raw_path_under_mounts() -> None:
    assert split_raw_path(b"/clusters/a~2Fb/api", "/clusters") == b"/a~2Fb/api"
    assert split_raw_path(b"/k8s/clusters/a%2Fb/api", "/k8s/clusters") == b"/a%2Fb/api"
    assert split_raw_path(b"/k%38s/clusters/x/api", "/k8s/clusters") == b"/x/api"
    assert split_raw_path(b"/other/clusters/x", "/k8s/clusters") is None
    assert split_raw_path(b"/x/api", "") == b"/x/api"
