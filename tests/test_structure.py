"""The shape of ``src/kubemux``, read from its source (issues 19 and 30): the layers are
folders and imports only go down them, no import circle, few reaches into another module's
private attributes, few long modules.

Nothing is imported: each module is parsed with :mod:`ast`. Every import counts, also one
under ``if TYPE_CHECKING:`` and one inside a function (a circle closed by either still
leaves a reader without a top). ``python tests/test_structure.py`` prints what is found.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "kubemux"

MAX_PRIVATE_REACHES = 5  # each one says why in a comment on its line (or the line above)
MAX_LONG_MODULES = 2  # each one named, with its reason, in docs/design-notes.md
LONG_MODULE_LINES = 500
MAX_REGISTRY_LINES = 450  # the registry's public API, kept small (issue 30)

# The layers, lowest first: a module may import from its own layer and the ones below it,
# never from one above (as kopf's import-linter "layers" contracts). A layer is a folder (a
# package and everything under it) or a group of top-level modules. ``_authz`` may not exist
# yet (issue 33). The public packages come last, in the order they use each other (the
# dashboard shows the metrics; the command line runs the proxy, the dashboard and the fake
# clusters of ``kubemux demo``); ``kubemux/__init__`` is the top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_errors", "_resources", "_settings", "_redact", "_runtime"),
    ("_wire",),
    ("_kubeconfig",),
    ("_auth",),
    ("_http",),
    ("_cache",),
    ("_informer",),
    ("_authz",),
    ("_registry",),
    ("share",),
    ("metrics",),
    ("proxy",),
    ("testing",),
    ("dashboard",),
    ("cli",),
)
# Inside these packages their folders are layers too, lowest first (top-level modules of the
# package, such as ``testing/_hostile.py`` and its ``__init__``, sit above its folders).
INNER_LAYERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "proxy": (
        ("_api",),
        ("_query",),
        ("_watch",),
        ("_reads",),
        ("_upstream",),
        ("_users",),
        ("_serve",),
    ),
    "testing": (
        ("_wire",),
        ("_printers",),
        ("_access",),
        ("_state",),
        ("_kubelet",),
        ("_apiserver",),
        ("_cluster",),
        ("_connector",),
    ),
}

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


# --------------------------------------------------------------------------- layers


def layer_of(name: str) -> tuple[int, int]:
    """(layer, layer inside its package) of a module; the package itself is the top."""
    parts = name.split(".")[1:]
    if not parts:
        return (len(LAYERS), 0)
    outer = next((i for i, group in enumerate(LAYERS) if parts[0] in group), None)
    if outer is None:
        raise AssertionError(f"{name} is in no layer: add its folder to LAYERS")
    inner_layers = INNER_LAYERS.get(parts[0])
    if inner_layers is None or len(parts) < 2:
        return (outer, len(inner_layers or ()))
    inner = next((i for i, group in enumerate(inner_layers) if parts[1] in group), None)
    return (outer, len(inner_layers) if inner is None else inner)


def facade_names(known: dict[str, Module]) -> dict[str, str]:
    """Name -> the module it comes from, of every name ``kubemux/__init__`` imports."""
    init = known[PACKAGE]
    names: dict[str, str] = {}
    for node, target in _imports(init):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                names[alias.asname or alias.name] = sub if sub in known else target
    return names


def layered_imports(
    module: Module, known: dict[str, Module], facade: dict[str, str]
) -> Iterator[tuple[str, int]]:
    """:func:`imports_of`, but a name taken from the package itself (``from kubemux import
    Store``: the public facade, a table of names: ``facade``) counts as an import of the
    module it comes from."""
    for node, target in _imports(module):
        if isinstance(node, ast.ImportFrom) and target == PACKAGE and module.name != PACKAGE:
            for alias in node.names:
                yield facade.get(alias.name, PACKAGE), node.lineno
        elif isinstance(node, ast.Import):
            if target in known:
                yield target, node.lineno
        elif target in known:
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def upward_imports(known: dict[str, Module]) -> list[str]:
    """Every import that runs from a layer to one above it."""
    found = []
    facade = facade_names(known)
    for name, module in known.items():
        here = layer_of(name)
        for target, line in layered_imports(module, known, facade):
            there = layer_of(target)
            if there[0] > here[0] or (there[0] == here[0] and there[1] > here[1]):
                found.append(f"{name}:{line} imports {target}")
    return sorted(set(found))


# --------------------------------------------------------------------------- private reaches

NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})


@dataclass(frozen=True)
class Reach:
    module: str  # where the attribute is used
    line: int
    expr: str  # as written: ``store._entries``
    owners: tuple[str, ...]  # the modules that define it; () for a foreign one (a library's)

    def __str__(self) -> str:
        where = ", ".join(self.owners) or "a library"
        return f"{self.module}:{self.line}: {self.expr} (of {where})"


def _private(name: str) -> bool:
    return _is_private(name)


def owned_privates(module: Module) -> set[str]:
    """The private attribute names a module defines: in its class bodies (methods,
    assignments, annotations, ``__slots__``) and as ``self._x = ...``."""
    found: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    found.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    for target in item.targets:
                        if isinstance(target, ast.Name):
                            found.add(target.id)
                            if target.id == "__slots__":
                                found.update(
                                    c.value
                                    for c in ast.walk(item.value)
                                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                                )
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            found.add(node.attr)
    return {name for name in found if _private(name)}


def _classes(known: dict[str, Module]) -> dict[str, set[str]]:
    """Class name -> the modules of the package that define a class of that name."""
    out: dict[str, set[str]] = {}
    for name, module in known.items():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, set()).add(name)
    return out


FOREIGN = "a library"  # the owner of what a module of no package of ours defines


def _imported_names(module: Module, known: dict[str, Module]) -> dict[str, str]:
    """Local name -> the module of the package it was imported from, or :data:`FOREIGN`."""
    names: dict[str, str] = {}
    for node, target in _imports(module):
        if isinstance(node, ast.ImportFrom):
            ours = target in known or target.startswith(PACKAGE + ".") or target == PACKAGE
            for alias in node.names:
                names[alias.asname or alias.name] = target if ours else FOREIGN
        else:
            for alias in node.names:
                if not alias.name.startswith(PACKAGE):
                    names[alias.asname or alias.name.partition(".")[0]] = FOREIGN
    return names


class _Types:
    """What little a module says of the types of the names it uses: parameter and variable
    annotations, ``self.x`` annotated or assigned an annotated parameter (per class)."""

    def __init__(self, module: Module, known: dict[str, Module], classes: dict[str, set[str]]):
        self.module = module
        self.classes = classes
        self.imported = _imported_names(module, known)
        self.attrs: dict[tuple[str, str], ast.expr] = {}  # (class, attribute) -> annotation
        for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    self.attrs[(cls.name, item.target.id)] = item.annotation
            for fn in (n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)):
                params = _annotations(fn)
                for node in ast.walk(fn):
                    target, value, annotation = _assignment(node)
                    if not _is_self_attr(target):
                        continue
                    assert isinstance(target, ast.Attribute)
                    if annotation is None and isinstance(value, ast.Name):
                        annotation = params.get(value.id)
                    if annotation is not None:
                        self.attrs.setdefault((cls.name, target.attr), annotation)

    def owner_of(self, expr: ast.expr, scope: dict[str, ast.expr], cls: str | None) -> str | None:
        """The module defining the class ``expr`` is an instance of (:data:`FOREIGN`: a
        library's), when it can be told."""
        annotation: ast.expr | None = None
        if isinstance(expr, ast.Name):
            annotation = scope.get(expr.id)
        elif _is_self_attr(expr) and cls is not None:
            assert isinstance(expr, ast.Attribute)
            annotation = self.attrs.get((cls, expr.attr))
        return None if annotation is None else self.owner_of_type(annotation)

    def owner_of_type(self, annotation: ast.expr) -> str | None:
        """The module defining a class a type expression names (the first one found)."""
        if isinstance(annotation, ast.Attribute):  # module.Class
            root = annotation
            while isinstance(root, ast.Attribute):
                root = root.value  # type: ignore[assignment]
            if isinstance(root, ast.Name) and self.imported.get(root.id) == FOREIGN:
                return FOREIGN
        for node in ast.walk(annotation):
            if not isinstance(node, ast.Name):
                continue
            source = self.imported.get(node.id)
            modules = self.classes.get(node.id, set())
            if source == FOREIGN:
                if node.id[:1].isupper():
                    return FOREIGN
            elif source is not None:
                if source in modules:
                    return source
                if len(modules) == 1:
                    return next(iter(modules))
            elif self.module.name in modules:
                return self.module.name
        return None

    def bases_owner(self, cls: ast.ClassDef) -> str | None:
        """The module of the first base of ``cls`` that is another module's class of ours
        (:data:`FOREIGN` if its bases are all a library's)."""
        owners = [self.owner_of_type(base) for base in cls.bases]
        ours = [o for o in owners if o not in (None, FOREIGN, self.module.name)]
        if ours:
            return ours[0]
        return FOREIGN if FOREIGN in owners else None


def _annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    args = fn.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    found = {a.arg: a.annotation for a in every if a.annotation is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node.annotation
        elif (  # x = Class(...): the class is its type
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and node.targets[0].id not in found
        ):
            found[node.targets[0].id] = node.value.func
    return found


def _assignment(node: ast.AST) -> tuple[ast.expr | None, ast.expr | None, ast.expr | None]:
    if isinstance(node, ast.AnnAssign):
        return node.target, node.value, node.annotation
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return node.targets[0], node.value, None
    return None, None, None


def _is_self_attr(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("self", "cls")
    )


def private_reaches(known: dict[str, Module]) -> list[Reach]:
    """Every ``x._name`` where ``_name`` belongs to another module: ``x``'s type (as far as
    annotations and ``x = Class(...)`` tell) is a class of another module, or ``_name`` is
    defined in no class of this module (also ``self._name`` inherited from another module's
    class, as a mixin's); owners () when it is a library's (a base class of a library's, or
    a name no module of the package defines)."""
    owned = {name: owned_privates(module) for name, module in known.items()}
    owners: dict[str, list[str]] = {}
    for name, privates in owned.items():
        for attr in privates:
            owners.setdefault(attr, []).append(name)
    classes = _classes(known)
    found: list[Reach] = []
    for name, module in known.items():
        finder = _ReachFinder(name, _Types(module, known, classes), owned[name], owners)
        finder.visit(module.tree, {}, None)
        found.extend(finder.found)
    return sorted(found, key=lambda r: (r.module, r.line, r.expr))


class _ReachFinder:
    def __init__(
        self, name: str, types: _Types, mine: set[str], owners: dict[str, list[str]]
    ) -> None:
        self.name = name
        self.types = types
        self.mine = mine
        self.owners = owners
        self.found: list[Reach] = []

    def visit(self, node: ast.AST, scope: dict[str, ast.expr], cls: ast.ClassDef | None) -> None:
        if isinstance(node, ast.ClassDef):
            cls = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scope = {**scope, **_annotations(node)}
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and not (isinstance(node.ctx, ast.Store) and _is_self_attr(node))
        ):
            reach = self.judge(node, scope, cls)
            if reach is not None:
                self.found.append(reach)
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope, cls)

    def judge(
        self, node: ast.Attribute, scope: dict[str, ast.expr], cls: ast.ClassDef | None
    ) -> Reach | None:
        name, attr, value = self.name, node.attr, node.value
        expr = f"{ast.unparse(value)}.{attr}"
        is_self = isinstance(value, ast.Name) and value.id in ("self", "cls")
        is_super = isinstance(value, ast.Call) and ast.unparse(value.func) == "super"
        if is_self or is_super:  # inherited: from the class's bases
            if attr in self.mine:
                return None
            base = self.types.bases_owner(cls) if cls is not None else None
            if base == FOREIGN or base is None:
                return Reach(name, node.lineno, expr, ())
            return Reach(name, node.lineno, expr, (base,))
        owner = self.types.owner_of(value, scope, cls.name if cls is not None else None)
        if owner == FOREIGN:
            return None if attr in NAMEDTUPLE_API else Reach(name, node.lineno, expr, ())
        if owner is not None:
            return None if owner == name else Reach(name, node.lineno, expr, (owner,))
        if attr in self.mine or attr in NAMEDTUPLE_API:  # this module's, or a named tuple's
            return None
        elsewhere = tuple(m for m in self.owners.get(attr, ()) if m != name)
        return Reach(name, node.lineno, expr, elsewhere)


