"""``get``'s and ``watch``'s output flags as kubectl reads them: ``-o`` (``wide``, ``json``,
``yaml``, ``name``, ``jsonpath=TEMPLATE``, ``custom-columns=SPEC``), ``--no-headers``,
``-L``/``--label-columns`` and ``--request-timeout``.

``jsonpath`` and ``custom-columns`` print the full objects (as ``-o json`` lists them) through
kubectl's template language (:mod:`._jsonpath`): a template's output as kubectl's (no newline
added), except that control characters other than newline and tab are shown as escapes
(``\\x1b``: kubectl prints them raw, and a value is the cluster's text), custom columns with the headers as written, ``<none>`` for nothing, several
values joined by ``,``, maps as Go prints them. Label columns follow the server's, headed by
the key's last ``/`` segment in capitals, a missing label an empty cell.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._redact import terminal_safe
from ._jsonpath import JSONPathError, Template, go_text, relaxed
from ._output import fit_cell

__all__ = [
    "Format",
    "label_header",
    "output_flag",
    "parse_format",
    "request_timeout",
]

PLAIN = ("wide", "json", "yaml", "name")
TEMPLATED = ("jsonpath", "custom-columns")


def output_flag(text: str) -> str:
    """argparse's check of ``-o``: one of kubectl's formats kubemux prints."""
    kind, eq, _ = text.partition("=")
    if text in PLAIN or (eq and kind in TEMPLATED):
        return text
    allowed = ", ".join([*PLAIN, "jsonpath=...", "custom-columns=..."])
    raise argparse.ArgumentTypeError(
        f"unable to match a printer suitable for the output format {text!r}, allowed formats are: {allowed}"
    )


def request_timeout(text: str) -> float:
    """kubectl's ``--request-timeout``: a Go duration (``500ms``, ``10s``, ``1m30s``) or a
    bare number of seconds; 0 means none."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number of seconds or a duration like 5s, 1m"
        )
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def label_header(key: str) -> str:
    """kubectl's header of a label column: the key's last ``/`` segment, in capitals."""
    return key.rsplit("/", 1)[-1].upper()


@dataclass(frozen=True)
class Format:
    """What to print: ``kind`` is ``table``, ``wide``, ``name``, ``json``, ``yaml``,
    ``jsonpath`` or ``custom-columns``."""

    kind: str
    template: Template | None = None
    columns: tuple[tuple[str, Template], ...] = ()
    no_headers: bool = False
    labels: tuple[str, ...] = ()

    @property
    def objects(self) -> bool:
        """Whether the full objects are needed (not the server's table)."""
        return self.kind in ("json", "yaml", "jsonpath", "custom-columns")

    def render(self, doc: Any) -> str:
        """``-o jsonpath``'s output for one document (a List, or the one object named),
        terminal-safe (newlines and tabs kept)."""
        assert self.template is not None
        try:
            return terminal_safe(self.template.render(doc), newlines=True)
        except JSONPathError as exc:
            raise ValueError(f"error executing jsonpath {self.template.text!r}: {exc}") from exc

    def header(self) -> list[str]:
        return [name for name, _ in self.columns]

    def row(self, obj: Any) -> list[str]:
        """One object's custom columns."""
        cells = []
        for _, template in self.columns:
            try:
                groups = template.results(obj)
            except JSONPathError as exc:
                raise ValueError(f"error executing custom-columns: {exc}") from exc
            values = [fit_cell(go_text(v)) for group in groups for v in group]
            cells.append(",".join(values) if groups and groups[0] else "<none>")
        return cells


def parse_format(args: argparse.Namespace) -> Format:
    """The output the flags ask for.

    Raises:
        ValueError: a template or a custom-columns spec kubectl would refuse, in its words.
    """
    output: str = getattr(args, "output", None) or "table"
    labels: list[str] = []
    for flag in getattr(args, "label_columns", None) or ():
        labels.extend(key.strip() for key in flag.split(",") if key.strip())
    no_headers = bool(getattr(args, "no_headers", False))
    kind, _, rest = output.partition("=")
    if kind == "jsonpath":
        try:
            template = Template(rest)
        except JSONPathError as exc:
            raise ValueError(f"error parsing jsonpath {rest}, {exc}") from exc
        return Format(kind, template=template)
    if kind == "custom-columns":
        return Format(kind, columns=_columns(rest), no_headers=no_headers)
    return Format(kind, no_headers=no_headers, labels=tuple(labels))


def _columns(spec: str) -> tuple[tuple[str, Template], ...]:
    if not spec:
        raise ValueError("custom-columns format specified but no custom columns given")
    out = []
    for part in spec.split(","):
        header, colon, path = part.partition(":")
        if not colon:
            raise ValueError(
                f"unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>"
            )
        try:
            out.append((header, Template(relaxed(path))))
        except JSONPathError as exc:
            raise ValueError(f"unexpected custom-columns spec {part}: {exc}") from exc
    return tuple(out)


def label_cells(labels: Sequence[str], metadata: Any) -> list[str]:
    """An object's values of the label columns (empty where it lacks the label)."""
    found = metadata.get("labels") if isinstance(metadata, dict) else None
    found = found if isinstance(found, dict) else {}
    return [str(found.get(key, "")) for key in labels]
