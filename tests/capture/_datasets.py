"""Datasets for the DataLoader worker tests; a module of its own so spawned workers can import
them (a spawned worker unpickles its dataset by module path)."""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.utils.data import Dataset

__all__ = ["SlowDataset"]


class SlowDataset(Dataset[torch.Tensor]):
    """``n`` items, each taking ``delay_s`` in the worker; item ``i`` is
    ``[i, worker pid, whether the worker sees an active asynctrace session]``."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n = n
        self.delay_s = delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.delay_s)
        # the module is in a forked worker only because the parent had imported it
        module = sys.modules.get("asynctrace.capture.session")
        inherited = module is not None and module.current_session() is not None
        return torch.tensor([i, os.getpid(), int(inherited)])
