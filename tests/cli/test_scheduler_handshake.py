"""``--scheduler`` at something that is not a Dask scheduler (#27.8): the handshake (connect,
then the scheduler's identity) is bounded, and the answer is one line and exit status 2.
Today a silent listener hung forever, and an HTTP or SSH port crashed with
``_ArrayMemoryError: Unable to allocate 3.07 EiB``. Local listeners on 127.0.0.1 only."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from asynctrace.cli import main
from tests.cli.test_many import make_ranks

pytest.importorskip("distributed")
pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    make_ranks(folder, 2)
    return folder


@pytest.fixture
def silent() -> Iterator[str]:
    """A TCP port that accepts and never says a word."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield f"tcp://127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.fixture
def http_port() -> Iterator[str]:
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"tcp://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    t.join(30)


@pytest.fixture
def ssh_like() -> Iterator[str]:
    """A port that greets every connection first, as an SSH server does."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    done = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        s.settimeout(0.2)
        while not done.is_set():
            try:
                c, _ = s.accept()
            except OSError:
                continue
            accepted.append(c)
            c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"tcp://127.0.0.1:{s.getsockname()[1]}"
    done.set()
    t.join(30)
    for c in accepted:
        c.close()
    s.close()


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("asynctrace report: error: ")
    return line


@pytest.mark.timeout(180)
def test_silent_listener_is_given_up(
    ranks: Path, silent: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(ranks), "--scheduler", silent, "--scheduler-timeout", "2"]) == 2
    assert "no Dask scheduler answered within 2 s" in _one_line(capsys)


@pytest.mark.timeout(180)
def test_http_port_is_no_scheduler(
    ranks: Path, http_port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(ranks), "--scheduler", http_port, "--scheduler-timeout", "2"]) == 2
    line = _one_line(capsys)
    assert http_port in line
    assert "EiB" not in line


@pytest.mark.timeout(180)
def test_ssh_like_port_is_no_scheduler(
    ranks: Path, ssh_like: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(ranks), "--scheduler", ssh_like, "--scheduler-timeout", "2"]) == 2
    line = _one_line(capsys)
    assert ssh_like in line
    assert "EiB" not in line


@pytest.mark.timeout(180)
def test_timeout_from_the_environment(
    ranks: Path, silent: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCTRACE_SCHEDULER_TIMEOUT", "1.5")
    assert main(["report", str(ranks), "--scheduler", silent]) == 2
    assert "within 1.5 s" in _one_line(capsys)
    monkeypatch.setenv("ASYNCTRACE_SCHEDULER_TIMEOUT", "soon")
    assert main(["report", str(ranks), "--scheduler", silent]) == 2
    assert "$ASYNCTRACE_SCHEDULER_TIMEOUT='soon'" in _one_line(capsys)
