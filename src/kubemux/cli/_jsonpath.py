"""kubectl's JSONPath templates (``-o jsonpath=...``, ``-o custom-columns=...``).

A port of client-go's ``util/jsonpath`` evaluator (its parser: :mod:`._jsonpath_parse`)
over decoded JSON (dicts, lists, str, int, float, bool, None), with kubectl's printing: text
between ``{}`` as it is, several results of one expression separated by a space, strings as
they are, numbers as Go prints them, maps and lists as JSON. ``range``/``end``,
``[?(@.a=="b")]`` filters, slices, unions, ``*``, ``..`` recursive descent and quoted text
(``{"\\n"}``) work as in kubectl. Missing keys give nothing (kubectl's printers allow them).

Bounded: a template longer than ``MAX_TEMPLATE`` characters, or nested (template or data)
deeper than Python would recurse, is refused with :class:`JSONPathError`; results are
produced while printing, never more than the objects hold.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ._jsonpath_parse import (
    ArrayNode,
    BoolNode,
    FieldNode,
    FilterNode,
    IdentifierNode,
    JSONPathError,
    ListNode,
    NumberNode,
    RecursiveNode,
    TextNode,
    UnionNode,
    WildcardNode,
    parse,
)

__all__ = ["JSONPathError", "Template", "go_text", "relaxed"]


# ---------------------------------------------------------------------- evaluation
class Template:
    """A parsed kubectl JSONPath template; :meth:`render` applies it to one document."""

    def __init__(self, text: str) -> None:
        self._root = parse(text)
        self.text = text

    def results(self, data: Any) -> list[list[Any]]:
        """Each top-level expression's results (what client-go's ``FindResults`` gives)."""
        try:
            return _Run().find(data, self._root.nodes)
        except RecursionError:
            raise JSONPathError("the data is nested too deeply for the template") from None

    def render(self, data: Any) -> str:
        return "".join(
            " ".join(go_text(value, json_maps=True) for value in group)
            for group in self.results(data)
        )


class _Run:
    """One evaluation, with client-go's state for ``range``/``end`` (a stack of scopes and
    three counters), so that templates behave exactly as in kubectl: the text after an
    ``{end}`` is evaluated once, in the last iteration, against the outer scope; a range
    over nothing ends the output."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []
        self.cur: list[Any] = []
        self.begin_range = 0
        self.in_range = 0
        self.end_range = 0

    def find(self, data: Any, nodes: list[Any]) -> list[list[Any]]:
        self.cur = [data]
        full: list[list[Any]] = []
        for i, node in enumerate(nodes):
            results = self.walk(self.cur, node)
            if self.end_range > 0 and self.end_range <= self.in_range:
                self.end_range -= 1
                break
            if self.begin_range > 0:
                self.begin_range -= 1
                self.in_range += 1
                for k, value in enumerate(results):
                    if k == len(results) - 1:
                        self.in_range -= 1
                    full.extend(self.find(value, nodes[i + 1 :]))
                break
            full.append(results)
        return full

    def walk(self, cur: list[Any], node: Any) -> list[Any]:
        if isinstance(node, ListNode):
            for inner in node.nodes:
                cur = self.walk(cur, inner)
            return cur
        if isinstance(node, TextNode):
            return [node.text]
        if isinstance(node, FieldNode):
            return [v[node.name] for v in cur if isinstance(v, dict) and node.name in v]
        if isinstance(node, ArrayNode):
            return _slice(cur, node)
        if isinstance(node, FilterNode):
            return self.filter(cur, node)
        if isinstance(node, NumberNode | BoolNode):
            return [node.value for _ in cur]
        if isinstance(node, WildcardNode):
            out: list[Any] = []
            for value in cur:
                if isinstance(value, dict):
                    out.extend(value[k] for k in sorted(value))
                elif isinstance(value, list | str):
                    out.extend(value)
            return out
        if isinstance(node, RecursiveNode):
            return _recursive(cur)
        if isinstance(node, UnionNode):
            out = []
            for part in node.nodes:
                out.extend(self.walk(cur, part))
            return out
        if isinstance(node, IdentifierNode):
            if node.name == "range":
                self.stack.append(self.cur)
                self.begin_range += 1
                return cur
            if node.name == "end":
                if self.end_range < self.in_range:  # inside a loop: end this pass
                    self.end_range += 1
                elif self.stack:  # the loop is over: back to the outer scope
                    self.cur = self.stack.pop()
                else:
                    raise JSONPathError("not in range, nothing to end")
                return []
            raise JSONPathError(f"unrecognized identifier {node.name}")
        raise JSONPathError(f"unexpected node {node!r}")

    def filter(self, cur: list[Any], node: FilterNode) -> list[Any]:
        out = []
        for value in cur:
            if not isinstance(value, list):
                raise JSONPathError(
                    f"{go_text(value)} is not array or slice and cannot be filtered"
                )
            for item in value:
                lefts = self.walk([item], node.left)
                if node.operator == "exists":
                    if lefts:
                        out.append(item)
                    continue
                rights = self.walk([item], node.right)
                if len(lefts) != 1 or len(rights) != 1:
                    raise JSONPathError("can only compare one element at a time")
                if _compare(lefts[0], rights[0], node.operator):
                    out.append(item)
        return out


