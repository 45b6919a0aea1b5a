"""``kubemux get`` and ``kubemux watch``: the server's columns, as ``kubectl get`` prints them.

Each context's rows come from :meth:`WatcherRegistry.table` (the server's Table format, a
CRD's printer columns); ``-w`` (and ``watch``) then prints the row of every change, as
``kubectl get -w`` does. A CONTEXT column comes first when several contexts are shown;
``-A`` adds NAMESPACE as in kubectl. Cells are shown terminal-safe; ``-o json|yaml`` write
the objects exactly.

RESOURCE may be a comma list (``pods,deployments.apps``) or a category (``all``, a CRD's
categories), expanded with each context's discovery as kubectl expands it: a category's
resources in discovery order, duplicates (also ``pods,po``) once, one table per resource
separated by a blank line, names as ``kind.group/name`` when several kinds are asked for.
``-w`` takes one resource, as in kubectl.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any, TextIO

import anyio
import orjson
import yaml

from .._cache.table import FALLBACK_COLUMNS, TableColumn
from .._errors import ContextNotFound, InvalidContext, KubemuxError, UnknownResource, unwrap
from .._informer.discovery import preferred, resolve
from .._redact import redact_text, terminal_safe
from .._registry.registry import WatcherRegistry
from .._resources import Resource
from .._settings import WatchSettings
from ._output import KUBECONFIG_HELP, CommandError, TabWriter, cell_text, startup

log = logging.getLogger(__name__)

_OUTPUTS = ("wide", "json", "yaml", "name")
ALL_CONTEXTS_WAIT = 10.0
"""With --all-contexts, how long a context may take to show its rows (then a warning)."""
OPENING = 8
"""How many of a context's resources (``get all``) are listed at once."""
GET_BURST = 50
"""``get``'s client-side burst per context (qps stays client-go's 5): ``get all`` starts
about 24 requests (discovery, then a LIST and a WATCH per resource), which client-go's
burst of 10 would spread over 3 s; more than this are still paced."""
SINGLE_TYPE = "you may only specify a single resource type"
"""kubectl's error for ``get -w`` with several resources."""


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    g = sub.add_parser(
        "get",
        parents=[common],
        help="print a resource's server-side columns across contexts, like `kubectl get`",
        description="Like `kubectl get`, across contexts: the columns the server prints "
        "(a CRD's printer columns too), with a CONTEXT column when several contexts are "
        "shown. A comma list (pods,svc) or a category (all) prints one table per "
        "resource, as kubectl does. With -w (one resource), then the row of every change.",
    )
    _arguments(g)
    g.add_argument("-w", "--watch", action="store_true", help="then print every change")
    w = sub.add_parser(
        "watch",
        parents=[common],
        help="print live changes of a resource across contexts (`get -w`)",
        description="`kubemux get -w`: the current rows first, then the row of every "
        "change. Contexts added to the kubeconfig while it runs are followed with "
        "--all-contexts.",
    )
    _arguments(w)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "resource",
        help="pods, po, deploy, deployments.apps, a CRD's short name; a comma list "
        "(pods,svc) or a category (all)",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="only these objects")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--context",
        action="append",
        default=None,
        help="a context to show (repeatable; default: the current context)",
    )
    scope.add_argument("--all-contexts", action="store_true", help="every context")
    p.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (as kubectl)"
    )
    p.add_argument(
        "-n", "--namespace", default=None, help="this namespace (default: the context's)"
    )
    p.add_argument("-l", "--selector", default=None, help="label selector, e.g. app=web")
    p.add_argument("--field-selector", default=None, help="field selector")
    p.add_argument(
        "-o",
        "--output",
        choices=_OUTPUTS,
        default=None,
        help="wide: more columns; json, yaml: the objects; name: kind/name",
    )
    p.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    p.add_argument(
        "--watch-only",
        "--no-snapshot",
        dest="no_snapshot",
        action="store_true",
        help="with -w: only changes, not the current rows first",
    )
    p.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)


