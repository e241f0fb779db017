"""The device name of an Nsight Systems export whose GPU table names its id column deviceId."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from asynctrace.traces.nsys import load_nsys
from tests.conftest import shared_trace

pytestmark = pytest.mark.real_traces


@pytest.mark.parametrize("column", ["id", "deviceId"])
def test_device_name_with_either_id_column(column: str, tmp_path: Path) -> None:
    src = shared_trace("nsys", "pipit_saxpy_mpi_cuda_nsys2022.sqlite")
    path = tmp_path / src.name
    shutil.copy(src, path)
    if column != "id":
        con = sqlite3.connect(path)
        con.execute(f"ALTER TABLE TARGET_INFO_GPU RENAME COLUMN id TO {column}")
        con.commit()
        con.close()
    # the export's one GPU is an A100 (TARGET_INFO_GPU row 0), whatever the column is called
    assert load_nsys(path).device_name == "NVIDIA A100-SXM4-40GB"
