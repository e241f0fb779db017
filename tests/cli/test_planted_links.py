"""Outputs are never written through a link planted at a predictable temporary name: the
temporary is unpredictable and created exclusively (``_output.atomic_file``)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from asynctrace.cli import main
from asynctrace.render.output import write_atomically

from .test_user_errors import TINY


@pytest.mark.parametrize(
    ("command", "name"),
    [("report", "out.html"), ("annotate", "out.json.gz"), ("plot", "out.png")],
)
def test_a_link_planted_at_the_old_tmp_name_is_not_written_through(
    tmp_path: Path, command: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if command != "annotate":
        pytest.importorskip("matplotlib")
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(TINY))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / name
    (tmp_path / f"{name}.tmp").symlink_to(victim)
    opt = "--html" if command == "report" else "-o"
    assert main([command, str(trace), opt, str(out)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    assert out.is_file()
    assert not out.is_symlink()
    assert out.stat().st_size > 0
    # nothing else left in the folder: no temporary of ours
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["t.json", "victim.txt", name, f"{name}.tmp"]
    )


def test_the_file_gets_a_new_files_mode_and_replaces_a_link_at_its_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out.bin"
    out.symlink_to(victim)
    old = os.umask(0o027)
    try:
        write_atomically(out, b"data")
    finally:
        os.umask(old)
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink()
    assert out.read_bytes() == b"data"
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_failed_write_leaves_no_temporary(tmp_path: Path) -> None:
    class Boom(Exception):
        pass

    from asynctrace.render.output import atomic_file

    def write_half() -> None:
        with atomic_file(tmp_path / "x.html") as (f, _):
            f.write(b"half")
            raise Boom

    with pytest.raises(Boom):
        write_half()
    assert list(tmp_path.iterdir()) == []
