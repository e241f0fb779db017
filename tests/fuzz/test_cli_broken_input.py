"""``asynctrace report`` on broken input: exit status 2, one line on stderr, no traceback; peak
memory bounded on a gzip bomb; names from a trace printed literally (no rich markup, no emoji).

Every case runs the real command in a child process (``python -m asynctrace report``), so what
is checked is what a user sees.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import KINETO_DIR
from tests.fuzz._mutators import CORPUS, Op, mutate_kineto

_SEED = CORPUS / "kineto" / "seed_hta_a100_event_sync.json"


def _report(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asynctrace", "report", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "160"},
    )


def _assert_one_line_error(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("asynctrace report: error: ")
    assert r.stdout == ""


def _seed_text() -> bytes:
    return _SEED.read_bytes()


def _sqlite(path: Path, *statements: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        for s in statements:
            conn.execute(s)
        conn.commit()


# name -> writes the broken file into the folder and returns its path
_BROKEN: dict[str, Callable[[Path], Path]] = {}


def _case(name: str) -> Callable[[Callable[[Path], Path]], Callable[[Path], Path]]:
    def deco(fn: Callable[[Path], Path]) -> Callable[[Path], Path]:
        _BROKEN[name] = fn
        return fn

    return deco


def _write(d: Path, name: str, data: bytes) -> Path:
    p = d / name
    p.write_bytes(data)
    return p


_case("empty")(lambda d: _write(d, "empty.json", b""))
_case("whitespace")(lambda d: _write(d, "ws.json", b" \n\t " * 100))
_case("binary_junk")(lambda d: _write(d, "junk.json", bytes(range(256)) * 4))
_case("not_json_text")(lambda d: _write(d, "text.json", b"hello, world\n"))
_case("json_number")(lambda d: _write(d, "num.json", b"42"))
_case("list_of_numbers")(lambda d: _write(d, "nums.json", b"[1, 2, 3]"))
_case("object_without_events")(lambda d: _write(d, "obj.json", b'{"a": 1}'))
_case("execution_trace_like")(
    lambda d: _write(d, "et.json", b'{"schema": "1.0.1", "nodes": [{"id": 1}]}')
)
_case("truncated_json")(lambda d: _write(d, "trunc.json", _seed_text()[:5000]))
_case("truncated_gzip")(
    lambda d: _write(d, "trunc.json.gz", gzip.compress(_seed_text(), mtime=0)[:2000])
)
_case("corrupt_gzip")(
    lambda d: _write(
        d, "corrupt.json.gz", mutate_kineto(json.loads(_seed_text()), [Op("gzip_corrupt", 900, 3)])
    )
)
_case("gzip_garbage_after")(
    lambda d: _write(d, "garbage.json.gz", gzip.compress(_seed_text(), mtime=0) + b"garbage")
)
_case("nan_tokens")(
    lambda d: _write(d, "nan.json", _seed_text().replace(b'"dur":', b'"dur":NaN, "x":', 1))
)
_case("deep_nesting")(lambda d: CORPUS / "kineto" / "crash_deep_nesting.json")
_case("deep_envelope")(lambda d: CORPUS / "kineto" / "crash_deep_envelope.json")
_case("timestamp_overflow")(lambda d: CORPUS / "kineto" / "crash_exact_ts_overflow.json")
_case("timestamp_exponent")(lambda d: CORPUS / "kineto" / "crash_exact_ts_exponent.json")
_case("timestamp_digits")(lambda d: CORPUS / "kineto" / "crash_first_ts_digits.json")
_case("invalid_utf8_in_structure")(
    lambda d: _write(d, "utf8.json", b'{"traceEvents": [{"ph": "X", "\xff\xfe": 1,}]}')
)
_case("sqlite_multiline_error")(lambda d: CORPUS / "nsys" / "crash_multiline_schema_error.sqlite")


@_case("sqlite_no_tables")
def _sqlite_no_tables(d: Path) -> Path:
    p = d / "none.sqlite"
    _sqlite(p, "CREATE TABLE other (x INTEGER)")
    return p


@_case("sqlite_strings_only")
def _sqlite_strings_only(d: Path) -> Path:
    p = d / "strings.sqlite"
    _sqlite(p, "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    return p


@_case("sqlite_null_times")
def _sqlite_null_times(d: Path) -> Path:
    p = d / "nulls.sqlite"
    _sqlite(
        p,
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, nameId INTEGER)",
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (NULL, 'abc', 1)",
    )
    return p


@_case("sqlite_truncated")
def _sqlite_truncated(d: Path) -> Path:
    seed = CORPUS / "nsys" / "seed_extrap_concurrent16_nvtx_streams.sqlite"
    return _write(d, "trunc.sqlite", seed.read_bytes()[:3000])


_case("records_bad_line")(
    lambda d: _write(
        d,
        "bad.records.jsonl",
        (CORPUS / "records" / "seed_complete.records.jsonl").read_bytes().splitlines()[0]
        + b"\n{not json\n",
    )
)
_case("records_no_header")(
    lambda d: _write(d, "nohead.records.jsonl", b'{"type": "summary", "steps": 1, "wall_ns": 1}\n')
)
_case("records_empty")(lambda d: _write(d, "empty.records.jsonl", b""))
_case("records_uint64")(lambda d: CORPUS / "records" / "crash_uint64_figure.records.jsonl")
_case("records_deep")(lambda d: CORPUS / "records" / "crash_deep_nesting.records.jsonl")
_case("missing_file")(lambda d: d / "does-not-exist.json")
_case("name_with_newline_and_markup")(
    lambda d: _write(d, "bad\nname [bold]x.json", b"\x00\x01 not a trace")
)


@_case("fifo")
def _fifo(d: Path) -> Path:
    p = d / "pipe.json"
    os.mkfifo(p)
    return p


@_case("symlink_to_dev_zero")
def _dev_zero(d: Path) -> Path:
    p = d / "zero.records.jsonl"
    p.symlink_to("/dev/zero")
    return p


@_case("folder_of_broken_files")
def _folder(d: Path) -> Path:
    f = d / "ranks"
    f.mkdir()
    _write(f, "rank0.json", b"[")
    _write(f, "rank1.json.gz", b"\x1f\x8b\x08\x00garbage")
    _write(f, "rank2.sqlite", b"SQLite format 3\x00" + b"\x00" * 100)
    return f


_case("empty_folder")(lambda d: (d / "emptydir").mkdir() or d / "emptydir")


@pytest.mark.parametrize("name", sorted(_BROKEN))
def test_broken_file_exits_2_with_one_line(tmp_path: Path, name: str) -> None:
    path = _BROKEN[name](tmp_path)
    _assert_one_line_error(_report(path))
    _assert_one_line_error(_report(path, "--json"))


def test_the_execution_trace_is_refused_in_one_line() -> None:
    path = KINETO_DIR / "NOT_KINETO_execution_trace.json.gz"
    if not path.exists():
        pytest.skip(f"real traces not available ({KINETO_DIR} is absent on a user's clone)")
    r = _report(path)
    _assert_one_line_error(r)
    assert "execution trace" in r.stderr


# --------------------------------------------------------------------------------------------
# Gzip bombs: several GB inflated from a few MB, peak memory of the child measured.

_MAX_RSS_BYTES = 300 << 20


def _bomb(path: Path, head: bytes, filler: bytes, gib: int) -> None:
    # many gzip members of 64 MiB each (concatenated members are one stream to the reader)
    block = filler * ((64 << 20) // len(filler))
    member = gzip.compress(block, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(head, mtime=0))
        for _ in range(gib * 16):
            f.write(member)


# A forked child starts with its parent's resident-set high-water mark (Linux carries it across
# fork and exec), so a child of this big pytest process would report pytest's own RSS. A small
# fresh Python in between runs the command and reports the grandchild's peak from wait4.
_MEASURE = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "err = p.stderr.read()\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "sys.stderr.buffer.write(err)\n"
    "print(usage.ru_maxrss, usage.ru_utime + usage.ru_stime)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _run_measured(*args: str | Path) -> tuple[int, str, int, float]:
    """(status, stderr, peak RSS in bytes, CPU seconds) of ``asynctrace report ARGS``.

    CPU time, not wall time: a loaded machine stretches the wall clock, not the work."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "asynctrace", "report"]
        + [str(a) for a in args],
        capture_output=True,
        text=True,
        check=False,
    )
    # ru_maxrss is in KiB on Linux
    peak_kib, cpu_s = proc.stdout.split()
    return proc.returncode, proc.stderr, int(peak_kib) * 1024, float(cpu_s)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss units and wait4 as on Linux")
