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
import math
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import anyio

from .._errors import ContextNotFound, InvalidContext, KubemuxError, UnknownResource, unwrap
from .._informer.discovery import preferred, resolve
from .._redact import redact_text, terminal_safe
from .._registry.registry import WatcherRegistry
from .._resources import Resource
from .._settings import WatchSettings
from . import _arrivals
from ._arrivals import Arrivals, progress
from ._formats import output_flag, parse_format, request_timeout
from ._output import KUBECONFIG_HELP, CommandError, startup
from ._tables import Source, no_resources, print_once

log = logging.getLogger(__name__)

ALL_CONTEXTS_WAIT = 10.0
"""With --all-contexts, how long a context may take to show its rows (then a warning)."""
CONTEXTS_AT_ONCE = 64
"""How many contexts are opened at once (the next one starts as one answers): each
context's answer time is its own, not the whole fleet's (1,000 started at once all answered
late together, and on a loaded machine some past ``ALL_CONTEXTS_WAIT``)."""
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
        type=output_flag,
        default=None,
        metavar="FORMAT",
        help="wide: more columns; json, yaml: the objects; name: kind/name; "
        "jsonpath=TEMPLATE, custom-columns=HEADER:PATH,...: as kubectl prints them",
    )
    p.add_argument(
        "--no-headers", action="store_true", help="no header line (tables, custom-columns)"
    )
    p.add_argument(
        "-L",
        "--label-columns",
        action="append",
        default=None,
        metavar="KEY",
        help="a column per label key, after the server's (repeatable, or a comma list)",
    )
    p.add_argument(
        "--request-timeout",
        type=request_timeout,
        default=None,
        metavar="DURATION",
        help="how long a context may take to answer (5s, 1m; 0: no limit); default: no "
        f"limit for the contexts named, {ALL_CONTEXTS_WAIT:g}s each with --all-contexts",
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


def answer_limit(args: argparse.Namespace) -> float:
    """How long one context may take to answer: ``--request-timeout`` (0: no limit), else
    ``ALL_CONTEXTS_WAIT`` with --all-contexts, else no limit."""
    given: float | None = getattr(args, "request_timeout", None)
    if given is not None:
        return given if given > 0 else math.inf
    return ALL_CONTEXTS_WAIT if args.all_contexts else math.inf


async def _open_all(
    registry: WatcherRegistry,
    args: argparse.Namespace,
    contexts: list[str],
    objects: bool,
    arrived: Callable[[str, list[Source]], bool] | None = None,
    err: TextIO | None = None,
) -> list[Source]:
    """Each context's views, in order; ``arrived(context, sources)`` as each one answers
    (True: it printed them, they are not kept), and a progress line on ``err`` while some
    keep us waiting (:mod:`._arrivals`). ``CONTEXTS_AT_ONCE`` contexts are opened at a
    time, in order; ``answer_limit`` counts from a context's start. With
    --all-contexts a failing context is a warning, but a resource type no context serves
    is the error it is with one context. A context that takes longer than
    :func:`answer_limit` is a warning with --all-contexts, else the error."""
    found: dict[str, list[Source]] = {}
    unknown: dict[str, CommandError] = {}
    done: set[str] = set()
    answered: set[str] = set()
    limit = answer_limit(args)
    turns = anyio.Semaphore(CONTEXTS_AT_ONCE)

    async def one(context: str) -> None:
        try:
            async with turns:
                await open_one(context)
        finally:
            done.add(context)
        if context in found:
            answered.add(context)
            if arrived is not None and arrived(context, found[context]):
                del found[context]  # printed: its stores go (its session was closed)

    async def open_one(context: str) -> None:
        with anyio.move_on_after(limit) as scope:
            if not args.all_contexts:
                found[context] = await open_view(registry, args, context, objects)
            else:
                try:
                    found[context] = await open_view(registry, args, context, objects)
                except CommandError as exc:
                    unknown[context] = exc
                except KubemuxError as exc:
                    log.warning("context %r: %s", context, exc)
        if scope.cancelled_caught:
            if not args.all_contexts:
                raise CommandError(f"context {context!r}: no answer within {limit:g}s")
            log.warning("context %r: no answer within %gs", context, limit)

    try:
        async with anyio.create_task_group() as tg:
            if err is not None and len(contexts) > 1:
                tg.start_soon(progress, contexts, done, err)
            async with anyio.create_task_group() as opening:
                for context in contexts:
                    opening.start_soon(one, context)
            tg.cancel_scope.cancel("every context answered")
    except BaseExceptionGroup as group:  # the first failure, once
        raise unwrap(group) from None
    if unknown and not answered:
        raise unknown[min(unknown, key=contexts.index)]
    for context, exc in unknown.items():
        log.warning("context %r: %s", context, exc)
    return [src for c in contexts for src in found.get(c, ())]


# ---------------------------------------------------------------------- get
async def get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kubemux get`` without ``-w``: each context's rows, once."""
    resource_names(args.resource)  # an empty name fails before the kubeconfig is read
    parse_format(args)  # and a template that cannot be read
    settings = WatchSettings(burst=GET_BURST)
    registry = WatcherRegistry.from_kubeconfig(args.kubeconfig, follow=False, settings=settings)
    async with registry:
        contexts = _contexts(registry, args)
        multi = is_multi(args, contexts)
        if not multi:
            contexts, sources = await open_views(registry, args, err)
            return print_once(sources, args, multi, out, err)
        if args.all_contexts:
            say_skipped(registry, err)
        fmt = parse_format(args)
        async with anyio.create_task_group() as tg:
            arrivals = Arrivals(registry, args, fmt, contexts, out, tg)

            async def after_grace() -> None:
                await anyio.sleep(_arrivals.GRACE)
                arrivals.start_streaming()

            tg.start_soon(after_grace)
            with startup(getattr(args, "verbose", 0)):
                sources = await _open_all(
                    registry, args, contexts, fmt.objects, arrivals.arrived, err
                )
            tg.cancel_scope.cancel("every context answered")
        if not arrivals.streaming:  # all within the grace: the one table, as always
            return print_once(sources, args, multi, out, err)
        if not arrivals.printed and not args.names:
            err.write(no_resources(sources, args) + "\n")
        return 0


async def open_views(
    registry: WatcherRegistry, args: argparse.Namespace, err: TextIO | None = None
) -> tuple[list[str], list[Source]]:
    """The contexts asked for and each one's views (opened, synced); with
    ``--all-contexts`` the ones that cannot be used are named on ``err``, once."""
    contexts = _contexts(registry, args)
    if args.all_contexts:
        say_skipped(registry, err)
    with startup(getattr(args, "verbose", 0)):
        objects = parse_format(args).objects
        sources = await _open_all(registry, args, contexts, objects, err=err)
    return contexts, sources


def all_contexts(
    registry: WatcherRegistry, args: argparse.Namespace, err: TextIO | None
) -> list[str]:
    """The contexts asked for, naming on ``err`` (once) those that cannot be used."""
    contexts = _contexts(registry, args)
    if args.all_contexts:
        say_skipped(registry, err)
    return contexts


def is_multi(args: argparse.Namespace, contexts: Sequence[str]) -> bool:
    """Whether the CONTEXT column is shown."""
    return len(contexts) > 1 or bool(args.all_contexts)