# ---------------------------------------------------------------------- columns
class TableLayout:
    """The columns of one resource's table and how each context's rows fill them.

    ``kind`` (``deployment.apps``) prefixes the name cells, as kubectl does when several
    kinds are printed; NAMESPACE is shown with ``-A`` for a namespaced resource only.
    """

    def __init__(self, multi: bool, all_namespaces: bool, wide: bool, kind: str = "") -> None:
        self.multi = multi
        self.all_namespaces = all_namespaces
        self.wide = wide
        self.kind = kind
        self.columns: list[TableColumn] = []

    def learn(self, columns: Sequence[TableColumn], resource: Resource | None = None) -> None:
        """Add the columns of a context (the first context's order; more by name)."""
        if resource is not None and not resource.namespaced:
            self.all_namespaces = False
        known = {c.name for c in self.columns}
        for col in columns:
            if col.name not in known and (self.wide or col.priority == 0):
                self.columns.append(col)
                known.add(col.name)

    def header(self) -> list[str]:
        head = [c.name.upper() for c in self.columns]
        if self.all_namespaces:
            head.insert(0, "NAMESPACE")
        if self.multi:
            head.insert(0, "CONTEXT")
        return head

    def cells(
        self, context: str, columns: Sequence[TableColumn], row_cells: Sequence[Any], ns: str
    ) -> list[str]:
        by_name = {c.name: (c, v) for c, v in zip(columns, row_cells, strict=False)}
        line = []
        named = not self.kind
        for col in self.columns:
            found = by_name.get(col.name)
            text = cell_text(found[1], _cell_kind(found[0])) if found else ""
            if not named and col.format == "name":  # kubectl prefixes the first name column
                text, named = f"{self.kind}/{text}", True
            line.append(text)
        if self.all_namespaces:
            line.insert(0, ns)
        if self.multi:
            line.insert(0, context)
        return line


def _cell_kind(column: TableColumn) -> str:
    """A server's ``date`` cells are printed as they come (``Created At`` is a timestamp);
    only the client-side fallback's Age holds a timestamp to turn into an age."""
    return column.type if column in FALLBACK_COLUMNS else "string"


def kind_of(resource: Resource) -> str:
    """``pod``, ``deployment.apps``: how kubectl names a kind in ``kind/name``."""
    kind = resource.kind.lower() or resource.plural
    return f"{kind}.{resource.group}" if resource.group else kind


def object_name(resource: Resource, name: str) -> str:
    return f"{kind_of(resource)}/{name}"


# ---------------------------------------------------------------------- contexts
def _contexts(registry: WatcherRegistry, args: argparse.Namespace) -> list[str]:
    if args.all_contexts:
        return sorted(registry.contexts)
    contexts: list[str] = args.context or (
        [registry.current_context] if registry.current_context else []
    )
    if not contexts:
        raise ContextNotFound(
            "(current)",
            "the kubeconfig sets no current-context; use --context or --all-contexts",
        )
    snapshot = registry.kubeconfig_snapshot
    for name in contexts:
        if name in snapshot.invalid:  # found, but it cannot be used
            raise InvalidContext(name, snapshot.invalid[name], snapshot.invalid_sources.get(name))
        if name not in registry.contexts:
            raise ContextNotFound(name)
    return list(dict.fromkeys(contexts))


def say_skipped(registry: WatcherRegistry, err: TextIO | None) -> None:
    """With --all-contexts: name each context the kubeconfig defines but that cannot be
    used, and why, once on stderr (they are skipped)."""
    if err is None:
        return
    snapshot = registry.kubeconfig_snapshot
    for name, why in snapshot.invalid.items():
        where = snapshot.invalid_sources.get(name)
        text = f"kubemux: skipping context {name!r}{f' ({where})' if where else ''}: {why}"
        err.write(terminal_safe(redact_text(text)) + "\n")


def _namespace(registry: WatcherRegistry, args: argparse.Namespace, context: str) -> str | None:
    """The namespace shown in ``context`` (None: all), as kubectl chooses it."""
    if args.all_namespaces:
        return None
    if args.namespace:
        return str(args.namespace)
    cfg = registry.contexts.get(context)
    return (cfg.namespace if cfg is not None else None) or "default"


# ---------------------------------------------------------------------- resources
def resource_names(text: str) -> list[str]:
    """The names of a comma list, each once, in order (kubectl's ``SplitResourceArgument``).

    Raises:
        CommandError: an empty name (``pods,``), with kubectl's wording.
    """
    names = list(dict.fromkeys(text.split(",")))
    if "" in names:
        raise CommandError(_unknown(""))
    return names


