"""``report DIR --workers N`` / ``--scheduler ADDRESS`` and ``asynctrace.analyze_many``.

The per-rank map on local processes, on a Dask ``LocalCluster`` and on a scheduler and two
workers started as separate processes; output identical to the sequential run; a bad file and a
worker killed mid-run name their file and keep the others. Rank files are copies of small real
traces with their ``distributedInfo.rank`` rewritten. Generous timeouts, no timing assertions:
these run on loaded 2-core machines.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import asynctrace
from asynctrace.cli import main
from tests.conftest import ROOT, shared_trace

pytestmark = pytest.mark.real_traces

SMALL = ("hta_sampled_rank0.json.gz", "hta_sampled_rank1.json.gz")


def make_ranks(folder: Path, n: int, *, names: tuple[str, ...] = SMALL) -> list[Path]:
    """``rank0.json.gz`` … in ``folder``: the shared traces in turn, each with its rank set."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = [json.loads(gzip.decompress(shared_trace("kineto", x).read_bytes())) for x in names]
    out = []
    for r in range(n):
        doc = docs[r % len(docs)]
        doc.setdefault("distributedInfo", {})["rank"] = r
        p = folder / f"rank{r}.json.gz"
        p.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        out.append(p)
    return out


def _report(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["report", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    make_ranks(folder, 6)
    return folder


@pytest.fixture(scope="module")
def sequential(ranks: Path) -> dict[str, str]:
    """The sequential run's JSON and text, to compare every parallel run with."""
    out = {}
    for kind, extra in (("json", ["--json"]), ("text", [])):
        r = subprocess.run(
            [sys.executable, "-m", "asynctrace", "report", str(ranks), "--workers", "1", *extra],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        out[kind] = r.stdout
    return out


@pytest.mark.timeout(300)
def test_local_workers_same_output(
    ranks: Path, sequential: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _report([str(ranks), "--json", "--workers", "2"], capsys)
    assert (status, err) == (0, "")
    assert out == sequential["json"]
    obj = json.loads(out)
    assert [r["source"]["rank"] for r in obj["reports"]] == list(range(6))
    assert obj["cross_rank"]["ranks"] == 6
    status, out, err = _report([str(ranks), "--workers", "2"], capsys)
    assert (status, err) == (0, "")
    assert out == sequential["text"]
    assert "across ranks (6)" in out


@pytest.mark.timeout(300)
def test_api_same_reports_as_one_process(ranks: Path) -> None:
    paths = sorted(ranks.glob("rank*.json.gz"), key=lambda p: int(p.name[4:-8]))
    one = asynctrace.analyze_many(paths, workers=1)
    two = asynctrace.analyze_many(paths, workers=2)
    assert one.reports == two.reports
    assert one.ranks == two.ranks
    assert one.cross_rank == two.cross_rank
    assert [f.source for f in two.files] == [str(p) for p in paths]
    assert all(f.ok and f.peak_rss_bytes > 0 for f in two.files)
    assert len({f.worker for f in two.files}) >= 1


@pytest.mark.timeout(300)
def test_bad_file_named_others_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_ranks(tmp_path, 3)
    (tmp_path / "rank3.json").write_text("garbage")
    status, out, err = _report([str(tmp_path), "--json", "--workers", "2"], capsys)
    assert status == 1
    assert len(json.loads(out)["reports"]) == 3
    status_1, out_1, err_1 = _report([str(tmp_path), "--json", "--workers", "1"], capsys)
    assert (status_1, out_1, err_1) == (status, out, err)  # same message, same status
    assert err.startswith(f"asynctrace report: skipped {tmp_path / 'rank3.json'}: ")


@pytest.mark.timeout(300)
def test_workers_import_no_torch(ranks: Path, tmp_path: Path) -> None:
    # a torch that records every process importing it, first on the path
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os\n"
        "open(os.path.join(os.environ['TORCH_MARKS'], str(os.getpid())), 'w').close()\n"
        "raise ImportError('torch imported')\n"
    )
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake.parent), str(ROOT)]),
        "TORCH_MARKS": str(marks),
    }
    r = subprocess.run(
        [sys.executable, "-m", "asynctrace", "report", str(ranks), "--json", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["reports"]) == 6
    assert list(marks.iterdir()) == []


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _open_rank_file(pid: int, folder: Path) -> Path | None:
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = Path(os.readlink(fd))
            if target.parent == folder and target.name.startswith("rank"):
                return target
    except OSError:
        pass
    return None


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
@pytest.mark.timeout(300)
def test_worker_killed_mid_run_names_its_file(tmp_path: Path) -> None:
    # larger ranks (tens of MB of JSON) so that a worker is caught while it reads one
    files = make_ranks(tmp_path, 8, names=("hta_a100_16ranks_rank0_graphlaunch.json.gz",))
    proc = subprocess.Popen(
        [sys.executable, "-m", "asynctrace", "report", str(tmp_path), "--json", "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed: Path | None = None
    try:
        deadline = time.monotonic() + 240
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            for pid in _descendants(proc.pid):
                held = _open_rank_file(pid, tmp_path)
                if held is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed = held
                    break
            else:
                time.sleep(0.002)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if killed is None:
        pytest.skip("no worker was caught holding a rank file (the run ended first)")
    assert proc.returncode == 1, err
    lost = [line for line in err.splitlines() if "worker analysing it was lost" in line]
    assert lost == [f"asynctrace report: skipped {killed}: " + lost[0].split(": ", 2)[2]]
    reports = json.loads(out)["reports"]
    assert sorted(r["source"]["path"] for r in reports) == sorted(
        str(p) for p in files if p != killed
    )


@pytest.mark.timeout(300)
def test_scheduler_without_dask_says_how_to_install(
    ranks: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    status, out, err = _report([str(ranks), "--scheduler", "tcp://127.0.0.1:1"], capsys)
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1
    assert "pip install 'asynctrace[dask]'" in err


# --- Dask ------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_dask_local_cluster_same_output(
    ranks: Path, sequential: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        processes=True,
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=None,
        host="127.0.0.1",
        death_timeout=120,
    ) as cluster:
        status, out, err = _report(
            [str(ranks), "--json", "--scheduler", cluster.scheduler_address], capsys
        )
        assert (status, err) == (0, "")
        assert out == sequential["json"]
        with distributed.Client(cluster, set_as_default=False) as client:
            many = asynctrace.analyze_many(sorted(ranks.iterdir()), scheduler=client)
            workers = {f.worker for f in many.files}
    assert len(many.reports) == 6
    assert all(w and ":" in w for w in workers)


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        if proc.poll() is not None:
            raise AssertionError(f"dask scheduler exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no scheduler file after {timeout} s")
        time.sleep(0.2)


@contextlib.contextmanager
def _dask_processes(
    folder: Path, *, workers: int = 2, env: dict[str, str] | None = None
) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """A ``dask scheduler`` and ``workers`` ``dask worker`` processes on 127.0.0.1 (one thread
    each, no nanny), started in ``folder``: (the scheduler address, the worker processes)."""
    distributed = pytest.importorskip("distributed")
    dask_cli = Path(sys.executable).with_name("dask")
    if not dask_cli.exists():
        pytest.skip("the dask command is not installed beside this Python")
    sched_file = folder / "scheduler.json"
    procs: list[subprocess.Popen[bytes]] = []
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    }

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(folder / f"{name}.log", "wb") as log:
            p = subprocess.Popen(
                [str(dask_cli), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=folder,
                env=full_env,  # the workers import this checkout's asynctrace
            )
        procs.append(p)
        return p

    try:
        sched = start(
            "scheduler",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(sched_file),
        )
        _wait_for(sched_file, sched, 120)
        worker_procs = [
            start(
                f"worker{i}",
                "worker",
                "--scheduler-file",
                str(sched_file),
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
                "--death-timeout",
                "120",
            )
            for i in range(workers)
        ]
        address = json.loads(sched_file.read_text())["address"]
        with distributed.Client(address, set_as_default=False, timeout=120) as client:
            client.wait_for_workers(workers, timeout=180)
        yield address, worker_procs
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(timeout=60)


@pytest.mark.timeout(300)
def test_dask_scheduler_and_workers_as_processes(
    ranks: Path,
    sequential: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _dask_processes(tmp_path) as (address, _):
        status, out, err = _report([str(ranks), "--json", "--scheduler", address], capsys)
        assert (status, err) == (0, "")
        assert out == sequential["json"]
        status, out, err = _report([str(ranks), "--scheduler", address], capsys)
        assert (status, err) == (0, "")
        assert out == sequential["text"]
        # a relative folder: the workers (started in another folder) open the files by their
        # absolute paths, and the report names them as given, as the sequential run does
        monkeypatch.chdir(ranks.parent)
        (ranks / "rank9.json").write_text("garbage")
        try:
            here = [ranks.name, "--json"]
            one = _report([*here, "--workers", "1"], capsys)
            assert one[0] == 1
            assert _report([*here, "--scheduler", address], capsys) == one
        finally:
            (ranks / "rank9.json").unlink()


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
@pytest.mark.timeout(300)
def test_dask_worker_killed_mid_run_names_its_file(tmp_path: Path) -> None:
    # allowed-failures 0: the tasks of a worker that dies are not re-run elsewhere but come back
    # as lost (KilledWorker), so their files are named; the other files are reported
    files = make_ranks(tmp_path / "in", 8, names=("hta_a100_16ranks_rank0_graphlaunch.json.gz",))
    env = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    with _dask_processes(tmp_path, env=env) as (address, workers):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "asynctrace",
                "report",
                f"{tmp_path}/in",
                "--json",
                "--scheduler",
                address,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        killed: Path | None = None
        try:
            deadline = time.monotonic() + 240
            while killed is None and proc.poll() is None and time.monotonic() < deadline:
                for w in workers:
                    held = _open_rank_file(w.pid, tmp_path / "in")
                    if held is not None:
                        w.kill()
                        killed = held
                        break
                else:
                    time.sleep(0.002)
            out, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if killed is None:
        pytest.skip("no worker was caught holding a rank file (the run ended first)")
    assert proc.returncode == 1, err
    lost = [line for line in err.splitlines() if "worker analysing it was lost" in line]
    assert all("KilledWorker" in line for line in lost), err
    lost_files = {line.split(" ")[3].rstrip(":") for line in lost}
    # Dask counts every task the worker was processing (it may hold a second one, queued
    # behind the running one): the killed one, and perhaps that one
    assert str(killed) in lost_files
    assert len(lost_files) <= 2
    reports = json.loads(out)["reports"]
    assert sorted(r["source"]["path"] for r in reports) == sorted(
        str(p) for p in files if str(p) not in lost_files
    )


@pytest.mark.timeout(300)
def test_html_page_of_a_folder_with_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    make_ranks(tmp_path / "in", 2)
    (tmp_path / "in" / "rank2.json").write_text("garbage")
    page = tmp_path / "page.html"
    status, _, err = _report([str(tmp_path / "in"), "--html", str(page), "--workers", "2"], capsys)
    assert status == 1
    assert "skipped" in err
    assert page.stat().st_size > 0


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
@pytest.mark.timeout(300)
def test_progress_bar_on_a_terminal_only(ranks: Path, sequential: dict[str, str]) -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "asynctrace", "report", str(ranks), "--workers", "2"],
            stdout=subprocess.PIPE,
            stderr=follower,
            env=env,
            text=True,
        )
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        out, _ = proc.communicate(timeout=240)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0
    assert out == sequential["text"]  # stdout untouched by the bar
    assert b"analysing" in seen
    assert b"/6 files" in seen
