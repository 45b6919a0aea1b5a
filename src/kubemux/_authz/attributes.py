"""What a request asks to do, in the terms an authorizer reads (kube-apiserver's
``authorizer.Attributes``, without the user).

Plain values: the proxy builds them from a request's method, path and query the way
kube-apiserver's ``RequestInfoFactory`` does; a SubjectAccessReview carries the same fields.
Empty strings mean "none", as in Kubernetes (the cluster scope is namespace ``""``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

__all__ = ["Attributes", "field_selector_name", "request_attributes"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Attributes:
    """One request's authorization attributes.

    Attributes:
        verb: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``,
            ``deletecollection``, or another verb (``impersonate``, ``escalate``); for a
            non-resource request the lower-cased HTTP method (``get``, ``post`` ...).
        resource: The resource's plural (``pods``), for a resource request.
        api_group: The API group (``""``: the core group).
        api_version: The API version (not read by RBAC; the 403's Status carries it).
        subresource: ``log``, ``status``, ``scale`` ... or ``""``.
        name: The object's name, or ``""`` (a LIST or WATCH limited by
            ``fieldSelector=metadata.name=X`` is a request for ``X``).
        namespace: The namespace, or ``""`` for the cluster scope. A request on a Namespace
            object is in that namespace (``GET /api/v1/namespaces/web`` is in ``web``).
        path: The URL path of a non-resource request (``/healthz``, ``/version``).
        resource_request: False for a non-resource request (``path`` is then what is asked).
        field_selector: The request's field selector, sent on with a SubjectAccessReview.
        label_selector: The request's label selector, sent on with a SubjectAccessReview.
    """

    verb: str
    resource: str = ""
    api_group: str = ""
    api_version: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""
    resource_request: bool = True
    field_selector: str = ""
    label_selector: str = ""

    @classmethod
    def non_resource(cls, verb: str, path: str) -> Attributes:
        """A non-resource request: ``verb`` (lower case) on ``path``."""
        return cls(verb=verb, path=path, resource_request=False)

    @property
    def qualified_resource(self) -> str:
        """``resource.group`` as Kubernetes writes a GroupResource (``deployments.apps``;
        ``pods`` for the core group)."""
        return f"{self.resource}.{self.api_group}" if self.api_group else self.resource


# -- from an HTTP request, as kube-apiserver's RequestInfoFactory reads it -----------------

_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_SELECTOR_VERBS = ("list", "watch", "deletecollection")


def _split_terms(selector: str) -> list[str]:
    """``fields.splitTerms``: commas split terms unless escaped with a backslash."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(selector):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return terms


def _unescape(value: str) -> str | None:
    """``fields.UnescapeValue``; None where Go returns an error."""
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                return None
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            return None
        else:
            out.append(ch)
    return None if escaped else "".join(out)


def field_selector_name(selector: str) -> str | None:
    """What ``fields.ParseSelector(selector).RequiresExactMatch("metadata.name")`` gives:
    the name an exact ``metadata.name=`` (or ``==``) term asks for (terms sorted, as Go
    sorts them), or None (no such term, or a selector Go cannot parse)."""
    if not selector:
        return None
    found: str | None = None
    for term in sorted(_split_terms(selector)):
        if not term:
            continue
        for i in range(len(term)):
            rest = term[i:]
            op = next((o for o in ("!=", "==", "=") if rest.startswith(o)), None)
            if op is not None:
                field, value = term[:i], _unescape(term[i + len(op) :])
                break
        else:
            return None  # "can't understand": the whole selector is an error
        if value is None:
            return None
        if found is None and op != "!=" and field == "metadata.name":
            found = value
    return found


def _valid_path_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def _int64(value: str) -> bool:
    try:
        number = int(value, 10)
    except ValueError:
        return False
    return -(2**63) <= number < 2**63 and value.strip() == value and "_" not in value


def request_attributes(
    method: str, path: str, query: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> Attributes:
    """A request's attributes as kube-apiserver reads them (``RequestInfoFactory``, with
    the AuthorizeWithSelectors gate on, as from Kubernetes 1.32).

    ``path`` is percent-decoded (``url.Path``); ``query`` gives each parameter's values
    (the first one counts, as Go's ``url.Values.Get``). A LIST or WATCH with an exact
    ``metadata.name`` field selector is a request for that name; a Namespace is in itself;
    a non-resource request's verb is its lower-cased method.

    Raises:
        ValueError: ``/api/v1/watch`` or ``/api/v1/proxy`` with nothing after it (the API
            server's 500).
    """
    params: dict[str, str] = {}
    for key, value in query.items() if isinstance(query, Mapping) else query:
        params.setdefault(key, value)
    parts = path.strip("/").split("/") if path.strip("/") else []
    other = Attributes(verb=method.lower(), path=path, resource_request=False)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return other
    group = ""
    if parts[0] == "apis":
        if len(parts) < 4:
            return other
        group, parts = parts[1], parts[2:]
    else:
        parts = parts[1:]
    version, parts = parts[0], parts[1:]
    via_prefix = parts[0] in _SPECIAL_VERBS
    if via_prefix:
        if len(parts) < 2:
            raise ValueError(f"unable to determine kind and namespace from url {path!r}")
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        watch = params.get("watch")
        watching = watch is not None and watch != "0" and watch.lower() != "false"
        verb = "watch" if watching else "list"
        decodes = all(_int64(params[key]) for key in ("limit", "timeoutSeconds") if key in params)
        # a query Go cannot decode (a bad selector, limit) names nothing
        selected = field_selector_name(params.get("fieldSelector", "")) if decodes else None
        if selected is not None and _valid_path_segment(selected):
            name = selected
    if not name and verb == "delete":
        verb = "deletecollection"
    fields = labels = ""
    if not via_prefix and verb in _SELECTOR_VERBS:
        fields, labels = params.get("fieldSelector", ""), params.get("labelSelector", "")
    return Attributes(
        verb=verb,
        resource=resource,
        api_group=group,
        api_version=version,
        subresource=subresource,
        name=name,
        namespace=namespace,
        path=path,
        field_selector=fields,
        label_selector=labels,
    )
