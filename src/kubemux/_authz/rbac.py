"""One cluster's RBAC objects, and RBAC evaluated from them as kube-apiserver evaluates it.

``RbacPolicy`` holds the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings an
authorizer's informers deliver, indexes bindings by subject, and counts changes
(``version``; ``roles_version`` and ``bindings_version`` apart) so that permission sets
built from it know when they are stale. An update that changes nothing RBAC reads (labels,
managedFields, a new resourceVersion) is not a change.

:meth:`RbacPolicy.explain` is ``RBACAuthorizer.Authorize`` over ``DefaultRuleResolver``
(``VisitRulesFor``): the ClusterRoleBindings that apply to the user, then the RoleBindings
of the request's namespace (a RoleBinding to a ClusterRole grants its rules in the
binding's namespace only), the first allowing rule wins, and a denial carries the errors of
the roles it could not resolve. Kubernetes visits bindings in its cache's order (a Go map:
random); here they go by name, so reasons that name a binding or list several errors are
stable. :mod:`.permissions` answers the same questions in microseconds; this is the
reference it is tested against. Pure and sync.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from .attributes import Attributes
from .forbidden import rbac_reason, role_not_found
from .rules import Binding, PolicyRule, Role, RoleRef, applies_to, rule_allows
from .user import SERVICE_ACCOUNT_PREFIX, User

__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "KINDS",
    "ROLES",
    "ROLE_BINDINGS",
    "Decision",
    "Kind",
    "RbacPolicy",
    "RoleKey",
]

ROLES = "roles"
CLUSTER_ROLES = "clusterroles"
ROLE_BINDINGS = "rolebindings"
CLUSTER_ROLE_BINDINGS = "clusterrolebindings"
KINDS = (ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)
"""The resources (``rbac.authorization.k8s.io/v1``) an authorizer watches."""

Kind = Literal["roles", "clusterroles", "rolebindings", "clusterrolebindings"]
RoleKey = tuple[str, str, str]
"""A role as ``(kind, namespace, name)``: ``("ClusterRole", "", "view")``,
``("Role", "web", "reader")``."""
_BindingKey = tuple[str, str]  # (namespace, name); namespace "" for a ClusterRoleBinding


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """An authorizer's answer.

    Attributes:
        allowed: Whether the request is allowed.
        reason: Kubernetes' reason text: on an allow, what allowed it (``RBAC: allowed by
            ClusterRoleBinding ...`` from :meth:`RbacPolicy.explain`); on a denial, what the
            403's message appends (``RBAC: role.rbac.authorization.k8s.io "x" not found``),
            often ``""``.
        role: The role whose rule allowed it (``("ClusterRole", "", "view")``), when RBAC
            allowed; None otherwise.
    """

    allowed: bool
    reason: str = ""
    role: RoleKey | None = None


def _subject_users(binding: Binding) -> Iterator[str]:
    for subject in binding.subjects:
        if subject.kind == "User":
            yield subject.name
        elif subject.kind == "ServiceAccount":
            namespace = subject.namespace or binding.namespace
            if namespace:
                yield f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{subject.name}"


def _subject_groups(binding: Binding) -> Iterator[str]:
    for subject in binding.subjects:
        if subject.kind == "Group":
            yield subject.name


class RbacPolicy:
    """The RBAC objects of one cluster, as its informers see them now.

    Not thread-safe; one event loop writes and reads it. Reads are consistent with the last
    write: eventually consistent with the cluster, ordered per object.
    """

    def __init__(self) -> None:
        self._roles: dict[tuple[str, str], Role] = {}
        self._cluster_roles: dict[str, Role] = {}
        self._bindings: dict[_BindingKey, Binding] = {}
        self._namespace_bindings: dict[str, dict[str, Binding]] = {}
        self._by_user: dict[str, dict[_BindingKey, None]] = {}
        self._by_group: dict[str, dict[_BindingKey, None]] = {}
        self.roles_version = 0
        self.bindings_version = 0

    @property
    def version(self) -> int:
        """Grows by one at every change of anything RBAC reads."""
        return self.roles_version + self.bindings_version

    def __repr__(self) -> str:
        return (
            f"<RbacPolicy roles={len(self._roles)} clusterroles={len(self._cluster_roles)} "
            f"bindings={len(self._bindings)} version={self.version}>"
        )

    # -- writing ---------------------------------------------------------------------------

    def put(self, kind: Kind, obj: dict[str, Any]) -> bool:
        """Add or replace one object of ``kind``; True if RBAC's answers may change."""
        if kind in (ROLES, CLUSTER_ROLES):
            role = Role.from_json(obj)
            if kind == CLUSTER_ROLES:
                role = dataclasses.replace(role, namespace="")
                if self._cluster_roles.get(role.name) == role:
                    return False
                self._cluster_roles[role.name] = role
            else:
                if not role.namespace or self._roles.get((role.namespace, role.name)) == role:
                    return False
                self._roles[role.namespace, role.name] = role
            self.roles_version += 1
            return True
        binding = Binding.from_json(obj)
        if kind == ROLE_BINDINGS and not binding.namespace:
            return False  # not something an API server sends; never a ClusterRoleBinding
        if kind == CLUSTER_ROLE_BINDINGS:
            binding = dataclasses.replace(binding, namespace="")
        key = (binding.namespace, binding.name)
        old = self._bindings.get(key)
        if old == binding:
            return False
        if old is not None:
            self._unindex(key, old)
        self._bindings[key] = binding
        if binding.namespace:
            self._namespace_bindings.setdefault(binding.namespace, {})[binding.name] = binding
        for name in _subject_users(binding):
            self._by_user.setdefault(name, {})[key] = None
        for group in _subject_groups(binding):
            self._by_group.setdefault(group, {})[key] = None
        self.bindings_version += 1
        return True

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Remove one object; True if there was one."""
        if kind == CLUSTER_ROLES:
            if self._cluster_roles.pop(name, None) is None:
                return False
            self.roles_version += 1
            return True
        if kind == ROLES:
            if self._roles.pop((namespace, name), None) is None:
                return False
            self.roles_version += 1
            return True
        key = ("" if kind == CLUSTER_ROLE_BINDINGS else namespace, name)
        old = self._bindings.pop(key, None)
        if old is None:
            return False
        self._unindex(key, old)
        self.bindings_version += 1
        return True

    def replace(self, kind: Kind, objects: Iterable[dict[str, Any]]) -> bool:
        """Make ``kind``'s objects exactly ``objects`` (a relist); True if anything changed."""
        objects = list(objects)
        keep: set[tuple[str, str]] = set()
        changed = False
        for obj in objects:
            changed |= self.put(kind, obj)
            meta = obj.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            namespace = meta.get("namespace") if kind in (ROLES, ROLE_BINDINGS) else ""
            name = meta.get("name")
            keep.add(
                (
                    namespace if isinstance(namespace, str) else "",
                    name if isinstance(name, str) else "",
                )
            )
        for namespace, name in self._keys(kind) - keep:
            changed |= self.delete(kind, namespace, name)
        return changed

    def _keys(self, kind: Kind) -> set[tuple[str, str]]:
        if kind == ROLES:
            return set(self._roles)
        if kind == CLUSTER_ROLES:
            return {("", name) for name in self._cluster_roles}
        cluster = kind == CLUSTER_ROLE_BINDINGS
        return {key for key in self._bindings if (key[0] == "") == cluster}

    def _unindex(self, key: _BindingKey, old: Binding) -> None:
        if old.namespace:
            bindings = self._namespace_bindings.get(old.namespace)
            if bindings is not None:
                bindings.pop(old.name, None)
                if not bindings:
                    del self._namespace_bindings[old.namespace]
        for index, names in (
            (self._by_user, _subject_users(old)),
            (self._by_group, _subject_groups(old)),
        ):
            for name in names:
                keys = index.get(name)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[name]

    # -- reading ---------------------------------------------------------------------------

    def role_rules(self, ref: RoleRef, namespace: str) -> tuple[RoleKey, Role] | str:
        """What ``ref`` of a binding in ``namespace`` (``""``: a ClusterRoleBinding) grants:
        its role, or the error message it resolves to (``GetRoleReferenceRules``)."""
        if ref.kind == "Role":
            role = self._roles.get((namespace, ref.name)) if namespace else None
            return (
                (("Role", namespace, ref.name), role) if role else role_not_found("Role", ref.name)
            )
        if ref.kind == "ClusterRole":
            cluster_role = self._cluster_roles.get(ref.name)
            if cluster_role is None:
                return role_not_found("ClusterRole", ref.name)
            return ("ClusterRole", "", ref.name), cluster_role
        return role_not_found(ref.kind, ref.name)

    def bindings_for(self, user: User) -> list[Binding]:
        """Every binding with a subject that may apply to ``user``, ClusterRoleBindings
        first, each group by namespace and name (from the subject index: no scan)."""
        keys: dict[_BindingKey, None] = dict(self._by_user.get(user.name, {}))
        for group in user.groups:
            keys.update(self._by_group.get(group, {}))
        return [self._bindings[key] for key in sorted(keys)]

    def visit_rules_for(
        self, user: User, namespace: str
    ) -> Iterator[tuple[str, RoleKey | None, PolicyRule | None, str]]:
        """``VisitRulesFor``: ``(source, role, rule, "")`` for each rule that applies to
        ``user`` in ``namespace``, and ``("", None, None, error)`` for each role that could
        not be resolved. Scans every binding: the reference, not the fast path."""
        cluster = sorted((k, b) for k, b in self._bindings.items() if not k[0])
        local = sorted(self._namespace_bindings.get(namespace, {}).items()) if namespace else []
        for scope, bindings in (("", [b for _, b in cluster]), (namespace, [b for _, b in local])):
            for binding in bindings:
                index = applies_to(user, binding.subjects, scope)
                if index is None:
                    continue
                resolved = self.role_rules(binding.role_ref, scope)
                if isinstance(resolved, str):
                    yield "", None, None, resolved
                    continue
                source = binding.describe(binding.subjects[index])
                role_key, role = resolved
                for rule in role.rules:
                    yield source, role_key, rule, ""

    def explain(self, user: User, attrs: Attributes) -> Decision:
        """RBAC's decision for ``user`` making request ``attrs``, with Kubernetes' reason
        (``RBAC: allowed by ...`` on an allow). ``system:masters`` is not RBAC's business:
        see :class:`~.permissions.PermissionCache`."""
        errors: list[str] = []
        for source, role, rule, error in self.visit_rules_for(user, attrs.namespace):
            if rule is not None and rule_allows(attrs, rule):
                return Decision(True, f"RBAC: allowed by {source}", role)
            if error:
                errors.append(error)
        return Decision(False, rbac_reason(errors))
