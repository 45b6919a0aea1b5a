"""``labelSelector`` as kube-apiserver parses and evaluates it.

A port of ``k8s.io/apimachinery/pkg/labels``: its lexer, its recursive-descent parser and
``NewRequirement``'s validation, so a malformed selector gets the API server's own message,
e.g. ``unable to parse requirement: found '', expected: '('`` for ``a in``. Every operator
is supported: ``=``, ``==``, ``!=``, ``in``, ``notin``, exists (``key``), ``!key``, and
``gt``/``lt`` (``key>1``).

Bounded: a selector longer than :data:`MAX_SELECTOR_LENGTH` or with more than
:data:`MAX_REQUIREMENTS` requirements is refused with a 400 worded like the API server's
validation errors (``labelSelector: Too long: must have at most 1048576 bytes``); lexing is
one regular expression pass, so parsing is linear in the input; matching costs one dict
lookup per requirement (``in`` sets are frozensets).

Wording follows kube-apiserver 1.35 (``k8s.io/apimachinery/pkg/api/validate/content``: "a
valid label key", "must be no more than 63 bytes").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from .._api.statuses import FieldError, ProxyStatusError, bad_request, field_errors_message

__all__ = [
    "EVERYTHING",
    "MAX_REQUIREMENTS",
    "MAX_SELECTOR_LENGTH",
    "LabelRequirement",
    "LabelSelector",
    "parse_label_selector",
]

MAX_SELECTOR_LENGTH: Final = 1 << 20
"""Longest ``labelSelector``/``fieldSelector`` accepted, in bytes (Go's default limit on a
request's header block, which holds the URL)."""
MAX_REQUIREMENTS: Final = 100
"""Most requirements in one selector (matching costs one check per requirement per object;
a legitimate selector has a handful)."""


def too_long(param: str, text: str) -> ProxyStatusError | None:
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_SELECTOR_LENGTH:
        return bad_request(f"{param}: Too long: must have at most {MAX_SELECTOR_LENGTH} bytes")
    return None


def too_many(param: str, count: int) -> ProxyStatusError:
    return bad_request(f"{param}: Too many: {count}: must have at most {MAX_REQUIREMENTS} items")


# --------------------------------------------------------------------- label key and values
_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = f"({_LABEL_KEY_FMT})?"
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``content.RegexError`` (its double spaces before ``or`` included)."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    text = msg + " (e.g. "
    for i, example in enumerate(examples):
        if i:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)


def _byte_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogateescape"))


def _label_key_errors(key: str) -> list[str]:
    """``content.IsLabelKey``."""
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > 253:
                errs.append("prefix part must be no more than 253 bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errs.append(
                    "prefix part "
                    + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def _label_value_errors(value: str) -> list[str]:
    """``content.IsLabelValue``."""
    errs: list[str] = []
    if _byte_len(value) > 63:
        errs.append("must be no more than 63 bytes")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs


class ParseError(Exception):
    """A parse error's message (before the API server's "unable to parse requirement: ")."""


# ------------------------------------------------------------------------------ the lexer
_ERROR, _EOS, _CLOSE, _COMMA, _NOT, _DEQ, _EQ, _GT, _ID, _IN, _LT, _NEQ, _NOTIN, _OPEN = range(14)
_SYMBOLS = {
    ")": _CLOSE,
    ",": _COMMA,
    "!": _NOT,
    "==": _DEQ,
    "=": _EQ,
    ">": _GT,
    "<": _LT,
    "!=": _NEQ,
    "(": _OPEN,
}
_KEYWORDS = {"in": _IN, "notin": _NOTIN}
# Token kinds by literal. The end of the input is the literal "" (no real token is empty).
# In the parser's Values context, "in" and "notin" are identifiers.
_VALUE_KINDS = {**_SYMBOLS, "": _EOS}
_KEY_KINDS = {**_VALUE_KINDS, **_KEYWORDS}
# Go's lexer: whitespace is space, tab, CR, LF; special symbols are =!(),<> and the longest
# of "!=", "==" wins; an identifier is anything else; a NUL byte reads as the end of the
# input where a token would start, and ends (and is eaten by) an identifier.
_TOKENS_RE = re.compile(r"[ \t\r\n]*(!=|==|[=!(),<>]|[^ \t\r\n=!(),<>]+)")
_TOKEN_NUL_RE = re.compile(r"[ \t\r\n]*(?:(!=|==|[=!(),<>])|([^ \t\r\n=!(),<>\x00]+)\x00?)")


def _lex(text: str) -> list[str]:
    """The literals of the tokens, then ``""`` for the end (one regex pass, in C)."""
    if "\x00" not in text:
        tokens = _TOKENS_RE.findall(text)
    else:
        tokens = []
        match = _TOKEN_NUL_RE.match
        pos = 0
        while (found := match(text, pos)) is not None:
            tokens.append(found.group(1) or found.group(2))
            pos = found.end()
    tokens.append("")
    return tokens


_BINARY_OPS = ("in", "notin", "=", "==", "!=", "gt", "lt")
_OP_OF_TOKEN = {_IN: "in", _EQ: "=", _DEQ: "==", _GT: "gt", _LT: "lt", _NOTIN: "notin", _NEQ: "!="}


class _Parser:
    """``labels.Parser``: lookahead/consume over the scanned tokens."""

    __slots__ = ("pos", "toks")

    def __init__(self, toks: list[str]):
        self.toks = toks
        self.pos = 0

    def lookahead(self) -> tuple[int, str]:
        lit = self.toks[self.pos]
        return _VALUE_KINDS.get(lit, _ID), lit

    def consume(self) -> tuple[int, str]:
        lit = self.toks[self.pos]
        self.pos += 1
        return _VALUE_KINDS.get(lit, _ID), lit

    def parse(self) -> list[LabelRequirement]:
        reqs: list[LabelRequirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_ID, _NOT):
                try:
                    reqs.append(self.requirement())
                except ParseError as exc:
                    raise ParseError(f"unable to parse requirement: {exc}") from None
                if len(reqs) > MAX_REQUIREMENTS:
                    raise TooMany(len(reqs))
                t, lit2 = self.consume()
                if t == _EOS:
                    return reqs
                if t == _COMMA:
                    t2, lit3 = self.lookahead()
                    if t2 not in (_ID, _NOT):
                        raise ParseError(f"found '{lit3}', expected: identifier after ','")
                else:
                    raise ParseError(f"found '{lit2}', expected: ',' or 'end of string'")
            elif tok == _EOS:
                return reqs
            else:
                raise ParseError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> LabelRequirement:
        key, operator = self.key_and_operator()
        if operator in ("exists", "!"):
            return _new_requirement(key, operator, [])
        operator = self.operator()
        values = self.values() if operator in ("in", "notin") else self.exact_value()
        return _new_requirement(key, operator, sorted(values))

    def key_and_operator(self) -> tuple[str, str]:
        operator = ""
        tok, lit = self.consume()
        if tok == _NOT:
            operator = "!"
            tok, lit = self.consume()
        if tok != _ID:
            raise ParseError(f"found '{lit}', expected: identifier")
        errs = _label_key_errors(lit)
        if errs:
            raise ParseError(str(FieldError.invalid("<nil>", lit, "; ".join(errs))))
        nxt, _ = self.lookahead()
        if nxt in (_EOS, _COMMA) and operator != "!":
            operator = "exists"
        return lit, operator

    def operator(self) -> str:
        lit = self.toks[self.pos]  # the KeyAndOperator context: keywords are operators
        self.pos += 1
        op = _OP_OF_TOKEN.get(_KEY_KINDS.get(lit, _ID))
        if op is None:
            raise ParseError(f"found '{lit}', expected: {', '.join(_BINARY_OPS)}")
        return op

    def values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _OPEN:
            raise ParseError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_ID, _COMMA):
            found = self.identifiers()
            if self.consume()[0] != _CLOSE:
                raise ParseError(f"found '{lit}', expected: ')'")
            return found
        if tok == _CLOSE:
            self.consume()
            return {""}
        raise ParseError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        # the hot loop of a long `in (...)` list: locals only
        toks = self.toks
        kinds = _VALUE_KINDS
        pos = self.pos
        found: set[str] = set()
        add = found.add
        try:
            while True:
                lit = toks[pos]
                pos += 1
                tok = kinds.get(lit, _ID)
                nxt = kinds.get(toks[pos], _ID) if tok in (_ID, _COMMA) else _ERROR
                if tok == _ID:
                    add(lit)
                    if nxt == _COMMA:
                        continue
                    if nxt == _CLOSE:
                        return found
                    raise ParseError(f"found '{toks[pos]}', expected: ',' or ')'")
                if tok == _COMMA:
                    if not found:
                        add("")
                    if nxt in (_CLOSE, _COMMA):
                        add("")
                    if nxt == _CLOSE:
                        return found
                    continue
                raise ParseError(f"found '{lit}', expected: ',', or identifier")
        finally:
            self.pos = pos

    def exact_value(self) -> set[str]:
        tok, _ = self.lookahead()
        if tok in (_EOS, _COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _ID:
            return {lit}
        raise ParseError(f"found '{lit}', expected: identifier")


class TooMany(Exception):
    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


_INT64 = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``, or None."""
    if not _INT64.fullmatch(text) or not text.isascii():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _new_requirement(key: str, operator: str, values: list[str]) -> LabelRequirement:
    """``labels.NewRequirement``'s checks on the values (the key was checked already)."""
    errs: list[FieldError] = []
    if operator in ("gt", "lt"):  # the parser gives them exactly one value
        for i, value in enumerate(values):
            if _parse_int64(value) is None:
                errs.append(
                    FieldError.invalid(
                        f"values[{i}]",
                        value,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    for i, value in enumerate(values):
        value_errs = _label_value_errors(value)
        if value_errs:
            errs.append(FieldError.invalid(f"values[{i}][{key}]", value, "; ".join(value_errs)))
    if errs:
        raise ParseError(field_errors_message(errs))
    return LabelRequirement(key, operator, tuple(values))


# ---------------------------------------------------------------------------- label values
@dataclasses.dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One requirement: ``key``, an operator (``=``, ``==``, ``!=``, ``in``, ``notin``,
    ``exists``, ``!``, ``gt``, ``lt``) and its values, sorted."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """``Requirement.Matches``."""
        op = self.operator
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "==", "in"):
            return value is not None and value in self.values
        if op in ("!=", "notin"):
            return value is None or value not in self.values
        if value is None:  # gt, lt
            return False
        have = _parse_int64(value)
        want = _parse_int64(self.values[0]) if len(self.values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        """``Requirement.String``."""
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return "!" + self.key
        joined = ",".join(self.values)
        if op in ("in", "notin"):
            return f"{self.key} {op} ({joined})"
        return self.key + {"gt": ">", "lt": "<"}.get(op, op) + joined


def _matcher(req: LabelRequirement) -> Callable[[Mapping[str, str]], bool]:
    """A fast closure for one requirement (the common operators need no dispatch)."""
    key = req.key
    op = req.operator
    if op == "exists":
        return lambda labels: key in labels
    if op == "!":
        return lambda labels: key not in labels
    if op in ("=", "==", "in"):
        if len(req.values) == 1:
            one = req.values[0]
            return lambda labels: labels.get(key) == one
        many = frozenset(req.values)
        return lambda labels: labels.get(key) in many
    if op in ("!=", "notin"):
        many = frozenset(req.values)

        def not_in(labels: Mapping[str, str]) -> bool:
            value = labels.get(key)
            return value is None or value not in many

        return not_in
    return req.matches


class LabelSelector:
    """A parsed ``labelSelector``: requirements ANDed, sorted by key (as ``labels.Parse``
    sorts them)."""

    __slots__ = ("_checks", "requirements")

    requirements: tuple[LabelRequirement, ...]

    def __init__(self, requirements: Iterable[LabelRequirement] = ()):
        self.requirements = tuple(sorted(requirements, key=lambda r: r.key))
        self._checks = tuple(_matcher(r) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every requirement."""
        for check in self._checks:  # noqa: SIM110 (a loop beats all(genexpr))
            if not check(labels):
                return False
        return True

    def requires_exact_match(self, key: str) -> str | None:
        """``RequiresExactMatch``: the single value ``key`` must have, or None."""
        for req in self.requirements:
            if req.key == key:
                if req.operator in ("=", "==", "in") and len(req.values) == 1:
                    return req.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        return f"<LabelSelector {str(self)!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelSelector) and self.requirements == other.requirements

    def __hash__(self) -> int:
        return hash(self.requirements)


EVERYTHING = LabelSelector()


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query parameter as ``labels.Parse`` does.

    Raises:
        ProxyStatusError: 400 BadRequest with the API server's message.
    """
    if not text:
        return EVERYTHING
    error = too_long("labelSelector", text)
    if error is not None:
        raise error
    try:
        return LabelSelector(_Parser(_lex(text)).parse())
    except ParseError as exc:
        raise bad_request(str(exc)) from None
    except TooMany as exc:
        raise too_many("labelSelector", exc.count) from None