def _unknown(name: str, context: str | None = None, suggestions: Sequence[str] = ()) -> str:
    """kubectl's ``the server doesn't have a resource type "x"``, naming the context."""
    message = f'the server doesn\'t have a resource type "{name}"'
    if context is not None:
        message += f" (context {context!r})"
    if suggestions:
        message += "; did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
    return message


def expand(
    names: Sequence[str], served: Sequence[Resource], context: str | None = None
) -> list[Resource]:
    """The resources ``names`` stand for in a context serving ``served``, as kubectl expands
    them: a category (``all``, exact case) is its resources in discovery order, any other
    name is resolved; a resource named twice (``pods,po``, ``all,pods``) comes once.

    Raises:
        CommandError: a name that is neither a category nor a served resource (naming
            ``context`` if given).
    """
    best = preferred(served)
    found: dict[tuple[str, str], Resource] = {}
    for name in names:
        members = [r for r in best if name in r.categories]
        if not members:
            try:
                members = [resolve(name, served, context=context)]
            except UnknownResource as exc:
                raise CommandError(_unknown(name, context, exc.suggestions)) from exc
        for res in members:
            found.setdefault((res.group, res.plural), res)
    return list(found.values())


class Source:
    """One context's view of one resource: a table (or full-object store, for
    ``-o json|yaml``)."""

    def __init__(self, context: str, resource: Resource, namespace: str | None, store: Any):
        self.context = context
        self.resource = resource
        self.namespace = namespace if resource.namespaced else None
        self.store = store

    @property
    def key(self) -> tuple[str, str]:
        return (self.resource.group, self.resource.plural)


async def open_view(
    registry: WatcherRegistry, args: argparse.Namespace, context: str, objects: bool
) -> list[Source]:
    """A context's view of every resource RESOURCE names there (opened, synced), in order.

    Every name is resolved before anything is listed: an unknown one lists nothing.
    """
    named = None if args.all_contexts or len(set(args.context or ())) < 2 else context
    resources = expand(resource_names(args.resource), await registry.resources(context), named)
    if getattr(args, "watch", False) and len(resources) > 1:
        raise CommandError(SINGLE_TYPE)
    kwargs = {"label_selector": args.selector, "field_selector": args.field_selector}
    found: dict[int, Source] = {}
    limiter = anyio.CapacityLimiter(OPENING)

    async def one(i: int, resource: Resource) -> None:
        namespace = _namespace(registry, args, context) if resource.namespaced else None
        async with limiter:
            if objects:
                store: Any = await registry.watch(context, resource, namespace, **kwargs)
            else:
                store = await registry.table(context, resource, namespace, **kwargs)
        found[i] = Source(context, resource, namespace, store)

    try:
        async with anyio.create_task_group() as tg:
            for i, resource in enumerate(resources):
                tg.start_soon(one, i, resource)
    except BaseExceptionGroup as group:  # the first failure, once
        raise unwrap(group) from None
    return [found[i] for i in range(len(resources))]


async def _open_all(
    registry: WatcherRegistry, args: argparse.Namespace, contexts: list[str], objects: bool
) -> list[Source]:
    """Each context's views, in order. With --all-contexts a failing context is a warning,
    but a resource type no context serves is the error it is with one context."""
    found: dict[str, list[Source]] = {}
    unknown: dict[str, CommandError] = {}

    async def one(context: str) -> None:
        if not args.all_contexts:
            found[context] = await open_view(registry, args, context, objects)
            return
        with anyio.move_on_after(ALL_CONTEXTS_WAIT) as scope:
            try:
                found[context] = await open_view(registry, args, context, objects)
            except CommandError as exc:
                unknown[context] = exc
            except KubemuxError as exc:
                log.warning("context %r: %s", context, exc)
        if scope.cancelled_caught:
            log.warning("context %r: no answer within %gs", context, ALL_CONTEXTS_WAIT)

    try:
        async with anyio.create_task_group() as tg:
            for context in contexts:
                tg.start_soon(one, context)
    except BaseExceptionGroup as group:  # the first failure, once
        raise unwrap(group) from None
    if unknown and not found:
        raise unknown[min(unknown, key=contexts.index)]
    for context, exc in unknown.items():
        log.warning("context %r: %s", context, exc)
    return [src for c in contexts for src in found.get(c, ())]


