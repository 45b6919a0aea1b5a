"""YAML for kubeconfig files: PyYAML's safe loader, with a fast path for plain documents.

PyYAML's loader takes over a second for a kubeconfig of 5,000 contexts; most of that is
composing nodes and resolving scalars in generic Python. :func:`load_yaml` builds plain
documents straight from libyaml's parser events instead (about 4x faster), with PyYAML's own
scalar resolution, and hands anything unusual (anchors, tags, merge keys, complex keys) to
the full loader. A test checks that both give the same result.

Two departures from ``yaml.safe_load``, both to read what kubectl reads:

- Timestamps stay strings (Go's YAML decoder keeps them as text: ``namespace: 2024-01-01`` is
  the namespace ``"2024-01-01"``).
- Aliases are expanded lazily by PyYAML (one shared object) but eagerly by everything after
  it (the fingerprint's JSON, the client's copy). A document whose aliases would expand past
  ``_EXPANSION_FACTOR`` times its size plus ``_EXPANSION_SLACK`` (counted in nodes plus
  scalar characters, before anything is built), or whose aliases form a cycle, is refused
  with :class:`YamlTooLarge`: an alias bomb of 1 KB cannot become gigabytes.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

__all__ = ["YamlTooLarge", "load_yaml"]

_EXPANSION_FACTOR: Final = 8
_EXPANSION_SLACK: Final = 1_000_000
_TIMESTAMP_TAG: Final = "tag:yaml.org,2002:timestamp"


class YamlTooLarge(yaml.YAMLError):
    """The document's aliases expand too far, or form a cycle."""


# The full loader (libyaml's parser when available) handles every YAML feature; see
# _fast_yaml for the fast path used on plain documents.
class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


_YamlLoader.add_constructor(_TIMESTAMP_TAG, _YamlLoader.construct_yaml_str)
_CParser: Any
try:
    from yaml import _yaml as _libyaml

    _CParser = _libyaml.CParser
except ImportError:  # PyYAML built without libyaml
    _CParser = None


def load_yaml(data: bytes) -> Any:
    """Like ``yaml.safe_load`` but only the first document counts (as in kubectl)."""
    if _CParser is not None:
        try:
            return _fast_yaml(data)
        except _NeedFullLoader:
            pass
    loader = _YamlLoader(data)
    try:
        if not loader.check_node():
            return None
        node = loader.get_node()
        _check_expansion(node, _EXPANSION_FACTOR * len(data) + _EXPANSION_SLACK)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, limit: int) -> None:
    """Refuse a node graph whose aliases expand past ``limit`` or loop (no recursion)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children: list[yaml.Node]
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        if children_done:
            open_nodes.discard(key)
            size = 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
            size += sum(sizes[id(child)] for child in children)
            if size > limit:
                raise YamlTooLarge(
                    f"aliases expand the document past {limit} nodes and characters "
                    "(an alias bomb?)"
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YamlTooLarge("an alias refers to a node that contains it (a cycle)")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)


class _NeedFullLoader(Exception):
    """The document uses a feature the fast path leaves to PyYAML's loader."""


_RESOLVERS: Final = yaml.SafeLoader.yaml_implicit_resolvers
_SAFE_CONSTRUCTOR: Final = yaml.constructor.SafeConstructor()
_STR_TAG: Final = "tag:yaml.org,2002:str"
_NULL_TAG: Final = "tag:yaml.org,2002:null"
_NO_KEY: Final = object()


def _fast_yaml(data: bytes) -> Any:
    """Build the first document straight from libyaml's events: ~4x faster than yaml.load.

    PyYAML's loader spends most of its time composing nodes and resolving every scalar in
    generic Python code; 5,000 contexts take over a second. This builds plain dicts and lists
    from the parser's events and resolves plain scalars with PyYAML's own implicit-resolver
    table, so the result is what ``SafeLoader`` gives. Anchors, aliases, explicit tags, merge
    keys and non-scalar keys raise :class:`_NeedFullLoader`, and PyYAML's loader does it.
    """
    parser = _CParser(data)
    stack: list[Any] = []  # open containers
    pending: list[Any] = []  # per open mapping: the key waiting for its value, or _NO_KEY
    root: Any = None
    seen_document = False
    try:
        while True:
            event: Any = parser.get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _NeedFullLoader
                value: Any = event.value
                if event.implicit[0]:
                    value = _resolve_plain(value)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _NeedFullLoader
                value = {} if kind is yaml.MappingStartEvent else []
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                container = stack.pop()
                if type(container) is dict:
                    pending.pop()
                continue
            elif kind is yaml.DocumentStartEvent:
                seen_document = True
                continue
            elif kind is yaml.DocumentEndEvent or kind is yaml.StreamEndEvent or event is None:
                return root if seen_document else None
            elif kind is yaml.StreamStartEvent:
                continue
            else:  # AliasEvent
                raise _NeedFullLoader
            if not stack:
                root = value
            else:
                top = stack[-1]
                if type(top) is list:
                    top.append(value)
                elif pending[-1] is _NO_KEY:
                    if type(value) in (dict, list):
                        raise _NeedFullLoader  # a complex key
                    pending[-1] = value
                else:
                    top[pending[-1]] = value
                    pending[-1] = _NO_KEY
            if type(value) is dict:
                stack.append(value)
                pending.append(_NO_KEY)
            elif type(value) is list:
                stack.append(value)
    finally:
        parser.dispose()


def _resolve_plain(value: str) -> Any:
    """A plain scalar as SafeLoader constructs it (null, bool, int, float, timestamp or str)."""
    for tag, regexp in _RESOLVERS.get(value[:1], ()):
        if regexp.match(value):
            if tag == _NULL_TAG:
                return None
            if tag in (_STR_TAG, _TIMESTAMP_TAG):
                return value
            construct = _SAFE_CONSTRUCTOR.yaml_constructors.get(tag)
            if construct is None or tag.endswith((":merge", ":value")):
                raise _NeedFullLoader
            return construct(_SAFE_CONSTRUCTOR, yaml.ScalarNode(tag, value))
    return value
