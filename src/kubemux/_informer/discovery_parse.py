"""Discovery documents read into :class:`~kubemux.Resource` values, and kubectl's name
resolution over them: sync and pure (:class:`~._discovery.Discovery` fetches).

Name resolution follows kubectl (``resource.Builder.mappingFor`` over client-go's
``shortcutExpander`` and discovery ``PriorityRESTMapper``):

1. ``a.b.c`` is first read as ``resource.version.group``; then any ``a.b...`` as
   ``resource.group``; a name without a dot has no group.
2. The resource part is compared lower-cased. An exact plural or singular name of a
   served resource (in that group, if one was given) stays as it is; otherwise the first short
   name that matches, in discovery order, stands for its resource (a later match is lower
   priority, as kubectl warns); with a group and no match, a short name whose group starts
   with the given group matches (``hpa.autoscal``).
3. The resources whose plural, singular or kind (any case) equal the name, in the group and
   version if given, are taken in priority order: the first wins (``events`` is the core
   ``events``, not ``events.events.k8s.io``).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._errors import UnknownResource
from .._resources import Resource, name_problem, shown

__all__ = [
    "Dropped",
    "as_list",
    "as_mapping",
    "check_name",
    "drop_value",
    "in_category",
    "parse_aggregated",
    "parse_resource_list",
    "preferred",
    "resolve",
    "suggest",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ parsing
Dropped = list[tuple[str, str]]
"""What a parse left out: (the bad value as shown, why), for :class:`Discovery`'s warnings."""


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def drop_value(dropped: Dropped | None, value: object, why: str) -> None:
    if dropped is not None:
        dropped.append((shown(value), why))


def check_name(field: str, value: object, where: str, dropped: Dropped | None) -> bool:
    """True if ``value`` may be the ``field`` of a resource; else note why and False."""
    problem = name_problem(field, value)
    if problem is None:
        return True
    drop_value(dropped, value, f"{where} dropped: {problem}")
    return False


def parse_aggregated(
    doc: Mapping[str, Any], *, core: bool | None = None, dropped: Dropped | None = None
) -> list[Resource]:
    """Every resource of an ``APIGroupDiscoveryList`` (v2 or v2beta1), in priority order.

    Versions come as the server lists them (preferred first). Subresources are left out,
    and so is any ``resource`` holding a ``/``: only ``subresources`` name subresources.
    ``responseKind``'s group and version are ignored (as client-go's mapper ignores them).
    A group, version or plural kube-apiserver could not serve (see
    :func:`kubemux._resources.name_problem`) is left out and noted in ``dropped``; with
    ``core`` given, so is a named group in ``/api`` (``core=True``) or the core group in
    ``/apis`` (``core=False``).
    """
    out: list[Resource] = []
    for item in as_list(doc.get("items")):
        if not isinstance(item, Mapping):
            continue
        group = as_mapping(item.get("metadata")).get("name") or ""
        if core is not None and (group == "") != core:
            where = "/api lists only the core group" if core else "/apis lists no core group"
            drop_value(dropped, group, f"group {shown(group)} dropped: {where}")
            continue
        if not check_name("group", group, "a group", dropped):
            continue
        for entry in as_list(item.get("versions")):
            if not isinstance(entry, Mapping) or not entry.get("version"):
                continue
            version = entry["version"]
            if not check_name("version", version, f"group {group or 'core'!r}", dropped):
                continue
            for res in as_list(entry.get("resources")):
                if not isinstance(res, Mapping) or not res.get("resource"):
                    continue
                plural = res["resource"]
                where = f"a resource of {group or 'core'}/{version}"
                if isinstance(plural, str) and "/" in plural:
                    why = "holds a '/' (a subresource is never a top-level resource)"
                    drop_value(dropped, plural, f"{where} dropped: resource {shown(plural)} {why}")
                    continue
                if not check_name("plural", plural, where, dropped):
                    continue
                kind = _text(as_mapping(res.get("responseKind")).get("kind"))
                out.append(
                    Resource(
                        group=group,
                        version=version,
                        plural=plural,
                        kind=kind,
                        namespaced=res.get("scope") != "Cluster",
                        singular=_text(res.get("singularResource")) or kind.lower(),
                        short_names=_strs(res.get("shortNames")),
                        categories=_strs(res.get("categories")),
                        verbs=_strs(res.get("verbs")),
                    )
                )
    return out


