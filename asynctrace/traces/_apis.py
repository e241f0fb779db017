"""Which host runtime/driver API does what, by name: one table shared by every loader.

Kineto writes the bare API name (``cudaLaunchKernel``); Nsight Systems exports add version and
per-thread-stream suffixes (``cudaLaunchKernel_v7000``, ``cudaMemcpyAsync_ptsz``). Both go through
:func:`classify_runtime`, which strips those suffixes first.

Judgement calls (documented in ``docs/formats.md``):

* ``cudaStreamWaitEvent`` / ``hipStreamWaitEvent`` make a *stream* wait for an event; the host
  returns at once, so they are ``OTHER``, not ``SYNC``.
* ``cudaEventQuery`` / ``cudaStreamQuery`` poll without blocking: ``OTHER``.
* ``hipMemcpyWithStream`` is documented by AMD as "akin to hipMemcpyAsync + hipStreamSynchronize"
  (a sync API), and PyTorch uses it for blocking copies on ROCm: ``BLOCKING_MEMCPY``.
* ``cudaMemcpy`` & co. (no ``Async``) are ``BLOCKING_MEMCPY`` even though CUDA lets a
  device-to-device copy return early: the name is all a trace gives us.
* ``cudaMemset`` (no ``Async``) is asynchronous for device memory, so it is ``MEMSET``.
"""

from __future__ import annotations

import re

from asynctrace.traces.model import RuntimeKind

__all__ = [
    "BLOCKING_MEMCPY_APIS",
    "DRIVER_CATEGORIES",
    "GRAPH_LAUNCH_APIS",
    "LAUNCH_APIS",
    "MEMCPY_APIS",
    "MEMSET_APIS",
    "RUNTIME_CATEGORIES",
    "SYNC_APIS",
    "classify_runtime",
    "normalize_api_name",
]

LAUNCH_APIS: frozenset[str] = frozenset(
    {
        # CUDA runtime
        "cudaLaunch",
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        # CUDA driver (torch.compile / Triton launch through these)
        "cuLaunch",
        "cuLaunchGrid",
        "cuLaunchGridAsync",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuLaunchCooperativeKernelMultiDevice",
        # HIP
        "hipLaunchKernel",
        "hipLaunchKernelExC",
        "hipExtLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipModuleLaunchKernelEx",
        "hipHccModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipLaunchCooperativeKernelMultiDevice",
        "hipModuleLaunchCooperativeKernel",
        "hipModuleLaunchCooperativeKernelMultiDevice",
        "hipExtLaunchMultiKernelMultiDevice",
        "hipLaunchByPtr",
        # MTIA
        "mtiaLaunchKernel",
    }
)

MEMCPY_APIS: frozenset[str] = frozenset(
    {
        "cudaMemcpyAsync",
        "cudaMemcpy2DAsync",
        "cudaMemcpy3DAsync",
        "cudaMemcpyPeerAsync",
        "cudaMemcpy3DPeerAsync",
        "cudaMemcpyToSymbolAsync",
        "cudaMemcpyFromSymbolAsync",
        "cudaMemcpyToArrayAsync",
        "cudaMemcpyFromArrayAsync",
        "cudaMemcpy2DToArrayAsync",
        "cudaMemcpy2DFromArrayAsync",
        "cudaMemcpyBatchAsync",
        "cudaMemcpy3DBatchAsync",
        "cuMemcpyAsync",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoDAsync",
        "cuMemcpyHtoAAsync",
        "cuMemcpyAtoHAsync",
        "cuMemcpy2DAsync",
        "cuMemcpy3DAsync",
        "cuMemcpy3DPeerAsync",
        "cuMemcpyPeerAsync",
        "cuMemcpyBatchAsync",
        "hipMemcpyAsync",
        "hipMemcpy2DAsync",
        "hipMemcpy3DAsync",
        "hipMemcpyPeerAsync",
        "hipMemcpyHtoDAsync",
        "hipMemcpyDtoHAsync",
        "hipMemcpyDtoDAsync",
        "hipMemcpyToSymbolAsync",
        "hipMemcpyFromSymbolAsync",
        "hipMemcpy2DToArrayAsync",
        "hipMemcpy2DFromArrayAsync",
        "hipMemcpyParam2DAsync",
    }
)

