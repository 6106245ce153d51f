"""The layout rules (one obvious place for each concern, modules small enough to read), checked on
the sources: no import circle inside the core or inside any plugin package (counting every import,
deferred ones too), no Python file of the repository over 600 lines without the reason written in
its docstring, and test modules that import only the shared helpers, from folders that shadow
nothing they import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support_common import REPOSITORY as ROOT
LIMIT = 600


def _packages() -> dict[str, Path]:
    """Importable package name -> its folder: the core and every first-party plugin package."""
    found = {"silvanforge": ROOT / "core"}
    for init in [*ROOT.glob("plugins/*/silvanforge_*/__init__.py"),
                 *ROOT.glob("plugins/importers/*/silvanforge_*/__init__.py"),
                 *ROOT.glob("plugins/importers/silvanforge_*/__init__.py"),
                 *ROOT.glob("examples/*/silvanforge_*/__init__.py")]:
        if "build" not in init.parts:
            found[init.parent.name] = init.parent
    return found


def _modules(name: str, folder: Path) -> dict[str, Path]:
    out = {}
    for path in folder.rglob("*.py"):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([name, *parts])] = path
    return out


def _imports(tree: ast.Module):
    """Every import statement of a module, wherever it stands: at the top, in ``if``/``try``
    blocks, and deferred into functions.  A deferred import still ties the two modules together
    (each needs the other to run), so it counts as an edge like any other."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _edges(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            # a submodule import runs its packages' __init__ first
            parts = target.split(".")
            out |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)} & known
    out.discard(module)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", sorted(_packages()))
def test_no_import_circle(package):
    modules = _modules(package, _packages()[package])
    # a package's __init__ importing its own submodules is how a package is built, not a circle
    graph = {m: {t for t in _edges(m, p, set(modules)) if not m.startswith(t + ".")}
             for m, p in modules.items()}
    assert _cycles(graph) == []


def test_the_circle_finder_finds_circles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _repository_sources():
    """Every Python file of the repository: the packages, tests, benchmarks, examples, scripts
    (not virtual environments, build output or other hidden folders)."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts[:-1]
        if not any(p.startswith(".") or p in ("build", "dist", "__pycache__") or p.endswith(".egg-info")
                   for p in parts):
            yield path


def test_long_modules_say_why_at_their_top():
    """A module over 600 lines says in its docstring why it is one module (the phrase "over 600
    lines" and the reason), so a reader knows the length is chosen, not grown."""
    long = []
    for path in _repository_sources():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n"))
        if lines > LIMIT and "over 600 lines" not in (ast.get_docstring(ast.parse(text)) or "").lower():
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == []


def test_the_long_module_check_reads_the_whole_repository():
    found = {str(p.relative_to(ROOT)) for p in _repository_sources()}
    assert {"core/lowering/walkgen.py", "tests/repository/test_layering.py",
            "plugins/rep_bitvector/silvanforge_rep_bitvector/plan.py"} <= found
    assert not any(part.startswith(".") for f in found for part in Path(f).parts)


# ----------------------------------------------------------------------------- the tests' folders
def _test_modules() -> list[Path]:
    return sorted(p for p in _repository_sources() if p.name.startswith("test_") and "tests" in p.parts)


def test_test_modules_share_helpers_not_each_other():
    """Tests share code through the helper modules beside tests/conftest.py (strategies.py,
    support_*.py), never by importing another test module: pytest puts a test module's folder on
    sys.path only once it has collected a module there, so such an import works or fails by
    the order the folders are collected in."""
    names = {p.stem for p in _test_modules()}
    found = []
    for path in _test_modules():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{path.relative_to(ROOT)}: imports {t}" for t in targets if t.partition(".")[0] in names]
    assert found == []


def test_no_test_folder_shadows_a_module_the_tests_import():
    """pytest puts each test module's folder on sys.path (and tests/conftest.py puts tests/
    there), so a folder beside a test module imports as a namespace package wherever nothing
    else of that name is installed: one named like a library the tests import (``catboost``,
    ``sklearn``) would stand in for it, and ``importorskip`` would not skip.  The importers'
    folders (tests/plugins/importers/<format>) hold their test modules one level down for that."""
    imported = set()
    for path in _repository_sources():
        if "tests" not in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for node in _imports(ast.parse(text)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            imported |= {m.partition(".")[0] for m in modules if m and not getattr(node, "level", 0)}
        imported |= {m.partition(".")[0] for m in re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", text)}
    on_path = {ROOT / "tests"} | {p.parent for p in _test_modules()}
    clashes = sorted(str(sub.relative_to(ROOT)) for folder in on_path for sub in folder.iterdir()
                     if sub.is_dir() and sub.name in imported)
    assert {"xgboost", "catboost", "sklearn"} <= imported
    assert clashes == []
