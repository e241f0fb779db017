"""Every note the library makes has a stable kebab-case code, and docs/how-it-works.md lists
each code it makes (and no other)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import asynctrace

PACKAGE = Path(asynctrace.__file__).parent
DOCS = PACKAGE.parent / "docs" / "how-it-works.md"
KEBAB = re.compile(r"[a-z]+(-[a-z]+)*")


def _codes_made() -> dict[str, list[str]]:
    """Each ``Note(code=...)`` of the package's source: code -> where."""
    made: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Note"
            ):
                continue
            code = next((k.value for k in node.keywords if k.arg == "code"), None)
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            # a literal: a code is never built from a value (nor read from prose)
            assert isinstance(code, ast.Constant), where
            assert isinstance(code.value, str), where
            made.setdefault(code.value, []).append(where)
    return made


def _codes_documented() -> list[str]:
    text = DOCS.read_text()
    section = text[text.index("### Notes") :]
    section = section[: section.index("\n#", 1)] if "\n#" in section[1:] else section
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_every_code_is_kebab_case() -> None:
    made = _codes_made()
    assert len(made) >= 15
    assert [c for c in made if not KEBAB.fullmatch(c)] == []


def test_the_docs_list_every_code_made_and_no_other() -> None:
    documented = _codes_documented()
    assert len(documented) == len(set(documented))
    assert sorted(documented) == sorted(_codes_made())
