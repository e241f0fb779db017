"""The public surface and the one-way data flow, pinned.

``asynctrace.__all__``, the lazy import table and the type-checking imports of
``asynctrace/__init__.py`` are three lists of the same names: they must agree, and every name
must resolve. The capture layer is a leaf: the code that runs inside a training loop imports no
analysis, no renderer and no exporter (the sinks that use them are plugged in from outside).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import asynctrace

PACKAGE = Path(asynctrace.__file__).parent


def _init_tree() -> ast.Module:
    return ast.parse((PACKAGE / "__init__.py").read_text())


def _type_checking_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                names.update(a.asname or a.name for a in imp.names)
    return names


def _eager_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("asynctrace")
        ):
            names.update(a.asname or a.name for a in node.names)
    return names


def test_all_is_the_lazy_table_plus_the_eager_names() -> None:
    tree = _init_tree()
    lazy = set(asynctrace._LAZY)
    eager = _eager_names(tree)
    assert set(asynctrace.__all__) == lazy | eager | {"__version__"}
    assert _type_checking_names(tree) == lazy


@pytest.mark.parametrize("name", sorted(asynctrace._LAZY))
def test_every_lazy_name_resolves_from_its_module(name: str) -> None:
    module = importlib.import_module(asynctrace._LAZY[name])
    assert getattr(asynctrace, name) is getattr(module, name)
    assert name in getattr(module, "__all__", ())


def test_every_module_declares_all() -> None:
    missing = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__main__.py" and p.read_text().strip() and "__all__" not in p.read_text()
    ]
    assert missing == []


def _is_module(name: str) -> bool:
    where = PACKAGE.parent.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _imported_modules(path: Path) -> set[str]:
    """Every module of ours that ``path`` imports: ``from asynctrace.x import _y`` names the
    module ``asynctrace.x._y`` where ``_y`` is one, else ``asynctrace.x``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            for a in node.names:
                if _is_module(f"{node.module}.{a.name}"):
                    found.add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "asynctrace" or m.startswith("asynctrace.")}


def _asynctrace_imports(path: Path) -> set[str]:
    return _imported_modules(path)


def _module_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "static" not in p.parts)


def _part(module: str) -> str:
    """The part a module belongs to: its subpackage, or the top-level module itself."""
    return module.split(".")[1] if "." in module else module


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@pytest.mark.parametrize("path", _module_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_another_parts_private_module(path: Path) -> None:
    # a part shares what others need through a public module (or its own __init__); its
    # ``_modules`` are its own. The top-level private leaves (``_frames``, ``_extras``) are
    # shared leaves, and ``_commands`` is the command line's own part, which only cli.py runs
    importer = _module_name(path)
    bad = []
    for module in _imported_modules(path):
        inside = module.split(".")[2:]  # the names below the part
        if any(name.startswith("_") for name in inside) and _part(module) != _part(importer):
            bad.append(module)
    assert sorted(bad) == []


def test_only_the_command_line_runs_the_commands() -> None:
    importers = sorted(
        _module_name(p)
        for p in _module_files()
        if _part(_module_name(p)) != "_commands"
        and any(_part(m) == "_commands" for m in _imported_modules(p))
    )
    assert importers == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "capture").glob("*.py")), ids=lambda p: p.name)
def test_capture_is_a_leaf(path: Path) -> None:
    # anything else of ours would run analysis or rendering code inside the training process
    allowed = (
        "asynctrace.capture",
        "asynctrace.records",
        "asynctrace.errors",
        "asynctrace._frames",
    )
    bad = sorted(
        m
        for m in _asynctrace_imports(path)
        if not (m + ".").startswith(tuple(a + "." for a in allowed))
    )
    assert bad == []


def test_the_records_are_a_leaf() -> None:
    # what capture writes and every reader reads: nothing of ours but the errors
    bad = sorted(
        m
        for p in (PACKAGE / "records").glob("*.py")
        for m in _asynctrace_imports(p)
        if not (m.startswith("asynctrace.records") or m == "asynctrace.errors")
    )
    assert bad == []


@pytest.mark.parametrize(
    "path",
    sorted(p for d in ("render", "export") for p in (PACKAGE / d).rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_views_never_import_capture(path: Path) -> None:
    # a view runs after the session, on its files: the capture side (and torch) stay out
    bad = sorted(m for m in _asynctrace_imports(path) if _part(m) == "capture")
    assert bad == []


def test_few_modules_at_the_top() -> None:
    # the public face (``__init__``, ``__main__``, ``cli``, ``errors``, ``tracing``) and the
    # shared leaves (``_frames``, ``_extras``); everything else lives in a part
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 7, top


#: the size a person can hold in their head at once (the module map, docs/contributing.md)
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 500


def test_units_a_person_can_hold() -> None:
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            limit = (
                MAX_FUNCTION_LINES
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                else MAX_CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else None
            )
            if limit is None:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                too_long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} {lines}")
    assert too_long == []


def _views() -> list[Path]:
    return sorted(
        p for d in ("render", "export") for p in (PACKAGE / d).rglob("*.py") if p.read_text()
    )


@pytest.mark.parametrize("path", _views(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_views_call_no_analysis_function(path: Path) -> None:
    # renderers and exporters take the report and the analysis detail made once: from the
    # analysis layer they import types and constants (CamelCase, UPPER_CASE), never a function
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        if isinstance(node, ast.ImportFrom) and module.startswith("asynctrace.analysis"):
            bad += [
                f"{node.module}.{a.name}"
                for a in node.names
                if not (a.name[:1].isupper() or a.name.isupper())
            ]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("asynctrace.analysis")]
    assert bad == []


def test_commands_ask_the_loader_what_a_file_is() -> None:
    # one loader (asynctrace.files.sources): no command or view decides a file's kind by its name
    offenders = sorted(
        str(p.relative_to(PACKAGE))
        for d in ("_commands", "render", "export")
        for p in (PACKAGE / d).rglob("*.py")
        if "is_records_name" in p.read_text() or "read_records" in p.read_text()
    )
    assert offenders == []


def test_every_user_error_is_ours() -> None:
    # a wrong option raises a documented AsyncTraceError, still a ValueError/TypeError as before
    from asynctrace.errors import AsyncTraceError, OptionError

    assert issubclass(OptionError, AsyncTraceError)
    assert issubclass(OptionError, ValueError)
    assert issubclass(OptionError, TypeError)
    with pytest.raises(OptionError):
        asynctrace.trace(detect_syncs="sometimes")
    with pytest.raises(OptionError):
        asynctrace.range("")
    with pytest.raises(OptionError):
        asynctrace.expect_syncs(max=-1)
    with pytest.raises(OptionError):
        asynctrace.trace(nsys_capture="10:20")
