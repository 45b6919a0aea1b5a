"""Per-user permission sets: RBAC's answer in a few dictionary lookups.

The model is rancher/steve's ``accesscontrol`` (an access set per user, built once from the
role caches and shared by users whose grants are the same), made exact: a set keeps, per
scope (the cluster; each namespace with a RoleBinding for the user), an index of the rules
of the roles bound there, keyed by ``(verb, group, resource)`` with the wildcards as keys,
so a check probes at most 12 keys per scope instead of visiting every binding. The answers
are those of :meth:`.rbac.RbacPolicy.explain` (the tests hold them equal), including the
role-resolution errors a denial carries.

Sharing: a set is interned by its content (the role keys per scope and the errors), and a
scope's index by its role keys, so 1,000 users bound alike cost one set. Staleness: a set
records the policy's ``version`` it was built at; a check on a newer policy rebuilds it
(bindings changed: from the subject index; roles changed: the indexes too). Pure and sync.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .attributes import Attributes
from .forbidden import rbac_reason
from .rbac import Decision, RbacPolicy, RoleKey
from .rules import (
    ALL,
    PolicyRule,
    api_group_matches,
    applies_to,
    non_resource_url_matches,
    resource_matches,
    resource_name_matches,
    verb_matches,
)
from .user import User

__all__ = ["EXPANSION_LIMIT", "PermissionCache", "PermissionSet", "RuleIndex"]

EXPANSION_LIMIT = 4096
"""A rule whose verbs x groups x resources x names exceed this is matched rule by rule
instead of expanded into keys (a hostile ClusterRole cannot make an index explode)."""

_ALLOW_PRIVILEGED = Decision(True)


class _Grant:
    """What one ``(verb, group, resource)`` key grants: every name, or some names."""

    __slots__ = ("any_name", "names")

    def __init__(self) -> None:
        self.any_name: RoleKey | None = None
        self.names: dict[str, RoleKey] = {}


def _slow_allows(
    rule: PolicyRule, verb: str, group: str, combined: str, sub: str, name: str
) -> bool:
    return (
        verb_matches(rule, verb)
        and api_group_matches(rule, group)
        and resource_matches(rule, combined, sub)
        and resource_name_matches(rule, name)
    )


class RuleIndex:
    """The rules of some roles, indexed; immutable once built."""

    __slots__ = ("_named", "_prefixes", "_resources", "_slow", "_urls")

    def __init__(self, roles: Iterable[tuple[RoleKey, Iterable[PolicyRule]]]) -> None:
        self._resources: dict[tuple[str, str, str], _Grant] = {}
        self._urls: dict[tuple[str, str], RoleKey] = {}
        self._prefixes: list[tuple[str, str, RoleKey]] = []
        self._slow: list[tuple[PolicyRule, RoleKey]] = []
        for key, rules in roles:
            for rule in rules:
                self._add(key, rule)
        # the resources some key names: a request for none of them misses in 2-3 set lookups
        self._named = frozenset(r for _, _, r in self._resources)

    def _add(self, key: RoleKey, rule: PolicyRule) -> None:
        verbs, groups, resources = rule.verbs, rule.api_groups, rule.resources
        names = rule.resource_names
        if resources and groups and verbs:
            size = len(verbs) * len(groups) * len(resources) * max(1, len(names))
            if size > EXPANSION_LIMIT:
                self._slow.append((rule, key))
            else:
                for verb in verbs:
                    for group in groups:
                        for resource in resources:
                            grant = self._resources.get((verb, group, resource))
                            if grant is None:
                                grant = self._resources[verb, group, resource] = _Grant()
                            if not names:
                                if grant.any_name is None:
                                    grant.any_name = key
                            else:
                                for name in names:
                                    grant.names.setdefault(name, key)
        urls = rule.non_resource_urls
        if urls and verbs:
            if len(verbs) * len(urls) > EXPANSION_LIMIT:
                self._slow.append((rule, key))
                return
            for verb in verbs:
                for url in urls:
                    self._urls.setdefault((verb, url), key)
                    if url.endswith("*"):  # "*" itself: the prefix "" matches every path
                        self._prefixes.append((verb, url.rstrip("*"), key))

    def allows(self, verb: str, group: str, resource: str, sub: str, name: str) -> RoleKey | None:
        """The role that allows ``verb`` on ``resource`` (``sub``: its subresource, or
        ``""``) named ``name`` in ``group``, or None."""
        combined = f"{resource}/{sub}" if sub else resource
        index = self._resources
        named = self._named
        wild = f"*/{sub}" if sub else ""
        if combined in named or ALL in named or (sub and wild in named):
            wanted = (combined, ALL, wild) if sub else (combined, ALL)
            for v in (verb, ALL):
                for g in (group, ALL):
                    for r in wanted:
                        grant = index.get((v, g, r))
                        if grant is not None:
                            if grant.any_name is not None:
                                return grant.any_name
                            found = grant.names.get(name)
                            if found is not None:
                                return found
        for rule, key in self._slow:
            if _slow_allows(rule, verb, group, combined, sub, name):
                return key
        return None

    def allows_path(self, verb: str, path: str) -> RoleKey | None:
        """The role that allows ``verb`` on the non-resource ``path``, or None."""
        for v in (verb, ALL):
            found = self._urls.get((v, path))
            if found is not None:
                return found
        for v, prefix, key in self._prefixes:
            if v in (verb, ALL) and path.startswith(prefix):
                return key
        for rule, key in self._slow:
            if verb_matches(rule, verb) and non_resource_url_matches(rule, path):
                return key
        return None

    def __len__(self) -> int:
        return len(self._resources) + len(self._urls) + len(self._slow)


_EMPTY_INDEX = RuleIndex(())


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class PermissionSet:
    """What one user may do in one cluster, at one version of its RBAC policy.

    Attributes:
        version: The policy's ``version`` it was built from.
        cluster: The rules of the ClusterRoles bound by ClusterRoleBindings (every scope).
        cluster_errors: The errors resolving those (a binding to a missing ClusterRole).
        namespaces: Per namespace with a RoleBinding for the user: its rules and errors.
    """

    version: int
    cluster: RuleIndex
    cluster_errors: tuple[str, ...]
    namespaces: dict[str, tuple[RuleIndex, tuple[str, ...]]]

    def decide(self, attrs: Attributes) -> Decision:
        """RBAC's decision for this user and ``attrs`` (reason: the errors on a denial)."""
        namespace = attrs.namespace
        scoped = self.namespaces.get(namespace) if namespace else None
        if attrs.resource_request:
            args = (attrs.verb, attrs.api_group, attrs.resource, attrs.subresource, attrs.name)
            role = self.cluster.allows(*args)
            if role is None and scoped is not None:
                role = scoped[0].allows(*args)
        else:
            role = self.cluster.allows_path(attrs.verb, attrs.path)
            if role is None and scoped is not None:
                role = scoped[0].allows_path(attrs.verb, attrs.path)
        if role is not None:
            return Decision(True, "", role)
        errors = self.cluster_errors + scoped[1] if scoped is not None else self.cluster_errors
        return Decision(False, rbac_reason(errors))

    def namespaces_with(self, verb: str, group: str, resource: str) -> frozenset[str] | None:
        """The namespaces where this user may ``verb`` every object of ``resource`` (None:
        all of them, a cluster-wide grant); steve's "partition" of a list."""
        if self.cluster.allows(verb, group, resource, "", "") is not None:
            return None
        return frozenset(
            ns
            for ns, (index, _) in self.namespaces.items()
            if index.allows(verb, group, resource, "", "")
        )