def says_why(module: Module, line: int) -> bool:
    """A comment on ``line`` of ``module``, or on a comment line right above it."""
    lines = module.path.read_text(encoding="utf-8").splitlines()
    if "#" in lines[line - 1]:
        return True
    return line >= 2 and lines[line - 2].strip().startswith("#")


def long_modules(known: dict[str, Module]) -> dict[str, int]:
    return {
        name: m.lines
        for name, m in sorted(known.items(), key=lambda kv: -kv[1].lines)
        if m.lines > LONG_MODULE_LINES
    }


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# --------------------------------------------------------------------------- tests


@functools.cache
def _known() -> dict[str, Module]:
    """The package's modules, parsed once for every test here."""
    return modules()


@functools.cache
def _reaches() -> list[Reach]:
    return private_reaches(_known())


def _pending(name: str) -> bool:
    return any(_within(name, package) for package in PENDING)


def test_no_import_circle() -> None:
    found = [c for c in circles(_known()) if not all(map(_pending, c))]
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_only_go_down_the_layers() -> None:
    found = upward_imports(_known())
    assert not found, "imports that run up the layers:\n" + "\n".join(found)


def test_no_private_name_is_imported_from_another_module() -> None:
    uses = [u for u in private_uses(_known()) if not _pending(u.module)]
    assert not uses, "private names imported from other modules:\n" + "\n".join(map(str, uses))


