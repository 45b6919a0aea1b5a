"""resourceVersions as numbers: the one parser (:func:`rv_int`).

kube-apiserver's resourceVersions are etcd revisions, decimal in practice, and clients must
treat them as opaque; kubemux compares them only where it has to (its event history, the
proxy's watches and freshness), and parses them in one place, bounded in length: a hostile
"version" of a million digits would otherwise cost a quadratic ``int()`` on every event.
"""

from __future__ import annotations

__all__ = ["RV_MAX_DIGITS", "rv_int"]

RV_MAX_DIGITS = 30
"""A decimal resourceVersion of more digits is not one (etcd's have about 10)."""


def rv_int(resource_version: int | str | None) -> int | None:
    """A resourceVersion as an integer, or None if it is not a decimal one (ASCII digits,
    at most :data:`RV_MAX_DIGITS`); an int is taken as it is (a compact form)."""
    if isinstance(resource_version, int):
        return resource_version
    if (
        resource_version
        and len(resource_version) <= RV_MAX_DIGITS
        and resource_version.isascii()
        and resource_version.isdigit()
    ):
        return int(resource_version)
    return None