class PermissionCache:
    """Permission sets of the users of one :class:`~.rbac.RbacPolicy`, built on first use and
    rebuilt when the policy changed; at most ``max_users`` kept (the oldest go first).

    ``decide`` is the local half of kube-apiserver's chain: ``system:masters`` is allowed
    (the privileged-group authorizer runs before any other), then RBAC. A webhook or Node
    authorizer is not known here: a denial is for the caller to confirm with a
    SubjectAccessReview.
    """

    def __init__(self, policy: RbacPolicy, *, max_users: int = 10_000) -> None:
        self.policy = policy
        self.max_users = max_users
        self._sets: dict[tuple[str, tuple[str, ...]], PermissionSet] = {}
        self._interned: dict[object, PermissionSet] = {}
        self._indexes: dict[frozenset[RoleKey], RuleIndex] = {}
        self._interned_at = -1
        self._indexes_at = -1
        self.builds = 0

    def __repr__(self) -> str:
        return (
            f"<PermissionCache users={len(self._sets)} distinct={len(self._interned)} "
            f"indexes={len(self._indexes)} version={self.policy.version}>"
        )

    def __len__(self) -> int:
        """Users with a set kept."""
        return len(self._sets)

    def decide(self, user: User, attrs: Attributes) -> Decision:
        """The local decision for ``user`` making request ``attrs``."""
        if user.is_privileged:
            return _ALLOW_PRIVILEGED
        return self.permissions(user).decide(attrs)

    def permissions(self, user: User) -> PermissionSet:
        """``user``'s permission set at the policy's current version."""
        key = (user.name, user.groups)
        found = self._sets.get(key)
        if found is not None and found.version == self.policy.version:
            return found
        built = self._build(user)
        if found is None and len(self._sets) >= self.max_users:
            del self._sets[next(iter(self._sets))]
        self._sets[key] = built
        return built

    def forget(self, user: User) -> None:
        """Drop ``user``'s set (it is rebuilt on next use)."""
        self._sets.pop((user.name, user.groups), None)

    def _index(
        self, keys: frozenset[RoleKey], roles: dict[RoleKey, tuple[PolicyRule, ...]]
    ) -> RuleIndex:
        if not keys:
            return _EMPTY_INDEX
        found = self._indexes.get(keys)
        if found is None:
            found = self._indexes[keys] = RuleIndex((key, roles[key]) for key in sorted(keys))
        return found

    def _build(self, user: User) -> PermissionSet:
        policy = self.policy
        if self._indexes_at != policy.roles_version:
            self._indexes.clear()
            self._indexes_at = policy.roles_version
        if self._interned_at != policy.version:
            self._interned.clear()
            self._interned_at = policy.version
        self.builds += 1
        rules: dict[RoleKey, tuple[PolicyRule, ...]] = {}
        scopes: dict[str, tuple[dict[RoleKey, None], list[str]]] = {}
        for binding in policy.bindings_for(user):
            if applies_to(user, binding.subjects, binding.namespace) is None:
                continue  # indexed by a subject, but not one that applies here
            keys, errors = scopes.setdefault(binding.namespace, ({}, []))
            resolved = policy.role_rules(binding.role_ref, binding.namespace)
            if isinstance(resolved, str):
                errors.append(resolved)
            else:
                keys[resolved[0]] = None
                rules[resolved[0]] = resolved[1].rules
        cluster_keys, cluster_errors = scopes.pop("", ({}, []))
        signature = (
            frozenset(cluster_keys),
            tuple(cluster_errors),
            frozenset((ns, frozenset(k), tuple(e)) for ns, (k, e) in scopes.items()),
        )
        found = self._interned.get(signature)
        if found is not None:
            return found
        built = PermissionSet(
            policy.version,
            self._index(signature[0], rules),
            signature[1],
            {ns: (self._index(frozenset(k), rules), tuple(e)) for ns, (k, e) in scopes.items()},
        )
        self._interned[signature] = built
        return built
