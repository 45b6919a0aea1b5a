"""What ``get`` and ``watch`` print: the server's columns as ``kubectl get`` lays them out
(:class:`TableLayout`), and one answer's output in every format (:func:`print_once`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TextIO

import orjson
import yaml

from .._cache.table import FALLBACK_COLUMNS, TableColumn
from .._resources import Resource
from ._formats import Format, label_cells, label_header, parse_format
from ._output import TabWriter, cell_text

__all__ = [
    "Source",
    "TableLayout",
    "by_kind",
    "dump",
    "kind_of",
    "name_of",
    "no_resources",
    "object_name",
    "print_once",
    "wanted",
]


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


# ---------------------------------------------------------------------- columns
class TableLayout:
    """The columns of one resource's table and how each context's rows fill them.

    ``kind`` (``deployment.apps``) prefixes the name cells, as kubectl does when several
    kinds are printed; NAMESPACE is shown with ``-A`` for a namespaced resource only.
    """

    def __init__(
        self,
        multi: bool,
        all_namespaces: bool,
        wide: bool,
        kind: str = "",
        labels: Sequence[str] = (),
    ) -> None:
        self.multi = multi
        self.all_namespaces = all_namespaces
        self.wide = wide
        self.kind = kind
        self.labels = tuple(labels)  # -L: a column per label key, after the server's
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
        head.extend(label_header(key) for key in self.labels)
        if self.all_namespaces:
            head.insert(0, "NAMESPACE")
        if self.multi:
            head.insert(0, "CONTEXT")
        return head

    def cells(
        self,
        context: str,
        columns: Sequence[TableColumn],
        row_cells: Sequence[Any],
        ns: str,
        metadata: Any = None,
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
        line.extend(label_cells(self.labels, metadata))
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
    fmt = parse_format(args)
    objects = fmt.objects
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
        if fmt.kind == "custom-columns":
            return print_columns(sources, args, fmt, multi, out, err) or code
        if fmt.kind == "jsonpath":
            out.write(fmt.render(doc))
            out.flush()
        elif items or not args.names:
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
                fmt.labels,
            )
            for src in kind:
                view.learn(src.store.columns, src.resource)
            rows = [
                view.cells(s.context, s.store.columns, r.cells, r.namespace, r.metadata)
                for s in kind
                for r in s.store.rows()
                if wanted(args, r.name)
            ]
            if rows:
                if lines:  # kubectl's blank line between two tables
                    out.write("\n")
                TabWriter(out).write(rows if fmt.no_headers else [view.header(), *rows])
                lines.extend(rows)
    if not lines and not args.names and not getattr(args, "watch", False):
        err.write(no_resources(sources, args) + "\n")
    return code


def print_columns(
    sources: list[Source],
    args: argparse.Namespace,
    fmt: Format,
    multi: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    """``-o custom-columns``: a row per object, CONTEXT first when several are shown."""
    rows = []
    for src in sources:
        for obj in src.store.list():
            if wanted(args, name_of(obj)):
                cells = fmt.row(obj)
                rows.append([src.context, *cells] if multi else cells)
    if rows:
        header = (["CONTEXT"] if multi else []) + fmt.header()
        TabWriter(out).write(rows if fmt.no_headers else [header, *rows])
    elif not args.names and not getattr(args, "watch", False):
        err.write(no_resources(sources, args) + "\n")
    return 0


def name_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str((meta or {}).get("name") or "")


def dump(doc: Any, output: str, out: TextIO) -> None:
    if output == "json":
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(yaml.safe_dump(doc, default_flow_style=False))
    out.flush()


def no_resources(sources: list[Source], args: argparse.Namespace) -> str:
    spaces = {s.namespace for s in sources}
    if args.all_namespaces or not sources or len(spaces) != 1 or None in spaces:
        return "No resources found"
    return cell_text(f"No resources found in {spaces.pop()} namespace.")
