"""Shared fixtures: where the real traces are, and a guard against leaked global state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI (`.ci/run` sets CI=true) explores the same examples every run: a property that fails there
# fails again on a rerun. Locally each run explores new ones.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
KINETO_DIR = SHARED_TRACES / "kineto"
NSYS_DIR = SHARED_TRACES / "nsys"


def shared_trace(kind: str, name: str) -> Path:
    """Path of a real trace under ../shared/traces, or skip the test with the reason."""
    path = SHARED_TRACES / kind / name
    if not path.exists():
        pytest.skip(
            f"real trace {path} not available (../shared/traces is absent on a user's clone)"
        )
    return path


@pytest.fixture
def kineto_trace():  # type: ignore[no-untyped-def]
    return lambda name: shared_trace("kineto", name)


@pytest.fixture
def nsys_trace():  # type: ignore[no-untyped-def]
    return lambda name: shared_trace("nsys", name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.gpu`` tests skip where torch sees no CUDA/ROCm device.

    ``python -m pytest -m gpu`` runs just them, on a lent GPU (``benchmarks/gpu_check.py`` does).
    torch is imported only when such a test was collected: the analysis tests run without it.
    """
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm device")
    for item in gpu_items:
        item.add_marker(skip)
