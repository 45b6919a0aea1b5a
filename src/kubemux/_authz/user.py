"""``kubemux.User``: who a request is from, as kube-apiserver's authenticators say it.

A frozen value: the fields TokenReview returns (``status.user``) and SubjectAccessReview
sends back (``spec.user``, ``spec.uid``, ``spec.groups``, ``spec.extra``). It never holds
the credential it was authenticated from.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ALL_AUTHENTICATED",
    "ALL_UNAUTHENTICATED",
    "ANONYMOUS",
    "PRIVILEGED_GROUP",
    "SERVICE_ACCOUNT_PREFIX",
    "User",
    "service_account_groups",
    "service_account_username",
]

ANONYMOUS = "system:anonymous"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
PRIVILEGED_GROUP = "system:masters"
"""kube-apiserver allows every request of this group before any authorizer runs."""
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
_SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"

# What a TokenReview answer may hold before kubemux refuses it (a hostile or broken server):
# real answers carry a few dozen groups at most.
MAX_NAME = 1024
MAX_GROUPS = 1024
MAX_EXTRA_VALUES = 1024


def service_account_username(namespace: str, name: str) -> str:
    """``system:serviceaccount:NS:NAME``, the user name a ServiceAccount token authenticates as."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, str]:
    """The groups a ServiceAccount of ``namespace`` is in: ``system:serviceaccounts`` and
    ``system:serviceaccounts:NS``."""
    return (_SERVICE_ACCOUNTS_GROUP, f"{_SERVICE_ACCOUNTS_GROUP}:{namespace}")


def _invalid(message: str) -> ValueError:
    return ValueError(message)


def _frozen_extra(extra: Mapping[str, Iterable[str]] | None) -> Mapping[str, tuple[str, ...]]:
    if not extra:
        return types.MappingProxyType({})
    return types.MappingProxyType({str(k): tuple(str(v) for v in vs) for k, vs in extra.items()})


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    """An authenticated user (kube-apiserver's ``user.Info``).

    Attributes:
        name: The user name (``alice``, ``system:serviceaccount:web:deployer``).
        uid: A unique id, when the authenticator gives one (ServiceAccounts, OIDC).
        groups: The groups, in the order the authenticator gave them (TokenReview's answer
            includes ``system:authenticated``).
        extra: Extra attributes (``authentication.kubernetes.io/credential-id`` ...), each a
            tuple of values; read-only.

    Equal users compare equal and hash alike (``extra`` is compared, not hashed). RBAC reads
    only ``name`` and ``groups``; a SubjectAccessReview sends all four.
    """

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}), hash=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.groups, tuple):
            object.__setattr__(self, "groups", tuple(self.groups))
        if not isinstance(self.extra, types.MappingProxyType):
            object.__setattr__(self, "extra", _frozen_extra(self.extra))

    @property
    def is_service_account(self) -> bool:
        """Whether the name is a ServiceAccount's (``system:serviceaccount:NS:NAME``)."""
        return self.name.startswith(SERVICE_ACCOUNT_PREFIX)

    @property
    def is_privileged(self) -> bool:
        """Whether the user is in ``system:masters`` (allowed everything, RBAC not asked)."""
        return PRIVILEGED_GROUP in self.groups

    @classmethod
    def from_user_info(cls, info: Any) -> User:
        """A user from a ``UserInfo`` JSON object (TokenReview's ``status.user``).

        Raises:
            ValueError: ``info`` is not a UserInfo: wrong types, no name, or over the bounds
                (1,024 groups, 1,024 values of ``extra``, a name over 1 KiB).
        """
        if not isinstance(info, dict):
            raise _invalid("userInfo is not an object")
        name = info.get("username")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise ValueError("userInfo.username is missing or not a short string")
        uid = info.get("uid")
        uid = "" if uid is None else uid
        groups = info.get("groups")
        groups = [] if groups is None else groups
        extra = info.get("extra")
        extra = {} if extra is None else extra
        if not isinstance(uid, str) or len(uid) > MAX_NAME:
            raise ValueError("userInfo.uid is not a short string")
        if (
            not isinstance(groups, list)
            or len(groups) > MAX_GROUPS
            or not all(isinstance(g, str) and len(g) <= MAX_NAME for g in groups)
        ):
            raise ValueError("userInfo.groups is not a list of short strings")
        if not isinstance(extra, dict):
            raise _invalid("userInfo.extra is not an object")
        count = 0
        for key, values in extra.items():
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError("userInfo.extra values are not lists of strings")
            count += len(values) + 1
            if count > MAX_EXTRA_VALUES or len(key) > MAX_NAME:
                raise ValueError("userInfo.extra is too large")
        return cls(name, uid, tuple(groups), extra)

    def to_user_info(self) -> dict[str, Any]:
        """The ``UserInfo`` JSON object (``omitempty`` fields left out)."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out