def test_few_reaches_into_another_modules_private_attributes() -> None:
    reaches = [r for r in _reaches() if r.owners and not _pending(r.module)]
    assert len(reaches) <= MAX_PRIVATE_REACHES, (
        f"{len(reaches)} reaches into other modules' private attributes "
        f"(at most {MAX_PRIVATE_REACHES}; make what is needed public in its module):\n"
        + "\n".join(map(str, reaches))
    )


def test_each_reach_into_a_private_attribute_says_why() -> None:
    """Ours and a library's (a protocol subclassed from uvicorn, asyncio's drain): each has
    its reason in a comment on its line or the line above."""
    known = _known()
    silent = [str(r) for r in _reaches() if not says_why(known[r.module], r.line)]
    assert not silent, "private attributes reached without a comment saying why:\n" + "\n".join(
        silent
    )


def test_few_long_modules() -> None:
    long = long_modules(_known())
    assert len(long) <= MAX_LONG_MODULES, (
        f"{len(long)} modules over {LONG_MODULE_LINES} lines (at most {MAX_LONG_MODULES}): "
        + ", ".join(f"{name} {lines}" for name, lines in long.items())
    )


def test_long_modules_are_named_in_the_design_notes() -> None:
    notes = (SRC.parent / "docs" / "design-notes.md").read_text(encoding="utf-8")
    for name, module in _known().items():
        if module.lines > LONG_MODULE_LINES:
            path = module.path.relative_to(SRC / PACKAGE).as_posix()
            assert f"`{path}`" in notes, f"{name} ({module.lines} lines) is not named"