MEMSET_APIS: frozenset[str] = frozenset(
    {
        "cudaMemset",
        "cudaMemset2D",
        "cudaMemset3D",
        "cudaMemsetAsync",
        "cudaMemset2DAsync",
        "cudaMemset3DAsync",
        "cuMemsetD8Async",
        "cuMemsetD16Async",
        "cuMemsetD32Async",
        "cuMemsetD2D8Async",
        "cuMemsetD2D16Async",
        "cuMemsetD2D32Async",
        "hipMemset",
        "hipMemsetAsync",
        "hipMemset2DAsync",
        "hipMemset3DAsync",
        "hipMemsetD8Async",
        "hipMemsetD16Async",
        "hipMemsetD32Async",
    }
)

GRAPH_LAUNCH_APIS: frozenset[str] = frozenset(
    {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
)

SYNC_APIS: frozenset[str] = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipCtxSynchronize",
        "mtiaDeviceSynchronize",
        "mtiaStreamSynchronize",
        "mtiaEventSynchronize",
    }
)

BLOCKING_MEMCPY_APIS: frozenset[str] = frozenset(
    {
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyPeer",
        "cudaMemcpy3DPeer",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToArray",
        "cudaMemcpyFromArray",
        "cudaMemcpy2DToArray",
        "cudaMemcpy2DFromArray",
        "cuMemcpy",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "cuMemcpy2D",
        "cuMemcpy3D",
        "cuMemcpyPeer",
        "hipMemcpy",
        "hipMemcpy2D",
        "hipMemcpy3D",
        "hipMemcpyPeer",
        "hipMemcpyHtoD",
        "hipMemcpyDtoH",
        "hipMemcpyDtoD",
        "hipMemcpyToSymbol",
        "hipMemcpyFromSymbol",
        "hipMemcpyParam2D",
        "hipMemcpyWithStream",
    }
)

#: Kineto categories of host runtime / driver API calls, across generations and vendors.
RUNTIME_CATEGORIES: frozenset[str] = frozenset(
    {
        "cuda_runtime",
        "runtime",
        "Runtime",
        "cuda_driver",
        "driver",
        "mtia_runtime",
        "xpu_runtime",
        "xpu_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
    }
)
DRIVER_CATEGORIES: frozenset[str] = frozenset(
    {"cuda_driver", "driver", "xpu_driver", "privateuse1_driver"}
)

_TABLES: tuple[tuple[frozenset[str], RuntimeKind], ...] = (
    (LAUNCH_APIS, RuntimeKind.LAUNCH),
    (MEMCPY_APIS, RuntimeKind.MEMCPY),
    (MEMSET_APIS, RuntimeKind.MEMSET),
    (GRAPH_LAUNCH_APIS, RuntimeKind.GRAPH_LAUNCH),
    (SYNC_APIS, RuntimeKind.SYNC),
    (BLOCKING_MEMCPY_APIS, RuntimeKind.BLOCKING_MEMCPY),
)

# Nsight Systems appends the API version (``_v7000``) and the per-thread default stream
# variants (``_ptsz``, ``_ptds``, ``_spt``); CUPTI names of the same call otherwise agree.
_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")


def normalize_api_name(name: str) -> str:
    """The API name without version / per-thread-stream suffixes (``cudaLaunchKernel_v7000``)."""
    return _SUFFIX.sub("", name)


def classify_runtime(name: str) -> RuntimeKind:
    """What a runtime/driver call does for asynchrony, from its name alone.

    Unknown names are ``OTHER``: a call we cannot place is never guessed to launch or block.
    Loaders call this once per distinct name, so it is not cached here.
    """
    base = normalize_api_name(name)
    for table, kind in _TABLES:
        if base in table:
            return kind
    return RuntimeKind.OTHER