def parse_resource_list(
    doc: Mapping[str, Any],
    group_version: str | None = None,
    *,
    dropped: Dropped | None = None,
) -> list[Resource]:
    """The resources of one legacy ``APIResourceList`` (``/api/v1``, ``/apis/g/v``).

    ``group_version`` is what was asked for (``v1``, ``apps/v1``); a list that says it is
    another group version is left out (client-go files it under the one it names, where
    nothing looks for it). Without it, the list's own ``groupVersion`` counts.
    Subresources (``pods/log``) are left out; a resource's own ``group`` and ``version``
    are ignored, as client-go's mapper ignores them; a missing singular name is the
    lower-cased kind, as client-go guesses it. Names kube-apiserver could not serve are
    left out and noted in ``dropped``.
    """
    said = _text(doc.get("groupVersion"))
    if group_version is not None and said and said != group_version:
        why = f"the list says it is groupVersion {shown(said)}"
        drop_value(dropped, said, f"the resources of {group_version} dropped: {why}")
        return []
    group, _, version = (group_version or said).rpartition("/")
    where = f"the resources of {group or 'core'}/{shown(version)}"
    if not (
        check_name("group", group, where, dropped)
        and check_name("version", version, where, dropped)
    ):
        return []
    out: list[Resource] = []
    for res in as_list(doc.get("resources")):
        if not isinstance(res, Mapping):
            continue
        name = res.get("name")
        if not name or (isinstance(name, str) and "/" in name):
            continue
        if not check_name("plural", name, f"a resource of {group or 'core'}/{version}", dropped):
            continue
        kind = _text(res.get("kind"))
        out.append(
            Resource(
                group=group,
                version=version,
                plural=name,
                kind=kind,
                namespaced=res.get("namespaced") is True,
                singular=_text(res.get("singularName")) or kind.lower(),
                short_names=_strs(res.get("shortNames")),
                categories=_strs(res.get("categories")),
                verbs=_strs(res.get("verbs")),
            )
        )
    return out


def preferred(resources: Iterable[Resource]) -> list[Resource]:
    """One entry per (group, plural): the first, i.e. at the group's preferred version.

    A resource that exists only in a non-preferred version is kept at that version.
    """
    seen: set[tuple[str, str]] = set()
    out: list[Resource] = []
    for res in resources:
        ident = (res.group, res.plural)
        if ident not in seen:
            seen.add(ident)
            out.append(res)
    return out


# ------------------------------------------------------------------------------ resolution
def _split(name: str) -> list[tuple[str, str | None, str | None]]:
    """kubectl's readings of a name: (resource, group, version), most specific first."""
    readings: list[tuple[str, str | None, str | None]] = []
    if name.count(".") >= 2:
        resource, version, group = name.split(".", 2)
        readings.append((resource, group, version))
    if "." in name:
        resource, _, group = name.partition(".")
        readings.append((resource, group, None))
    else:
        readings.append((name, None, None))
    return readings


def _names(res: Resource) -> tuple[str, ...]:
    singular = res.singular or res.kind.lower()
    return (res.plural, singular, res.kind.lower()) if res.kind else (res.plural, singular)


def _expand_short(
    resources: Sequence[Resource], resource: str, group: str | None
) -> tuple[str, str | None]:
    """client-go's ``shortcutExpander.expandResourceShortcut``: (resource, group) to look up."""
    for res in resources:
        if group is not None and res.group != group:
            continue
        if resource in (res.plural, res.singular):
            return resource, group
    for res in resources:
        if group is not None and res.group != group:
            continue
        if resource in res.short_names:
            return res.plural, res.group
    if group:
        for res in resources:
            if res.group.startswith(group) and resource in res.short_names:
                return res.plural, res.group
    return resource, group


def resolve(
    name: str | Resource, resources: Sequence[Resource], *, context: str | None = None
) -> Resource:
    """What a kubectl-style name means among ``resources`` (in priority order).

    A :class:`Resource` is returned as it is. ``resources`` should hold every served version
    (as :func:`parse_aggregated` gives them) so that ``plural.version.group`` can pick a
    non-preferred version; a plain name resolves to the first match, the preferred version.

    Raises:
        UnknownResource: nothing matches (with close names as suggestions).
    """
    if isinstance(name, Resource):
        return name
    text = name.strip()
    lower = text.lower()
    if lower:
        for resource, group, version in _split(lower):
            target, target_group = _expand_short(resources, resource, group)
            for res in resources:
                if target_group is not None and res.group != target_group:
                    continue
                if version is not None and res.version != version:
                    continue
                if target in _names(res):
                    return res
    raise UnknownResource(text or name, context, suggest(text, resources))


def in_category(category: str, resources: Sequence[Resource]) -> list[Resource]:
    """The resources of a category (``all``), preferred versions, in priority order: what
    ``kubectl get all`` expands to."""
    wanted = category.strip().lower()
    return [r for r in preferred(resources) if wanted in r.categories]


def suggest(name: str, resources: Sequence[Resource], limit: int = 3) -> tuple[str, ...]:
    """Full names (``widgets.example.com``) of served resources whose names are close to
    ``name``, best first."""
    lower = name.strip().lower()
    head = lower.split(".", 1)[0]
    by_word: dict[str, str] = {}
    for res in preferred(resources):
        full = res.name
        for word in (*_names(res), *res.short_names, full):
            by_word.setdefault(word, full)
    found: list[str] = []
    for probe in (lower, head):
        for word in difflib.get_close_matches(probe, list(by_word), n=limit * 3, cutoff=0.6):
            full = by_word[word]
            if full not in found:
                found.append(full)
    return tuple(found[:limit])
