"""``report --html`` says where it wrote the page (#27.16), as ``plot`` does: on stderr, so
that stdout stays the report alone (``--json`` into a file is still one JSON object)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asynctrace.cli import main

from .test_user_errors import TINY

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_html_says_where_it_wrote_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(TINY))
    out = tmp_path / "page.html"
    assert main(["report", str(trace), "--html", str(out), *extra]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"asynctrace report: wrote {out}\n"
    assert out.is_file()
    if extra:
        assert json.loads(captured.out)["source"]["path"] == str(trace)