@pytest.mark.parametrize(
    ("head", "filler"),
    [
        pytest.param(b'{"traceEvents": [', b" ", id="spaces-inside-traceEvents"),
        pytest.param(b"", b"\x00", id="zeros"),
    ],
)
def test_gzip_bomb_bounded_memory(tmp_path: Path, head: bytes, filler: bytes) -> None:
    path = tmp_path / "bomb.json.gz"
    _bomb(path, head, filler, gib=5)
    assert path.stat().st_size < 8 << 20
    status, err, peak, seconds = _run_measured(path)
    assert status == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert peak < _MAX_RSS_BYTES, f"peak RSS {peak >> 20} MiB"
    assert seconds < 60


def test_wait4_measures_a_child_peak() -> None:
    # the bound above relies on wait4's rusage: a child that writes 200 MiB must show it
    proc = subprocess.Popen([sys.executable, "-c", "b = b'x' * (200 << 20)"])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    assert usage.ru_maxrss * 1024 >= 200 << 20


# --------------------------------------------------------------------------------------------
# Strings from a trace print literally: rich markup and emoji codes are not interpreted.

_MARKUP = "[bold red]x[/]"
_LINK = "[link=file:///etc/passwd]click[/link]"


def test_names_from_a_trace_print_literally(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "python_function",
            "name": f"{_MARKUP}evil.py(12): f :fire: {_LINK}",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 50,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamSynchronize",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 10,
            "args": {"correlation": 5},
        },
        {"ph": "X", "cat": f"{_LINK} :smile:", "name": "q", "pid": 1, "tid": 1, "ts": 0, "dur": 1},
        {
            "ph": "X",
            "cat": "kernel",
            "name": _MARKUP,
            "pid": 0,
            "tid": 7,
            "ts": 30,
            "dur": 2,
            "args": {"stream": 7, "device": 0},
        },
    ]
    doc = {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "[blink]GPU[/blink] :fire:"}],
    }
    path = tmp_path / "[bold]markup :smile:.json"
    path.write_text(json.dumps(doc))
    r = _report(path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "[bold]markup :smile:.json" in out  # the file name
    assert "[blink]GPU[/blink] :fire:" in out  # the device name
    assert f"X cat={_LINK} :smile:" in out  # a category the loader skipped
    assert f"{_MARKUP}evil.py:12" in out  # the sync site, from a python_function name
    assert "😄" not in out
    assert "🔥" not in out


def test_names_print_literally_in_records(tmp_path: Path) -> None:
    lines = (CORPUS / "records" / "seed_complete.records.jsonl").read_text().splitlines()
    lines = [
        ln.replace("Fake GPU", "[red]GPU[/red] :fire:").replace("train.py:42", _LINK)
        for ln in lines
    ]
    path = tmp_path / f"x{_MARKUP.replace('/', '')}.records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = _report(path)
    assert r.returncode == 0, r.stderr
    assert "[red]GPU[/red] :fire:" in r.stdout
    assert _LINK in r.stdout
    assert path.name in r.stdout
