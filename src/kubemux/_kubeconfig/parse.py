"""Parsing one kubeconfig document: kubectl's types, kubectl's path rules (sync, no I/O).

See :mod:`kubemux._kubeconfig.load` for the rules and :mod:`kubemux._kubeconfig.schema` for the
types.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, Final

import yaml

from .._errors import KubeconfigError
from . import schema
from .yamlread import load_yaml

__all__ = ["MEMORY_SOURCE", "ParsedFile", "parse_document", "parse_file"]

MEMORY_SOURCE: Final = "<memory>"
CLUSTER_FILE_FIELDS: Final = ("certificate-authority",)
USER_FILE_FIELDS: Final = ("client-certificate", "client-key", "tokenFile")
_SECTIONS: Final = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
_SINGULAR: Final = {"clusters": "cluster", "contexts": "context", "users": "user"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ParsedFile:
    path: str
    data: bytes
    clusters: dict[str, dict[str, Any]]
    contexts: dict[str, dict[str, Any]]
    users: dict[str, dict[str, Any]]
    current_context: str
    is_blank: bool
    # entry name -> why it cannot be used (kubectl loads it but fails when it is used)
    cluster_problems: dict[str, str] = dataclasses.field(default_factory=dict)
    user_problems: dict[str, str] = dataclasses.field(default_factory=dict)


def parse_file(path: str, data: bytes) -> ParsedFile:
    try:
        document = load_yaml(data)
    except yaml.MarkedYAMLError as exc:
        # Built by hand: str(exc) can quote a snippet of the file, which may hold a secret.
        where = ""
        if exc.problem_mark is not None:
            where = f" at line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}"
        problem = exc.problem or "syntax error"
        if exc.context:
            problem = f"{problem} ({exc.context})"
        raise KubeconfigError(f"{path}: invalid YAML{where}: {problem}", path=path) from exc
    except yaml.YAMLError as exc:  # ReaderError: bad encoding or control characters
        raise KubeconfigError(f"{path}: invalid YAML: {exc}", path=path) from exc
    except RecursionError as exc:
        raise KubeconfigError(f"{path}: invalid YAML: nested too deeply", path=path) from exc
    try:
        return parse_document(path, document, base_dir=os.path.dirname(path), data=data)
    except RecursionError as exc:
        raise KubeconfigError(f"{path}: not a valid kubeconfig: nested too deeply") from exc


def parse_document(
    path: str, document: Any, *, base_dir: str | None, data: bytes = b""
) -> ParsedFile:
    """Type-check one kubeconfig document as kubectl does and resolve its relative paths."""

    def fail(problem: str) -> KubeconfigError:
        return KubeconfigError(
            f"{path}: not a valid kubeconfig: {problem}",
            path=None if path == MEMORY_SOURCE else path,
        )

    is_blank = document is None  # empty, whitespace or comments only
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise fail(f"expected a mapping at the top level, got {schema.type_name(document)}")
    try:
        top = schema.check_entry(document, schema.CONFIG)
    except schema.SchemaError as exc:
        raise fail(str(exc)) from None
    kind = top.get("kind")
    if kind not in (None, "", "Config"):
        raise fail(f"kind is {kind!r}, expected 'Config'")
    current = top.get("current-context") or ""
    sections: dict[str, dict[str, dict[str, Any]]] = {}
    for section, body_key in _SECTIONS:
        entries = document.get(section)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise fail(f"{section!r} must be a list, got {schema.type_name(entries)}")
        by_name: dict[str, dict[str, Any]] = {}
        for index, entry in enumerate(entries):
            where = f"{section}[{index}]"
            if entry is None:
                entry = {}
            if not isinstance(entry, dict):
                raise fail(f"{where} must be a mapping, got {schema.type_name(entry)}")
            name = entry.get("name")
            if name is None:
                name = ""
            if not isinstance(name, str):
                raise fail(f"{where}.name must be a string, got {schema.type_name(name)}")
            body = entry.get(body_key)
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise fail(f"{where}.{body_key} must be a mapping, got {schema.type_name(body)}")
            if name in by_name:
                raise fail(f"duplicate name {name!r} in {section!r}")
            by_name[name] = body
        sections[section] = by_name

    def check(section: str, name: str, body: dict[str, Any], spec: Any) -> dict[str, Any]:
        try:
            return schema.check_entry(body, spec)
        except schema.SchemaError as exc:
            owner = f"{_SINGULAR[section]} {name!r}"
            if section != "contexts":
                key = "cluster" if section == "clusters" else "user"
                users = [c for c, b in sections["contexts"].items() if b.get(key) == name]
                if users:
                    shown = ", ".join(repr(c) for c in users[:3])
                    more = f" and {len(users) - 3} more" if len(users) > 3 else ""
                    owner = f"{owner} (used by context {shown}{more})"
            raise fail(f"{owner}: {exc}") from None

    contexts = sections["contexts"]
    for name, body in contexts.items():
        contexts[name] = check("contexts", name, body, schema.CONTEXT)
    clusters = sections["clusters"]
    cluster_problems: dict[str, str] = {}
    for name, body in clusters.items():
        body = check("clusters", name, body, schema.CLUSTER)
        problem = schema.cluster_problem(body)
        if problem is not None:
            cluster_problems[name] = problem
            clusters[name] = body
        else:
            clusters[name] = _resolve(body, CLUSTER_FILE_FIELDS, base_dir)
    users = sections["users"]
    user_problems: dict[str, str] = {}
    for name, body in users.items():
        body = check("users", name, body, schema.USER)
        problem = schema.user_problem(body)
        if problem is not None:
            user_problems[name] = problem
            users[name] = body
            continue
        resolved = _resolve(body, USER_FILE_FIELDS, base_dir)
        exec_ = resolved.get("exec")
        command = exec_.get("command") if exec_ is not None else None
        # client-go resolves the exec command only when it is a path, not a $PATH lookup
        if exec_ is not None and command and "/" in command:
            if resolved is body:
                resolved = dict(body)
            resolved["exec"] = _resolve(exec_, ("command",), base_dir)
        users[name] = resolved
    return ParsedFile(
        path=path,
        data=data,
        clusters=clusters,
        contexts=contexts,
        users=users,
        current_context=current,
        is_blank=is_blank,
        cluster_problems=cluster_problems,
        user_problems=user_problems,
    )


def _resolve(body: dict[str, Any], fields: Sequence[str], base_dir: str | None) -> dict[str, Any]:
    """A copy of ``body`` with its relative file-path ``fields`` made absolute."""
    if base_dir is None:
        return body
    out = body
    for key in fields:
        value = body.get(key)
        if value and not os.path.isabs(value):
            if out is body:
                out = dict(body)
            out[key] = os.path.normpath(os.path.join(base_dir, value))
    return out