def test_the_architecture_page_names_every_folder_and_stays_short() -> None:
    """docs/architecture.md names every subpackage of ``src/kubemux`` (a new folder is a new
    layer: say what it owns) and is at most 250 lines."""
    page = SRC.parent / "docs" / "architecture.md"
    text = page.read_text(encoding="utf-8")
    assert text.count("\n") <= 250
    packages = {
        module.path.parent.relative_to(SRC / PACKAGE).as_posix()
        for module in _known().values()
        if module.is_package and module.name != PACKAGE
    }
    missing = sorted(p for p in packages if f"{p.rpartition('/')[2]}/" not in text)
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_the_registry_module_stays_small() -> None:
    registry = _known()[f"{PACKAGE}._registry.registry"]
    assert registry.lines <= MAX_REGISTRY_LINES, f"_registry/registry.py: {registry.lines} lines"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The readers find a circle, a private import, an import up the layers (also one
    through the package's facade), and reaches into private attributes: a module's private
    taken by name, through a parameter's or an attribute's annotated type, an inherited
    one (a mixin's), a library's; and they leave a module's own privates alone."""

    def parsed(name: str, text: str) -> Module:
        path = tmp_path / ("__init__.py" if name == PACKAGE else "x.py")
        return Module(name, path, ast.parse(text), text.count("\n"))

    known = {
        "kubemux": parsed("kubemux", "from ._http.client import Client as Client\n"),
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

    layered = {
        "kubemux": known["kubemux"],
        "kubemux._http.client": parsed(
            "kubemux._http.client",
            "class Client:\n    __slots__ = ('_api', '_auth')\n"
            "    def _call(self):\n        return self._api\n",
        ),
        "kubemux._http.upstream": parsed(
            "kubemux._http.upstream",
            "from .client import Client\nimport aiohttp\n"
            "class Upstream:\n    def __init__(self, client: Client):\n"
            "        self._client = client\n"
            "    @property\n    def _api(self):\n        return self._client._api\n"
            "    def send(self, other: Client):\n        return other._auth, self._api\n"
            "    def read(self, r: aiohttp.ClientResponse):\n        return r._body\n",
        ),
        "kubemux._cache.store": parsed(
            "kubemux._cache.store",
            "from .._http.upstream import Upstream\n"
            "class Base:\n    def _hook(self): ...\n    def _entries(self): ...\n",
        ),
        "kubemux._cache.table": parsed(
            "kubemux._cache.table",
            "from .store import Base\nclass Table(Base):\n"
            "    def _hook(self): return self._entries()\n"
            "def rows(store):\n    return store._entries()\n",
        ),
        "kubemux.dashboard.app": parsed("kubemux.dashboard.app", "from kubemux import Client\n"),
        "kubemux._wire.codec": parsed("kubemux._wire.codec", "from kubemux import Client\n"),
    }
    assert upward_imports(layered) == [
        "kubemux._wire.codec:1 imports kubemux._http.client",
    ]
    assert [(r.module, r.expr, r.owners) for r in private_reaches(layered)] == [
        ("kubemux._cache.table", "self._entries", ("kubemux._cache.store",)),
        ("kubemux._cache.table", "store._entries", ("kubemux._cache.store",)),
        ("kubemux._http.upstream", "self._client._api", ("kubemux._http.client",)),
        ("kubemux._http.upstream", "other._auth", ("kubemux._http.client",)),
        ("kubemux._http.upstream", "r._body", ()),
    ]


def main() -> None:
    known = modules()
    reaches = private_reaches(known)
    ours = [r for r in reaches if r.owners]
    print(f"circles: {circles(known)}")
    print(f"imports up the layers: {upward_imports(known)}")
    print(f"private names imported across modules: {len(private_uses(known))}")
    print(f"reaches into other modules' private attributes: {len(ours)}")
    for reach in ours:
        print(f"  {reach}")
    print(f"into a library's: {len(reaches) - len(ours)}")
    for reach in reaches:
        if not reach.owners:
            print(f"  {reach}")
    print(f"modules over {LONG_MODULE_LINES} lines: {long_modules(known)}")


if __name__ == "__main__":
    sys.exit(main())
