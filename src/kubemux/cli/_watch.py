"""``kubemux watch`` and ``kubemux get -w``: the current rows, then the row of every change.

Rows are laid out as kubectl's tabwriter lays them out with remembered widths: a later row
never shrinks a column, so it lines up with the rows above it.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any, TextIO

import anyio
import orjson

from .._errors import KubemuxError
from .._registry.fanout import Change
from .._registry.registry import WatcherRegistry
from .._resources import known_resource
from ._formats import parse_format
from ._get import (
    SINGLE_TYPE,
    all_contexts,
    is_multi,
    open_view,
    open_views,
    resource_names,
)
from ._output import CommandError, TabWriter
from ._tables import Source, TableLayout, dump, name_of, object_name, print_once, wanted

log = logging.getLogger(__name__)

DRAIN = 10_000  # changes taken at most per turn of the event loop
WATCH_BUFFER = 100_000
"""Changes the watch's subscription holds before it is closed (the registry's default is
1,000): with --all-contexts every context's first list is announced to it as the context
starts, several contexts in one turn of the event loop (20 contexts of 300 pods: 6,000),
before the command can take them; the command is the subscription's only reader."""


async def watch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kubemux watch`` (``get -w``), until the duration (or Ctrl-C) ends it."""
    args.watch = True
    if len(resource_names(args.resource)) > 1:
        raise CommandError(SINGLE_TYPE)
    fmt = parse_format(args)
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=True)
    async with registry:
        known = known_resource(args.resource)
        if args.all_contexts and known is not None:
            # a built-in: subscribed to at once, each context's rows shown as it answers
            contexts = all_contexts(registry, args, err)
            sources: list[Source] = []
            tried: set[str] = set()
        else:  # (a custom resource's name means what each cluster's discovery says)
            contexts, sources = await open_views(registry, args, err)
            tried = set(contexts)
        wide = args.output == "wide"
        view = TableLayout(is_multi(args, contexts), args.all_namespaces, wide, labels=fmt.labels)
        with anyio.move_on_after(args.duration):
            await _follow(registry, args, contexts, sources, view, out, err, tried)
    return 0


async def _follow(
    registry: WatcherRegistry,
    args: argparse.Namespace,
    contexts: list[str],
    sources: list[Source],
    view: TableLayout,
    out: TextIO,
    err: TextIO,
    tried: set[str],
) -> int:
    """The current rows, then the row of every change (subscribed before the rows are read:
    nothing is missed, and a change already shown is skipped by its resourceVersion); with
    --all-contexts, contexts added to the kubeconfig are opened and shown too. An empty
    start prints nothing (as ``kubectl get -w``): the header comes with the first row."""
    fmt = parse_format(args)
    objects = fmt.objects
    by_context = {s.context: s for s in sources}
    writer = TabWriter(out)
    shown: dict[tuple[str, str, str], str] = {}
    header = [fmt.no_headers]  # printed (or not wanted)

    def print_object(change: Change) -> None:
        if fmt.kind == "jsonpath":  # the template of each object, as kubectl -w
            out.write(fmt.render(change.object or {}))
            out.flush()
        elif fmt.kind == "custom-columns":
            row = fmt.row(change.object or {})
            if view.multi:
                row = [change.context, *row]
            head = (["CONTEXT"] if view.multi else []) + fmt.header()
            writer.write([row] if header[0] else [head, row])
            header[0] = True
        else:
            _print_change(change, str(args.output), out)

    def show_current(batch: list[Source]) -> None:
        for src in batch:
            items = src.store.list() if objects else [r.metadata for r in src.store.rows()]
            for item in items:
                meta = item.get("metadata", item) if objects else item
                key = (src.context, str(meta.get("namespace") or ""), str(meta.get("name")))
                shown[key] = str(meta.get("resourceVersion") or "")
        if args.no_snapshot:
            return
        if objects:  # the current objects as the changes after them are printed
            for src in batch:
                for obj in src.store.list():
                    if wanted(args, name_of(obj)):
                        added = Change(src.context, src.resource.name, "ADDED", obj, snapshot=True)
                        print_object(added)
            return
        if args.output == "name":
            print_once(batch, args, view.multi, out, err)
            return
        for src in batch:
            view.learn(src.store.columns, src.resource)
        lines = [
            view.cells(s.context, s.store.columns, r.cells, r.namespace, r.metadata)
            for s in batch
            for r in s.store.rows()
            if wanted(args, r.name)
        ]
        if lines:
            writer.write(lines if header[0] else [view.header(), *lines])
            header[0] = True

    def opened(src: Source) -> None:
        by_context[src.context] = src
        show_current([src])

    # a category (``toys``) is subscribed to as the one resource it stands for
    known = known_resource(args.resource)
    resource = sources[0].resource.name if sources else known.name if known else args.resource

    namespace = None if args.all_namespaces else args.namespace
    async with (
        anyio.create_task_group() as tg,
        registry.subscribe(
            resource,
            None if args.all_contexts else contexts,
            namespace=namespace,
            snapshot=False,
            buffer_size=WATCH_BUFFER,
            view="objects" if objects else "table",
        ) as changes,
    ):
        show_current(sources)
        if args.all_contexts:
            tg.start_soon(
                _start_new_contexts, registry, args, by_context, objects, opened, list(tried)
            )

        def show(change: Change) -> None:
            src = by_context.get(change.context)
            if src is None or change.type not in ("ADDED", "MODIFIED", "DELETED"):
                return
            if src.namespace is not None and change.namespace != src.namespace:
                return
            if not wanted(args, change.name) or _already_shown(change, shown):
                return
            if objects:
                print_object(change)
            elif args.output == "name":
                writer.write([[object_name(src.resource, change.name)]])
            else:
                obj: dict[str, Any] = dict(change.object or {})
                view.learn(src.store.columns, src.resource)
                cells = obj.get("cells") or ()
                meta = obj.get("metadata")
                line = view.cells(change.context, src.store.columns, cells, change.namespace, meta)
                writer.write([line] if header[0] else [view.header(), line])
                header[0] = True

        async for change in changes:
            show(change)
            # then what is ready, without a turn of the event loop each: a fleet's contexts
            # starting announce their first lists (thousands of changes, skipped here: their
            # rows come from the stores) faster than one change a turn is taken
            for _ in range(DRAIN):
                try:
                    more = changes.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break  # (an end is raised by the next __anext__)
                show(more)
        tg.cancel_scope.cancel("the subscription ended")
    return 0


def _already_shown(change: Change, shown: dict[tuple[str, str, str], str]) -> bool:
    """Whether the row printed from the store already showed this change (or a later one)."""
    key = (change.context, change.namespace, change.name)
    printed = shown.get(key)
    if printed is None:
        return False
    meta = (change.object or {}).get("metadata") or {}
    version = str(meta.get("resourceVersion") or "")
    if change.type != "DELETED" and (
        version == printed
        or (version.isdigit() and printed.isdigit() and int(version) < int(printed))
    ):
        return True
    del shown[key]
    return False


def _print_change(change: Change, output: str, out: TextIO) -> None:
    if output == "json":
        record = {
            "context": change.context,
            "resource": change.resource,
            "type": change.type,
            "object": change.object,
        }
        out.write(orjson.dumps(record).decode() + "\n")
        out.flush()
    else:
        out.write("---\n")
        dump({"context": change.context, "type": change.type, "object": change.object}, "yaml", out)


async def _start_new_contexts(
    registry: WatcherRegistry,
    args: argparse.Namespace,
    by_context: dict[str, Source],
    objects: bool,
    opened: Callable[[Source], None],
    initial: list[str],
) -> None:
    """With --all-contexts: open the view in every context the kubeconfig gains (each on
    its own, so a slow context holds no other back)."""
    tried: set[str] = set(initial)

    async def open_one(context: str) -> None:
        try:
            src = await open_view(registry, args, context, objects)
        except (KubemuxError, CommandError) as exc:
            log.warning("context %r: %s", context, exc)
        else:
            if context in registry.contexts and src:
                opened(src[0])

    async with anyio.create_task_group() as tg:
        while True:
            version = registry.status_version
            for context in sorted(set(registry.contexts) - tried):
                tried.add(context)
                tg.start_soon(open_one, context)
            for gone in tried - set(registry.contexts):
                tried.discard(gone)
                by_context.pop(gone, None)
            await registry.wait_status_change(version)
