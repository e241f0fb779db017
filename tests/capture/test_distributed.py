"""Ranks: rank-aware records files and the per-rank step table gathered to rank 0.

The table is checked on hand-built steps with known answers, then end to end under a real
``torchrun --nproc_per_node=2`` on CPU (gloo), against figures recomputed from each rank's own
records file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from asynctrace.capture.distributed import rank_and_world, rank_tag, tail_steps
from asynctrace.errors import AsyncTraceError
from asynctrace.records import read_records
from tests.export._records import steps_ms as _steps


def test_rank_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert rank_and_world() == (None, None)
    assert rank_tag(None) == ""
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert rank_and_world() == (3, 4)
    assert rank_tag(3) == ".rank3"


def test_gather_outside_a_process_group_says_what_to_do() -> None:
    from asynctrace.capture.distributed import gather_steps

    with pytest.raises(AsyncTraceError, match="init_process_group"):
        gather_steps(_steps(1))


class _FakeDist:
    """torch.distributed as one process of a 4-rank job sees it, following distributed_c10d.py:
    get_rank()/get_world_size() answer for the default group and, given a group, within it;
    gather_object's ``dst`` is a global rank (turned into a group rank by
    _canonicalize_group_rank, which raises for a rank outside the group), and the output list
    is checked like _validate_output_list_for_rank: required on the destination, refused
    elsewhere. A group is the list of its global ranks. The other ranks' objects are scripted.
    """

    def __init__(self, me: int, others: dict[int, Any]) -> None:
        self.me = me
        self.others = others
        self.world = 4

    def _ranks(self, group: list[int] | None) -> list[int]:
        return list(range(self.world)) if group is None else group

    def get_rank(self, group: list[int] | None = None) -> int:
        ranks = self._ranks(group)
        return ranks.index(self.me) if self.me in ranks else -1

    def get_world_size(self, group: list[int] | None = None) -> int:
        return len(self._ranks(group))

    def get_global_rank(self, group: list[int], group_rank: int) -> int:
        return group[group_rank]

    def gather_object(
        self,
        obj: Any,
        object_gather_list: list[Any] | None = None,
        dst: int = 0,
        group: list[int] | None = None,
    ) -> None:
        ranks = self._ranks(group)
        if dst not in ranks:
            raise ValueError(f"Global rank {dst} is not part of group {group}")
        group_dst, mine = ranks.index(dst), ranks.index(self.me)
        if group_dst == mine:
            if not object_gather_list:
                raise ValueError("Argument ``gather_list`` must be specified on destination rank.")
            for i, r in enumerate(ranks):
                object_gather_list[i] = obj if r == self.me else self.others[r]
        elif object_gather_list:
            raise ValueError(
                "Argument ``gather_list`` must NOT be specified on non-destination ranks."
            )


def test_gather_over_a_subgroup_goes_to_the_global_dst(monkeypatch: pytest.MonkeyPatch) -> None:
    from asynctrace.capture import distributed as _distributed

    rank2 = {"steps": [(0, 5_000_000, None), (1, 7_000_000, None)], "records_path": "r2.jsonl"}
    fake = _FakeDist(me=3, others={2: rank2})
    monkeypatch.setattr(_distributed, "_dist", lambda: fake)
    # global rank 3 is rank 1 of the group [2, 3]: it is the destination all the same
    got = _distributed.gather_steps(_steps(4.0, 9.0), records_path="r3.jsonl", dst=3, group=[2, 3])
    assert got is not None
    assert sorted(got.steps) == [2, 3]
    assert [(s.step, s.frontend_ns) for s in got.steps[2]] == [(0, 5_000_000), (1, 7_000_000)]
    assert [(s.step, s.frontend_ns) for s in got.steps[3]] == [(0, 4_000_000), (1, 9_000_000)]
    assert got.records_paths == {2: "r2.jsonl", 3: "r3.jsonl"}
    # global rank 2, group rank 0, is not the destination
    fake.me = 2
    assert _distributed.gather_steps(_steps(5.0, 7.0), dst=3, group=[2, 3]) is None


def test_a_session_on_cuda_n_gathers_on_cuda_n(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NCCL's gather_object puts its tensors on torch's current device: the session makes its
    own device current for the gather, so ranks that never called set_device do not all land
    on cuda:0."""
    import contextlib

    import torch

    from asynctrace.capture import distributed as _distributed
    from asynctrace.capture.devices import CudaDevice
    from asynctrace.tracing import trace
    from tests.capture._fake_cuda import install

    gpu = install(monkeypatch)
    gpu.latency_ns = 0

    @contextlib.contextmanager
    def device(index: int) -> Any:  # torch.cuda.device: current device for the block
        before, gpu.current = gpu.current, index
        try:
            yield
        finally:
            gpu.current = before

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    seen: list[int] = []
    monkeypatch.setattr(_distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(
        _distributed, "gather_records", lambda path: seen.append(torch.cuda.current_device())
    )
    with trace(
        "ddp",
        dir=tmp_path,
        device=CudaDevice(1, clock=gpu.clock),
        print_summary=False,
        gather_ranks=True,
        detect_syncs="off",
        nvtx=False,
    ) as s:
        s.step()
    assert seen == [1]
    assert torch.cuda.current_device() == 0  # and only for the gather


def test_tail_steps_is_bounded(tmp_path: Path) -> None:
    from asynctrace.tracing import trace

    with trace("tail", dir=tmp_path, device="cpu", print_summary=False) as s:
        for _ in range(30):
            s.step()
    assert s.records_path is not None
    last = tail_steps(s.records_path, last_steps=7)
    assert [r.step for r in last] == list(range(23, 30))
    assert last == read_records(s.records_path).steps[-7:]


WORKER = """
import json, os, sys, time
import torch
import torch.distributed as dist
import asynctrace
from asynctrace.analysis.ranks import rank_table
from asynctrace.capture import distributed as _distributed
from asynctrace.render.ranks import format_rank_table

out = sys.argv[1]
STRAGGLER_S = 0.25
dist.init_process_group("gloo")
rank = dist.get_rank()
for run in range(2):  # two sessions with the same name: nothing may be overwritten
    # run 0 gathers by hand after the session; run 1 lets the session gather at its exit
    with asynctrace.trace(
        "ddp", dir=out, device="cpu", print_summary=run == 1, gather_ranks=run == 1
    ) as s:
        for i in range(6):
            x = torch.randn(64, 64)
            (x @ x).sum()
            # rank 1 is the straggler: it sleeps 250 ms a step, which no load on the machine
            # makes rank 0's 2 ms step reach (the test reads both ranks' own figures anyway)
            time.sleep(0.002 + (STRAGGLER_S if rank == 1 else 0.0))
            s.step()
    if run == 0:
        gathered = _distributed.gather_records(s.records_path)
        table = None if gathered is None else rank_table(
            gathered.steps, records_paths=gathered.records_paths
        )
    else:
        table = s.rank_table
    if rank == 0:
        assert table is not None
        print(format_rank_table(table))
        with open(os.path.join(out, f"table{run}.json"), "w") as f:
            json.dump(table.to_json(), f)
    else:
        assert table is None
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which(
        "torchrun"
    )
    if torchrun is None:
        pytest.skip("torchrun not found next to this Python")
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(WORKER))
    out = tmp_path / "traces"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # its own session, so a hang can be ended with every worker torchrun started
    proc = subprocess.Popen(
        [torchrun, "--standalone", "--nproc_per_node=2", str(worker), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"torchrun hung:\n{stdout}")
    assert proc.returncode == 0, stdout

    files = sorted(out.glob("*.records.jsonl"))
    assert not list(out.glob("*.tmp"))
    # 2 ranks x 2 sessions, every one its own file
    assert len(files) == 4
    by_rank: dict[int, list[Path]] = {0: [], 1: []}
    for f in files:
        rec = read_records(f)
        assert rec.complete
        assert rec.header.world_size == 2
        assert rec.header.rank in (0, 1)
        assert f".rank{rec.header.rank}." in f.name
        by_rank[rec.header.rank].append(f)
    assert len(by_rank[0]) == len(by_rank[1]) == 2

    for run in range(2):
        table = json.loads((out / f"table{run}.json").read_text())
        assert table["ranks"] == [0, 1]
        paths = [Path(p["records_path"]) for p in table["per_rank"]]
        assert {p.name for p in paths} <= {f.name for f in files}
        own = [read_records(p).steps for p in paths]
        assert [s["step"] for s in table["steps"]] == list(range(6))
        for row in table["steps"]:
            i = row["step"]
            fe = [own[0][i].frontend_ns, own[1][i].frontend_ns]
            # the gathered table against each rank's own records, recomputed here
            assert row["time_ns"] == fe
            assert row["skew_ns"] == max(fe) - min(fe)
            assert row["slowest_rank"] == fe.index(max(fe))
            # what the sleep guarantees whatever the load: rank 1's own step is at least its
            # sleep, and the skew is that step less rank 0's own
            assert fe[1] >= 250_000_000
            assert row["skew_ns"] >= fe[1] - fe[0]
        slowest_1 = sum(
            own[1][i].frontend_ns > own[0][i].frontend_ns for i in range(len(table["steps"]))
        )
        assert table["per_rank"][1]["slowest_count"] == slowest_1
        # a 250 ms sleep dominates a 2 ms step: rank 1 is the straggler of most steps
        assert slowest_1 >= 4
    assert "slowest" in stdout
