"""One escape for a file name that is not UTF-8 (``render.output.fs_name``): the report's
source name, the TensorBoard plugin's note and export's message show the same ``\\xNN``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from asynctrace.cli import main
from asynctrace.render.output import fs_name, is_utf8
from asynctrace.tb_plugin._data import PluginData

_ODD = b"rank1-\xff.pt.trace.json.gz"


def test_a_name_utf8_holds_is_unchanged() -> None:
    for name in ("rank0.json.gz", "é ü 日本 🙂", ""):
        assert is_utf8(name)
        assert fs_name(name) == name


def test_the_odd_bytes_of_a_name_are_shown_as_hex() -> None:
    odd = os.fsdecode(_ODD)
    assert not is_utf8(odd)
    assert fs_name(odd) == "rank1-\\xff.pt.trace.json.gz"


def test_a_lone_surrogate_is_escaped_not_raised() -> None:
    # no name's bytes decode to it, but a message may be built from any text
    assert not is_utf8("a\ud800b")
    assert fs_name("a\ud800b") == "a\\ud800b"


def test_the_plugin_and_export_name_an_odd_file_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow")
    odd = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), _ODD)))
    odd.write_bytes(b"{}")
    shown = fs_name(odd.name)
    notes = PluginData(tmp_path).runs().notes
    assert f"not listed: {shown}: the name is not UTF-8" in notes
    assert main(["export", str(tmp_path), "--parquet", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{fs_name(str(odd))}: the name is not UTF-8" in err
    assert str(tmp_path / shown) == fs_name(str(odd))
