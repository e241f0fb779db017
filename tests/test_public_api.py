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


def _asynctrace_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("asynctrace")}


@pytest.mark.parametrize("path", sorted((PACKAGE / "capture").glob("*.py")), ids=lambda p: p.name)
def test_capture_is_a_leaf(path: Path) -> None:
    # anything else of ours would run analysis or rendering code inside the training process
    allowed = (
        "asynctrace.capture",
        "asynctrace.records",
        "asynctrace.errors",
        "asynctrace._frames",
        "asynctrace._known_syncs",
        "asynctrace.traces.load",
    )
    bad = sorted(m for m in _asynctrace_imports(path) if not m.startswith(allowed))
    assert bad == []


def _views() -> list[Path]:
    return sorted(
        p for d in ("render", "export") for p in (PACKAGE / d).rglob("*.py") if p.read_text()
    )


@pytest.mark.parametrize("path", _views(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_views_call_no_analysis_function(path: Path) -> None:
    # renderers and exporters take the report and the analysis detail made once: from the
    # analysis layer they import types and constants (CamelCase, UPPER_CASE), never a function;
    # asynctrace.analysis.units formats durations (the one formatter), it computes no figure
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        if module == "asynctrace.analysis.units":
            continue
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
