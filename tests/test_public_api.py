"""The public surface: kubemux.__all__ and kubemux.testing.__all__ are exact and sorted."""

from __future__ import annotations

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