def _slice(cur: list[Any], node: ArrayNode) -> list[Any]:
    out = []
    for value in cur:
        if value is None:
            continue
        if not isinstance(value, list):
            raise JSONPathError(f"{_go_type(value)} is not array or slice")
        length = len(value)
        (k0, start), (k1, end), (k2, step) = node.params
        start = start if k0 else 0
        if start < 0:
            start += length
        end = end if k1 else length
        if end < 0:
            end += length
        if end != start:
            if start >= length:
                raise JSONPathError(f"array index out of bounds: index {start}, length {length}")
            if end > length:
                raise JSONPathError(f"array index out of bounds: index {end - 1}, length {length}")
        if start < 0 or end < start:
            raise JSONPathError(f"array index out of bounds: index {start}, length {length}")
        part = value[start:end]
        if k2 and step > 1:  # Go's Slice3 sets a capacity, not a step: the same elements
            part = value[start:end]
        out.extend(part)
    return out


def _recursive(cur: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in cur:
        children: list[Any] = []
        if isinstance(value, dict):
            children = [value[k] for k in sorted(value)]
        elif isinstance(value, list):
            children = list(value)
        elif isinstance(value, str) and value:  # Go descends into its bytes: leaves
            out.append(value)
        if children:
            out.append(value)
            out.extend(_recursive(children))
    return out


def _compare(left: Any, right: Any, operator: str) -> bool:
    numbers = (int, float)
    if isinstance(left, bool) or isinstance(right, bool):
        if operator == "==":
            return type(left) is type(right) and left == right
        if operator == "!=":
            return not (type(left) is type(right) and left == right)
        raise JSONPathError(f"invalid type for comparison: {_go_type(left)}")
    if (isinstance(left, numbers) and isinstance(right, numbers)) or (
        isinstance(left, str) and isinstance(right, str)
    ):
        pass
    elif operator in ("==", "!="):
        return operator == "!="  # different kinds: never equal
    else:
        raise JSONPathError("incompatible types for comparison")
    a: Any = left  # two numbers or two strings, from here on
    b: Any = right
    if operator == "==":
        return bool(a == b)
    if operator == "!=":
        return bool(a != b)
    if operator == "<":
        return bool(a < b)
    if operator == ">":
        return bool(a > b)
    if operator == "<=":
        return bool(a <= b)
    if operator == ">=":
        return bool(a >= b)
    raise JSONPathError(f"unrecognized filter operator {operator}")


def _go_type(value: Any) -> str:
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "interface {}"


def _go_float(value: float) -> str:
    """A float64 as Go's ``%v`` prints it (``strconv.FormatFloat(f, 'g', -1, 64)`` with
    Go's exponent rule: exponents below -4 or at least 21 use e-notation)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    if -4 <= exponent < 21:
        text = repr(value)
        if "e" in text:  # Python switches to e-notation earlier than Go
            text = f"{value:.{max(0, 17 - exponent)}f}".rstrip("0").rstrip(".")
        return text.removesuffix(".0")
    mantissa, _, exp = f"{value:e}".partition("e")
    digits = repr(value).partition("e")[0] if "e" in repr(value) else mantissa
    short = repr(float(digits)) if "e" not in repr(value) else digits
    short = short.removesuffix(".0")
    sign = "-" if int(exp) < 0 else "+"
    return f"{short}e{sign}{abs(int(exp)):02d}"


def go_text(value: Any, *, json_maps: bool = False) -> str:
    """``value`` as kubectl prints a template's result: strings as they are, numbers as Go
    does, ``true``/``false``; maps and lists as JSON (``json_maps``, jsonpath's printer) or
    as Go's ``fmt`` does (``map[k:v]``, custom-columns)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**63:  # kubectl reads whole numbers as int64
            return str(int(value))
        return _go_float(value)
    if value is None:
        return "<nil>" if not json_maps else "null"
    if json_maps:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_text(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_text(v) for v in value) + "]"
    return str(value)


_RELAXED = re.compile(r"^\{\.?([^{}]+)\}$|^\.?([^{}]+)$")


def relaxed(expression: str) -> str:
    """kubectl's ``RelaxedJSONPathExpression``: ``.a.b``, ``a.b``, ``{a.b}`` -> ``{.a.b}``."""
    if not expression:
        return expression
    found = _RELAXED.match(expression)
    if found is None:
        raise JSONPathError(
            "unexpected path string, expected a 'name1.name2' or '.name1.name2' or "
            "'{name1.name2}' or '{.name1.name2}'"
        )
    return "{." + (found.group(1) or found.group(2)) + "}"
