"""``kubemux get`` and ``kubemux watch``: the server's columns, as ``kubectl get`` prints them.

Each context's rows come from :meth:`WatcherRegistry.table` (the server's Table format, a
CRD's printer columns); ``-w`` (and ``watch``) then prints the row of every change, as
``kubectl get -w`` does. A CONTEXT column comes first when several contexts are shown;
``-A`` adds NAMESPACE as in kubectl. Cells are shown terminal-safe; ``-o json|yaml`` write
the objects exactly.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any, TextIO

import anyio
import orjson
import yaml

from .._discovery import resolve
from .._errors import ContextNotFound, KubemuxError
from .._registry import WatcherRegistry
from .._resources import Resource
from .._table import TableColumn
from ._output import KUBECONFIG_HELP, TabWriter, cell_text, startup

log = logging.getLogger(__name__)

_OUTPUTS = ("wide", "json", "yaml", "name")
ALL_CONTEXTS_WAIT = 10.0
"""With --all-contexts, how long a context may take to show its rows (then a warning)."""


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    g = sub.add_parser(
        "get",
        parents=[common],
        help="print a resource's server-side columns across contexts, like `kubectl get`",
        description="Like `kubectl get`, across contexts: the columns the server prints "
        "(a CRD's printer columns too), with a CONTEXT column when several contexts are "
        "shown. With -w, then the row of every change.",
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
    p.add_argument("resource", help="pods, po, deploy, deployments.apps, a CRD's short name")
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
class View:
    """The columns shown and how each context's rows fill them."""

    def __init__(self, multi: bool, all_namespaces: bool, wide: bool) -> None:
        self.multi = multi
        self.all_namespaces = all_namespaces
        self.wide = wide
        self.columns: list[TableColumn] = []

    def learn(self, columns: Sequence[TableColumn]) -> None:
        """Add the columns of a context (the first context's order; more by name)."""
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
        for col in self.columns:
            found = by_name.get(col.name)
            line.append(cell_text(found[1], found[0].type) if found else "")
        if self.all_namespaces:
            line.insert(0, ns)
        if self.multi:
            line.insert(0, context)
        return line


def object_name(resource: Resource, name: str) -> str:
    kind = resource.kind.lower() or resource.name
    return f"{kind}.{resource.group}/{name}" if resource.group else f"{kind}/{name}"


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
    for name in contexts:
        if name not in registry.contexts:
            raise ContextNotFound(name)
    return list(dict.fromkeys(contexts))


def _namespace(registry: WatcherRegistry, args: argparse.Namespace, context: str) -> str | None:
    """The namespace shown in ``context`` (None: all), as kubectl chooses it."""
    if args.all_namespaces:
        return None
    if args.namespace:
        return str(args.namespace)
    cfg = registry.contexts.get(context)
    return (cfg.namespace if cfg is not None else None) or "default"


class Source:
    """One context's table view (or full-object store, for ``-o json|yaml``)."""

    def __init__(self, context: str, resource: Resource, namespace: str | None, store: Any):
        self.context = context
        self.resource = resource
        self.namespace = namespace if resource.namespaced else None
        self.store = store


async def open_view(
    registry: WatcherRegistry, args: argparse.Namespace, context: str, objects: bool
) -> Source:
    resource = resolve(args.resource, await registry.resources(context), context=context)
    namespace = _namespace(registry, args, context) if resource.namespaced else None
    kwargs = {"label_selector": args.selector, "field_selector": args.field_selector}
    if objects:
        store: Any = await registry.watch(context, resource, namespace, **kwargs)
    else:
        store = await registry.table(context, resource, namespace, **kwargs)
    return Source(context, resource, namespace, store)


async def _open_all(
    registry: WatcherRegistry, args: argparse.Namespace, contexts: list[str], objects: bool
) -> list[Source]:
    """Each context's view, in order; with --all-contexts a failing context is a warning."""
    found: dict[str, Source] = {}

    async def one(context: str) -> None:
        if not args.all_contexts:
            found[context] = await open_view(registry, args, context, objects)
            return
        with anyio.move_on_after(ALL_CONTEXTS_WAIT) as scope:
            try:
                found[context] = await open_view(registry, args, context, objects)
            except KubemuxError as exc:
                log.warning("context %r: %s", context, exc)
        if scope.cancelled_caught:
            log.warning("context %r: no answer within %gs", context, ALL_CONTEXTS_WAIT)

    try:
        async with anyio.create_task_group() as tg:
            for context in contexts:
                tg.start_soon(one, context)
    except BaseExceptionGroup as group:  # the first failure, once
        raise group.exceptions[0] from None
    return [found[c] for c in contexts if c in found]


# ---------------------------------------------------------------------- get
async def get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kubemux get`` without ``-w``: each context's rows, once."""
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=False)
    async with registry:
        _, sources, view = await open_views(registry, args)
        return print_once(sources, args, view, out, err)


async def open_views(
    registry: WatcherRegistry, args: argparse.Namespace
) -> tuple[list[str], list[Source], View]:
    """The contexts asked for, each one's view (opened, synced), and the columns shown."""
    contexts = _contexts(registry, args)
    with startup(getattr(args, "verbose", 0)):
        sources = await _open_all(registry, args, contexts, args.output in ("json", "yaml"))
    multi = len(contexts) > 1 or args.all_contexts
    return contexts, sources, View(multi, args.all_namespaces, args.output == "wide")


def wanted(args: argparse.Namespace, name: str) -> bool:
    return not args.names or name in args.names


def print_once(
    sources: list[Source], args: argparse.Namespace, view: View, out: TextIO, err: TextIO
) -> int:
    code = 0
    objects = args.output in ("json", "yaml")
    if args.names:  # kubectl's error for each missing name, per context
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
        items = [o for s in sources for o in s.store.list() if wanted(args, name_of(o))]
        doc: Any = {
            "apiVersion": "v1",
            "items": items,
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }
        if len(items) == 1 and len(args.names) == 1:
            doc = items[0]
        if items or not args.names:
            dump(doc, args.output, out)
        return code
    lines: list[list[str]] = []
    for src in sources:
        view.learn(src.store.columns)
    for src in sources:
        for row in src.store.rows():
            if not wanted(args, row.name):
                continue
            if args.output == "name":
                lines.append([object_name(src.resource, row.name)])
            else:
                lines.append(view.cells(src.context, src.store.columns, row.cells, row.namespace))
    if not lines:
        if not args.names and not getattr(args, "watch", False):
            err.write(_no_resources(sources, args) + "\n")
        return code
    writer = TabWriter(out)
    writer.write(lines if args.output == "name" else [view.header(), *lines])
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
