"""The shape of ``src/kubemux``, read from its source (issue 19): no import circle, few
private names taken across modules, few long modules.

Nothing is imported: each module is parsed with :mod:`ast`. Every import counts, also one
under ``if TYPE_CHECKING:`` and one inside a function (a circle closed by either still
leaves a reader without a top). ``python tests/test_structure.py`` prints what is found.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "kubemux"

MAX_PRIVATE_IMPORTS = 10  # each one carries a comment at its import saying why
MAX_LONG_MODULES = 2  # each one named, with its reason, in docs/design-notes.md
LONG_MODULE_LINES = 500

# packages counted apart from the limits above while they are rebuilt (none now)
PENDING: tuple[str, ...] = ()


@dataclass(frozen=True)
class Module:
    name: str  # dotted: kubemux._cache.store
    path: Path
    tree: ast.Module
    lines: int

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def package(self) -> str:
        """The package that relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class PrivateUse:
    module: str  # where the name is used
    source: str  # the module that defines it
    name: str
    line: int
    how: str  # "import" or "attribute"

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.source}.{self.name} ({self.how})"


def modules() -> dict[str, Module]:
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        text = path.read_text(encoding="utf-8")
        found[name] = Module(name, path, ast.parse(text, str(path)), text.count("\n"))
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imports(module: Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Each import statement anywhere in ``module`` with the absolute module it names."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node, target


def imports_of(module: Module, known: dict[str, Module]) -> Iterator[tuple[str, int]]:
    """The modules of the package that ``module`` imports (with the line), each as the
    module the statement names, or the submodule a ``from package import name`` takes."""
    for node, target in _imports(module):
        if isinstance(node, ast.Import):
            if target in known:
                yield target, node.lineno
            continue
        if target not in known:
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            yield (sub if sub in known else target), node.lineno


def circles(known: dict[str, Module]) -> list[list[str]]:
    """The import circles (strongly connected components of two or more modules, or one
    importing itself), found with Tarjan's algorithm."""
    graph = {
        name: sorted({t for t, _ in imports_of(module, known)}) for name, module in known.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    return sorted(found)


def private_uses(known: dict[str, Module]) -> list[PrivateUse]:
    """Private names of one module taken by another: ``from x import _y``, and ``x._y``
    where ``x`` is bound to a module of the package by an import."""
    uses = []
    for module in known.values():
        bound: dict[str, str] = {}  # local name -> module of the package
        for node, target in _imports(module):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.asname:
                        bound[alias.asname] = alias.name
                    elif alias.name in known:
                        bound[alias.name.partition(".")[0]] = alias.name.partition(".")[0]
                continue
            if target not in known:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:  # a module: `from . import _codec` binds it
                    bound[alias.asname or alias.name] = sub
                elif _is_private(alias.name) and target != module.name:
                    uses.append(PrivateUse(module.name, target, alias.name, node.lineno, "import"))
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                chain = _dotted(node.value)
                if chain is None:
                    continue
                head, _, rest = chain.partition(".")
                if head not in bound:
                    continue
                source = ".".join(filter(None, [bound[head], rest]))
                if source in known and source != module.name:
                    uses.append(
                        PrivateUse(module.name, source, node.attr, node.lineno, "attribute")
                    )
    return sorted(uses, key=lambda u: (u.module, u.line, u.name))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def long_modules(known: dict[str, Module]) -> dict[str, int]:
    return {
        name: m.lines
        for name, m in sorted(known.items(), key=lambda kv: -kv[1].lines)
        if m.lines > LONG_MODULE_LINES
    }


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# --------------------------------------------------------------------------- tests


def _pending(name: str) -> bool:
    return any(_within(name, package) for package in PENDING)


def test_no_import_circle() -> None:
    found = [c for c in circles(modules()) if not all(map(_pending, c))]
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_few_private_names_are_taken_across_modules() -> None:
    uses = [u for u in private_uses(modules()) if not _pending(u.module)]
    assert len(uses) <= MAX_PRIVATE_IMPORTS, (
        f"{len(uses)} private names of other modules used (at most {MAX_PRIVATE_IMPORTS}):\n"
        + "\n".join(map(str, uses))
    )


def test_each_private_import_says_why() -> None:
    """A private name taken from another module has a comment on its import's lines."""
    known = modules()
    silent = []
    for use in private_uses(known):
        if use.how != "import" or _pending(use.module):
            continue
        lines = known[use.module].path.read_text(encoding="utf-8").splitlines()
        node = next(
            n
            for n in ast.walk(known[use.module].tree)
            if isinstance(n, ast.ImportFrom) and n.lineno == use.line
        )
        end = node.end_lineno or node.lineno
        if not any("#" in line for line in lines[use.line - 1 : end]):
            silent.append(str(use))
    assert not silent, "private imports without a comment saying why:\n" + "\n".join(silent)


def test_few_long_modules() -> None:
    long = long_modules(modules())
    assert len(long) <= MAX_LONG_MODULES, (
        f"{len(long)} modules over {LONG_MODULE_LINES} lines (at most {MAX_LONG_MODULES}): "
        + ", ".join(f"{name} {lines}" for name, lines in long.items())
    )


def test_long_modules_are_named_in_the_design_notes() -> None:
    notes = (SRC.parent / "docs" / "design-notes.md").read_text(encoding="utf-8")
    for name, module in modules().items():
        if module.lines > LONG_MODULE_LINES:
            path = module.path.relative_to(SRC / PACKAGE).as_posix()
            assert f"`{path}`" in notes, f"{name} ({module.lines} lines) is not named"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The readers find a circle, a private import and a private attribute."""

    def parsed(name: str, text: str) -> Module:
        return Module(name, tmp_path / "x.py", ast.parse(text), text.count("\n"))

    known = {
        "kubemux": parsed("kubemux", ""),
        "kubemux._a": parsed("kubemux._a", "from ._b import _hidden\n"),
        "kubemux._b": parsed(
            "kubemux._b",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import _a\n"
            "def f():\n    return _a._secret\n",
        ),
        "kubemux._c": parsed("kubemux._c", "import kubemux._b as b\nb._x\n"),
    }
    assert circles(known) == [["kubemux._a", "kubemux._b"]]
    assert [(u.module, u.source, u.name, u.how) for u in private_uses(known)] == [
        ("kubemux._a", "kubemux._b", "_hidden", "import"),
        ("kubemux._b", "kubemux._a", "_secret", "attribute"),
        ("kubemux._c", "kubemux._b", "_x", "attribute"),
    ]


def main() -> None:
    known = modules()
    uses = private_uses(known)
    share = f"{PACKAGE}.share"
    inside = [u for u in uses if _within(u.module, share)]
    print(f"circles: {circles(known)}")
    print(f"private names used across modules: {len(uses)} ({len(inside)} inside share/)")
    for use in uses:
        print(f"  {use}")
    print(f"modules over {LONG_MODULE_LINES} lines: {long_modules(known)}")


if __name__ == "__main__":
    sys.exit(main())
