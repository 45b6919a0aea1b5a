"""A Griffe extension: Sphinx cross-reference roles in docstrings become Markdown.

kubemux's docstrings use ``:class:`~kubemux.Store``` and friends. mkdocstrings reads Markdown,
where these would show as raw text: this turns each into inline code, linked (through
mkdocs-autorefs) when it names a public object of kubemux, kubemux.testing or kubemux.metrics.
A "Raises:" section holding one line of prose instead of entries becomes a sentence.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:class|meth|func|attr|data|exc|mod|obj):`(~?)([^`<>]+?)\s*(?:<([^`<>]+)>)?`"
)
# "Raises:" followed by prose rather than "Error: why" entries (": the same errors as watch")
_RAISES_PROSE = re.compile(r"^([ \t]*)Raises:\n[ \t]+([^:\n]+)$", re.MULTILINE)
_PUBLIC_MODULES = ("kubemux", "kubemux.testing", "kubemux.metrics")


def _public() -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for module in _PUBLIC_MODULES:
        try:
            names[module] = set(importlib.import_module(module).__all__)
        except ImportError:  # an optional extra that is not installed
            names[module] = set()
    return names


class SphinxRoles(griffe.Extension):
    def __init__(self) -> None:
        super().__init__()
        self._public = _public()

    def _target(self, path: str) -> str | None:
        """The public identifier ``path`` names, if any (private module paths included)."""
        parts = path.split(".")
        if parts[0] != "kubemux":
            return None
        for module in sorted(_PUBLIC_MODULES, key=len, reverse=True):
            depth = module.count(".") + 1
            if (
                ".".join(parts[:depth]) == module
                and len(parts) > depth
                and parts[depth] in self._public[module]
            ):
                return ".".join(parts)
        # kubemux._registry.registry.WatcherRegistry.watch -> kubemux.WatcherRegistry.watch
        for i, part in enumerate(parts[1:], start=1):
            if part in self._public["kubemux"] and all(p.startswith("_") for p in parts[1:i]):
                return ".".join(["kubemux", *parts[i:]])
        return None

    def _replace(self, match: re.Match[str]) -> str:
        short, path, explicit = match.group(1), match.group(2).strip(), match.group(3)
        text = path.rsplit(".", 1)[-1] if short else path
        if explicit:  # :meth:`text <target>`
            text, path = path, explicit.strip()
        target = self._target(path)
        return f"[`{text}`][{target}]" if target else f"`{text}`"

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            value = _ROLE.sub(self._replace, obj.docstring.value)
            obj.docstring.value = _RAISES_PROSE.sub(r"\1Raises: \2", value)