# ---------------------------------------------------------------------- get
async def get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kubemux get`` without ``-w``: each context's rows, once."""
    resource_names(args.resource)  # an empty name fails before the kubeconfig is read
    settings = WatchSettings(burst=GET_BURST)
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=False, settings=settings)
    async with registry:
        contexts, sources = await open_views(registry, args, err)
        return print_once(sources, args, is_multi(args, contexts), out, err)


async def open_views(
    registry: WatcherRegistry, args: argparse.Namespace, err: TextIO | None = None
) -> tuple[list[str], list[Source]]:
    """The contexts asked for and each one's views (opened, synced); with
    ``--all-contexts`` the ones that cannot be used are named on ``err``, once."""
    contexts = _contexts(registry, args)
    if args.all_contexts:
        say_skipped(registry, err)
    with startup(getattr(args, "verbose", 0)):
        sources = await _open_all(registry, args, contexts, args.output in ("json", "yaml"))
    return contexts, sources


def is_multi(args: argparse.Namespace, contexts: Sequence[str]) -> bool:
    """Whether the CONTEXT column is shown."""
    return len(contexts) > 1 or bool(args.all_contexts)


def wanted(args: argparse.Namespace, name: str) -> bool:
    return not args.names or name in args.names


def by_kind(sources: Sequence[Source]) -> list[list[Source]]:
    """The sources grouped by resource, in the order the resources first appear."""
    groups: dict[tuple[str, str], list[Source]] = {}
    for src in sources:
        groups.setdefault(src.key, []).append(src)
    return list(groups.values())


def print_once(
    sources: list[Source], args: argparse.Namespace, multi: bool, out: TextIO, err: TextIO
) -> int:
    """kubectl's output of ``sources``: a table per resource (a blank line between two),
    or one ``kind/name`` a line, or one List; "No resources found" on stderr if nothing."""
    code = 0
    objects = args.output in ("json", "yaml")
    kinds = by_kind(sources)
    if args.names:  # kubectl's error for each missing name, per context and resource
        for src in sources:
            have = (
                {name_of(o) for o in src.store.list()}
                if objects
                else {r.name for r in src.store.rows()}
            )
            for name in args.names:
                if name not in have:
                    err.write(
                        cell_text(
                            f'Error from server (NotFound): {src.resource.name} "{name}" not found'
                        )
                        + "\n"
                    )
                    code = 1
    if objects:
        items = [
            o for kind in kinds for s in kind for o in s.store.list() if wanted(args, name_of(o))
        ]
        doc: Any = {
            "apiVersion": "v1",
            "items": items,
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }
        if len(items) == 1 and len(args.names) == 1 and len(kinds) == 1:
            doc = items[0]
        if items or not args.names:
            dump(doc, args.output, out)
        return code
    if args.output == "name":
        lines = [
            [object_name(s.resource, r.name)]
            for kind in kinds
            for s in kind
            for r in s.store.rows()
            if wanted(args, r.name)
        ]
        if lines:
            TabWriter(out).write(lines)
    else:
        lines = []
        for kind in kinds:
            view = TableLayout(
                multi,
                args.all_namespaces,
                args.output == "wide",
                kind_of(kind[0].resource) if len(kinds) > 1 else "",
            )
            for src in kind:
                view.learn(src.store.columns, src.resource)
            rows = [
                view.cells(s.context, s.store.columns, r.cells, r.namespace)
                for s in kind
                for r in s.store.rows()
                if wanted(args, r.name)
            ]
            if rows:
                if lines:  # kubectl's blank line between two tables
                    out.write("\n")
                TabWriter(out).write([view.header(), *rows])
                lines.extend(rows)
    if not lines and not args.names and not getattr(args, "watch", False):
        err.write(_no_resources(sources, args) + "\n")
    return code


def name_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str((meta or {}).get("name") or "")


def dump(doc: Any, output: str, out: TextIO) -> None:
    if output == "json":
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(yaml.safe_dump(doc, default_flow_style=False))
    out.flush()


def _no_resources(sources: list[Source], args: argparse.Namespace) -> str:
    spaces = {s.namespace for s in sources}
    if args.all_namespaces or not sources or len(spaces) != 1 or None in spaces:
        return "No resources found"
    return cell_text(f"No resources found in {spaces.pop()} namespace.")
