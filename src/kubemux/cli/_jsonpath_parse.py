"""kubectl's JSONPath templates, parsed (:func:`parse`): client-go's ``util/jsonpath``
parser ported, node for node; :mod:`._jsonpath` evaluates and prints them.

Bounded: a template longer than ``MAX_TEMPLATE`` characters, or nested deeper than Python
would recurse, is refused with :class:`JSONPathError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_TEMPLATE",
    "ArrayNode",
    "BoolNode",
    "FieldNode",
    "FilterNode",
    "IdentifierNode",
    "JSONPathError",
    "ListNode",
    "NumberNode",
    "RecursiveNode",
    "TextNode",
    "UnionNode",
    "WildcardNode",
    "parse",
]

MAX_TEMPLATE = 10_000


class JSONPathError(ValueError):
    """A template that cannot be parsed or evaluated (kubectl's words where it has them)."""


# ---------------------------------------------------------------------- nodes
@dataclass
class ListNode:
    nodes: list[Any] = field(default_factory=list)


@dataclass
class TextNode:
    text: str


@dataclass
class FieldNode:
    name: str


@dataclass
class IdentifierNode:
    name: str


@dataclass
class ArrayNode:
    params: list[tuple[bool, int]]  # (known, value) for start, end, step


@dataclass
class FilterNode:
    left: ListNode
    right: ListNode
    operator: str


@dataclass
class UnionNode:
    nodes: list[ListNode]


@dataclass
class NumberNode:
    value: int | float


@dataclass
class BoolNode:
    value: bool


class WildcardNode:
    pass


class RecursiveNode:
    pass


_DICT_KEY = re.compile(r"^'([^']*)'$")
_SLICE = re.compile(r"^(-?\d*)(:-?\d*)?(:-?\d*)?$")
_FILTER = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$")


def _terminator(c: str) -> bool:
    return c in " \t\r\n" or c in ".,[]$@{}" or c == ""


class _Parser:
    def __init__(self, text: str) -> None:
        self.input = text
        self.pos = 0
        self.start = 0
        self.root = ListNode()

    def parse(self) -> ListNode:
        self._text(self.root)
        return self.root

    def _next(self) -> str:
        if self.pos >= len(self.input):
            return ""
        c = self.input[self.pos]
        self.pos += 1
        return c

    def _peek(self) -> str:
        return self.input[self.pos] if self.pos < len(self.input) else ""

    def _consume(self) -> str:
        value = self.input[self.start : self.pos]
        self.start = self.pos
        return value

    def _text(self, cur: ListNode) -> None:
        while True:
            if self.input.startswith("{", self.pos):
                if self.pos > self.start:
                    cur.nodes.append(TextNode(self._consume()))
                self.pos += 1
                self._consume()
                action = ListNode()
                cur.nodes.append(action)
                self._action(action)
                return
            if self._next() == "":
                break
        if self.pos > self.start:
            cur.nodes.append(TextNode(self._consume()))

    def _action(self, cur: ListNode) -> None:
        while True:
            rest = self.input[self.pos :]
            if rest.startswith("}"):
                self.pos += 1
                self._consume()
                self._text(self.root)
                return
            if rest.startswith("[?("):
                self._filter(cur)
                continue
            if rest.startswith(".."):
                if cur.nodes and isinstance(cur.nodes[-1], RecursiveNode):
                    raise JSONPathError("invalid multiple recursive descent")
                self.pos += 2
                self._consume()
                cur.nodes.append(RecursiveNode())
                if _alnum(self._peek()):
                    self._field(cur)
                continue
            c = self._next()
            if c == "" or c in "\r\n":
                raise JSONPathError("unclosed action")
            if c in " @$":
                self._consume()
            elif c == "[":
                self._array(cur)
            elif c in "\"'":
                self._quote(cur, c)
            elif c == ".":
                self._field(cur)
            elif c in "+-" or c.isdigit():
                self.pos -= 1
                self._number(cur)
            elif _alnum(c):
                self.pos -= 1
                self._identifier(cur)
            else:
                raise JSONPathError(f"unrecognized character in action: U+{ord(c):04X} {c!r}")

    def _identifier(self, cur: ListNode) -> None:
        while True:
            c = self._next()
            if _terminator(c):
                if c != "":
                    self.pos -= 1
                break
        value = self._consume()
        if value in ("true", "false"):
            cur.nodes.append(BoolNode(value == "true"))
        else:
            cur.nodes.append(IdentifierNode(value))

    def _number(self, cur: ListNode) -> None:
        if self._peek() in "+-":
            self._next()
        while True:
            c = self._next()
            if c != "." and not c.isdigit():
                if c != "":
                    self.pos -= 1
                break
        value = self._consume()
        try:
            cur.nodes.append(NumberNode(int(value)))
        except ValueError:
            try:
                cur.nodes.append(NumberNode(float(value)))
            except ValueError:
                raise JSONPathError(f"cannot parse number {value}") from None

    def _array(self, cur: ListNode) -> None:
        while True:
            c = self._next()
            if c in ("", "\n"):
                raise JSONPathError("unterminated array")
            if c == "]":
                break
        text = self._consume()[1:-1]
        if text == "*":
            text = ":"
        parts = text.split(",")
        if len(parts) > 1:
            union = [_action_of(f"[{p.strip(' ')}]") for p in parts]
            cur.nodes.append(UnionNode(union))
            return
        key = _DICT_KEY.match(text)
        if key:
            cur.nodes.extend(_action_of(f".{key.group(1)}").nodes)
            return
        found = _SLICE.match(text)
        if found is None:
            raise JSONPathError(f"invalid array index {text}")
        values = list(found.groups())
        params: list[tuple[bool, int]] = []
        for i in range(3):
            value = values[i]
            if value:
                if i > 0:
                    value = value[1:]
                if i > 0 and value == "":
                    params.append((False, 0))
                else:
                    try:
                        params.append((True, int(value)))
                    except ValueError:
                        raise JSONPathError(f"array index {value} is not a number") from None
            elif i == 1:
                params.append((True, params[0][1] + 1))
            else:
                params.append((False, 0))
        cur.nodes.append(ArrayNode(params))

    def _filter(self, cur: ListNode) -> None:
        self.pos += 3
        self._consume()
        begin = end = False
        pair = ""
        while True:
            c = self._next()
            if c in ("", "\n"):
                raise JSONPathError("unterminated filter")
            if c in "\"'":
                if not begin:
                    begin, pair = True, c
                    continue
                if self.input[self.pos - 2] != "\\" and c == pair:
                    end = True
            elif c == ")" and begin == end:
                break
        if self._next() != "]":
            raise JSONPathError("unclosed array expect ]")
        text = self._consume()[:-2]
        found = _FILTER.match(text)
        if found is None:
            cur.nodes.append(FilterNode(_action_of(text), ListNode(), "exists"))
        else:
            left, operator, right = found.groups()
            cur.nodes.append(FilterNode(_action_of(left), _action_of(right), operator))

    def _quote(self, cur: ListNode, quote: str) -> None:
        while True:
            c = self._next()
            if c in ("", "\n"):
                raise JSONPathError("unterminated quoted string")
            if c == quote and self.input[self.pos - 2] != "\\":
                break
        raw = self._consume()
        cur.nodes.append(TextNode(_unquote(raw)))

    def _field(self, cur: ListNode) -> None:
        self._consume()
        while True:
            c = self._next()
            if c == "\\":
                self._next()
            elif _terminator(c):
                if c != "":
                    self.pos -= 1
                break
        value = self._consume()
        if value == "*":
            cur.nodes.append(WildcardNode())
        else:
            cur.nodes.append(FieldNode(value.replace("\\", "")))


def _alnum(c: str) -> bool:
    return c == "_" or c.isalnum()


def _unquote(raw: str) -> str:
    body = raw[1:-1]
    if "\\" not in body:
        return body
    try:
        return str(json.loads('"' + body.replace('"', '\\"').replace("\\'", "'") + '"'))
    except json.JSONDecodeError:
        raise JSONPathError(f"unquote string {raw} error invalid syntax") from None


def parse(text: str) -> ListNode:
    """``text`` parsed as client-go parses a template: a list of text and actions."""
    if len(text) > MAX_TEMPLATE:
        raise JSONPathError(f"the template is longer than {MAX_TEMPLATE} characters")
    try:
        return _Parser(text).parse()
    except RecursionError:
        raise JSONPathError("the template is nested too deeply") from None


def _action_of(text: str) -> ListNode:
    root = _Parser("{" + text + "}").parse()
    node = root.nodes[0]
    assert isinstance(node, ListNode)
    return node
