"""The public surface: kubemux.__all__ and kubemux.testing.__all__ are exact and sorted."""

from __future__ import annotations

import copy
import pickle
import types

import pytest

import kubemux
import kubemux.testing


@pytest.mark.parametrize("module", [kubemux, kubemux.testing])
def test_all_is_sorted_and_complete(module: types.ModuleType) -> None:
    names = module.__all__
    assert names == sorted(names)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in ("annotations",)
    }
    assert set(names) == public
    for name in names:
        assert getattr(module, name) is not None


def test_the_testing_fakes_are_public() -> None:
    """Both fakes users test with: an HTTP server, and a connector without HTTP."""
    for name in ("FakeCluster", "FakeConnector", "Gate", "write_kubeconfig", "make_pod"):
        assert name in kubemux.testing.__all__
    assert kubemux.testing.FakeConnector.__module__ == "kubemux.testing._connector.connector"
    assert kubemux.testing.Gate.__module__ == "kubemux.testing._connector.connector"


def test_error_tree() -> None:
    for name in (
        "ApiError",
        "ContextNotFound",
        "ContextRemoved",
        "KubeconfigError",
        "SubscriberOverflow",
        "ClusterUnreachable",
        "NotSynced",
    ):
        assert issubclass(getattr(kubemux, name), kubemux.KubemuxError)
    for name in ("Unauthorized", "Forbidden", "ResourceExpired", "ResourceNotFound"):
        assert issubclass(getattr(kubemux, name), kubemux.ApiError)
    assert issubclass(kubemux.ContextNotFound, LookupError)
    assert issubclass(kubemux.ClusterUnreachable, ConnectionError)
    assert issubclass(kubemux.TooManyOpenFiles, kubemux.ClusterUnreachable)


@pytest.mark.parametrize(
    "error",
    [
        kubemux.KubeconfigError("bad file", path="/tmp/x"),
        kubemux.ContextNotFound("prod", "its user is not defined"),
        kubemux.InvalidContext("prod", "user 'u' not found", "/tmp/config"),
        kubemux.ContextRemoved("prod", "removed from the kubeconfig"),
        kubemux.ClusterUnreachable("https://a:6443", "connection refused"),
        kubemux.ApiError(500, "InternalError", "boom"),
        kubemux.ResourceExpired(410, "Expired", "too old resource version"),
        kubemux.Unauthorized(401, "Unauthorized", "no"),
        kubemux.SubscriberOverflow("fell behind"),
        kubemux.TooManyOpenFiles("https://a:6443", "WATCH pods", limit=256, open_watches=250),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_copy_and_pickle_with_their_attributes(error: kubemux.KubemuxError) -> None:
    for twin in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert type(twin) is type(error) and twin is not error
        assert str(twin) == str(error) and twin.args == error.args
        assert vars(twin) == vars(error)


def test_raise_fd_limit_is_public_and_documented() -> None:
    assert kubemux.raise_fd_limit.__module__ == "kubemux._runtime"
    assert "kubemux.raise_fd_limit()" in (kubemux.raise_fd_limit.__doc__ or "")
