"""The library code whose synchronizations we know: what each does and the setting that removes
it, and the host-side code whose tensor reads never synchronize a device.

Data, in one place (``docs/finding-syncs.md`` prints the same tables): the sync lint looks a
sync's library frames up here (:func:`match_frame`), ``asynctrace check`` prints what it finds
(:func:`known_sync`). Nothing here imports torch.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

__all__ = [
    "BLOCKING_COPY_OPS",
    "COPY_OPS",
    "HOST_ONLY_CODE",
    "KNOWN_SYNCS",
    "LIBRARY_TAG",
    "LINT_OPS",
    "MASK_OPS",
    "SCALAR_READ_OPS",
    "SHAPE_OPS",
    "TRACE_SYNC_OPS",
    "KnownSync",
    "is_host_only_file",
    "is_library_frame",
    "known_sync",
    "match_frame",
    "tag_of",
]


#: aten ops that read a scalar to the host: they synchronize whatever their arguments
SCALAR_READ_OPS: tuple[str, ...] = ("_local_scalar_dense",)
#: aten ops whose output shape depends on the data: they synchronize whatever their arguments
SHAPE_OPS: tuple[str, ...] = (
    "nonzero",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "unique_dim_consecutive",
    "bincount",
    "equal",
    "allclose",
)
#: aten ops that synchronize when indexed with a boolean mask
MASK_OPS: tuple[str, ...] = ("index", "index_put_", "index_put", "_index_put_impl_")
#: aten ops that synchronize when they copy a device tensor to the host without non_blocking
COPY_OPS: tuple[str, ...] = ("_to_copy", "copy_")
#: the ops a sync is a blocking copy in, as traces and sessions name them (the one list): the
#: aten copy operators (``aten::to`` and :data:`COPY_OPS`: in a trace, a synchronize inside one
#: is the copy's wait) and the tensor methods that copy a tensor to the host (a session's sync
#: ops). A runtime call that blocks for a copy is the loaders' ``BLOCKING_MEMCPY``
BLOCKING_COPY_OPS: frozenset[str] = frozenset(
    {"aten::to", *(f"aten::{op}" for op in COPY_OPS), "Tensor.cpu", "Tensor.numpy", "Tensor.tolist"}
)

#: aten ops the sync lint flags, with why each would synchronize on an accelerator (the lint
#: decides from the arguments for the mask, copy and ``repeat_interleave`` ops)
LINT_OPS: dict[str, str] = {
    "_local_scalar_dense": "reads a scalar to the host (.item(), bool(), float(), int(), if t:)",
    "nonzero": "output shape depends on the data (nonzero, torch.where(cond), argwhere)",
    "masked_select": "output shape depends on the data",
    "_unique": "output shape depends on the data",
    "_unique2": "output shape depends on the data (torch.unique)",
    "unique_dim": "output shape depends on the data",
    "unique_consecutive": "output shape depends on the data",
    "unique_dim_consecutive": "output shape depends on the data",
    "bincount": "output size depends on the data's maximum",
    "repeat_interleave": "output size depends on the data unless output_size is given",
    "equal": "returns a Python bool",
    "allclose": "returns a Python bool",
    "index": "boolean-mask indexing (x[mask]) computes nonzero",
    "index_put_": "boolean-mask assignment (x[mask] = v) computes nonzero",
    "index_put": "boolean-mask assignment computes nonzero",
    "_index_put_impl_": "boolean-mask assignment computes nonzero",
    "_to_copy": "copies a device tensor to the host",
    "copy_": "copies a device tensor into a host tensor",
}

#: the lint's ops a trace counts as syncs on sight, as the profiler names them
#: (``aten::<op>``), with ``item`` (the op ``.item()`` records around ``_local_scalar_dense``):
#: the ops it flags whatever their arguments. A trace does not hold the arguments the others
#: need (whether an index is a mask, a copy's devices and ``non_blocking``)
TRACE_SYNC_OPS: tuple[str, ...] = ("item", *SCALAR_READ_OPS, *SHAPE_OPS)


@dataclass(frozen=True)
class KnownSync:
    """A synchronization made by a library on the user's behalf."""

    #: short stable name, written into the sync's stack as ``[id]`` (``check`` looks it up)
    id: str
    #: the file, as its path ends under ``site-packages`` (``transformers/trainer.py``)
    file: str
    #: what it does, in words
    what: str
    #: the setting (or change) that removes it
    fix: str
    #: the function(s) the sync is made in; empty: any function of ``file``
    functions: tuple[str, ...] = ()
    #: a regular expression the source lines at the frame must contain (the line and three
    #: on each side: a condition spread over lines reports its first line); keeps matching
    #: when the library renames the function around it
    source: str | None = None
    #: (file, function) of a frame further out that must be on the stack: the same helper
    #: serves several callers (Lightning's ``to_item``)
    called_from: tuple[str, str] | None = None
    #: (file, local variable) of frames further out naming what was logged; the first found is
    #: reported with the sync
    key_locals: tuple[tuple[str, str], ...] = ()


KNOWN_SYNCS: tuple[KnownSync, ...] = (
    KnownSync(
        id="transformers.logging_nan_inf_filter",
        file="transformers/trainer.py",
        source=r"isnan|isinf|logging_nan_inf_filter",
        what="Trainer checks every micro-batch's loss for NaN/inf on the host "
        "(two syncs per micro-batch: isnan, isinf)",
        fix="TrainingArguments(logging_nan_inf_filter=False)",
    ),
    KnownSync(
        id="transformers.padding_mask",
        file="transformers/masking_utils.py",
        what="the attention-mask builder reads the padding mask (padding_mask.all()) to see "
        "whether SDPA's is_causal shortcut applies (one sync per forward)",
        fix="leave attention_mask out of batches that have no padding (fixed-length or packed "
        "data), or use attn_implementation='eager'",
    ),
    KnownSync(
        id="lightning.log_prog_bar",
        file="lightning/fabric/utilities/apply_func.py",
        functions=("to_item",),
        called_from=("lightning/pytorch/trainer/connectors/logger_connector/result.py", "metrics"),
        key_locals=(
            ("lightning/pytorch/trainer/connectors/logger_connector/result.py", "forked_name"),
        ),
        what="Lightning turns a value logged with self.log(..., prog_bar=True) into a Python "
        "number for the progress bar, after training_step returned (syncs per logged key "
        "every step)",
        fix="self.log(..., prog_bar=False), or on_step=False (the value is then read once per "
        "epoch)",
    ),
    KnownSync(
        id="lightning.logger",
        file="lightning/fabric/utilities/apply_func.py",
        functions=("to_item",),
        called_from=(
            "lightning/pytorch/trainer/connectors/logger_connector/logger_connector.py",
            "log_metrics",
        ),
        key_locals=(("lightning_utilities/core/apply_func.py", "k"),),
        what="Lightning turns the values logged with self.log(...) into Python numbers for the "
        "logger (one sync per logged key, every log_every_n_steps steps)",
        fix="Trainer(log_every_n_steps=N) with a larger N, or self.log(..., logger=False)",
    ),
    KnownSync(
        id="lightning.teardown",
        file="lightning/fabric/utilities/device_dtype_mixin.py",
        functions=("cpu",),
        called_from=("lightning/pytorch/strategies/strategy.py", "teardown"),
        what="Lightning moves the model back to the CPU when fit ends (once per fit, after the "
        "last step)",
        fix="none needed: it runs once, at the end of fit",
    ),
    KnownSync(
        id="lightning.loader_length",
        file="lightning/pytorch/utilities/data.py",
        functions=("has_len_all_ranks",),
        what="Lightning sums the DataLoader's length over ranks with a tensor on the training "
        "device (once per fit and loader, before the first step)",
        fix="none needed: it runs once per loader, when fit starts",
    ),
)

#: code that runs on the host by design: reads of host tensors made inside it never wait for a
#: device, on any machine (the data pipeline creates its tensors on the host, the user moves
#: the batch; optimizers keep step counters on the host). (path fragment, why)
HOST_ONLY_CODE: tuple[tuple[str, str], ...] = (
    ("torch/utils/data/", "DataLoader, samplers, workers: seeds and indices on the host"),
    ("torch/optim/", "optimizers' host-side step counters (Adam's step.item())"),
    ("accelerate/data_loader.py", "accelerate's DataLoader wrappers: seeds on the host"),
    ("lightning/pytorch/utilities/combined_loader.py", "Lightning's loader iteration"),
)

_HOST_ONLY = tuple(fragment for fragment, _ in HOST_ONLY_CODE)
_TAG = re.compile(r" \[(?P<id>[a-z_.]+)(?:: (?P<detail>.*))?\]$")


def is_host_only_file(path: str) -> bool:
    """Whether ``path`` is host-side code of :data:`HOST_ONLY_CODE`."""
    path = path.replace("\\", "/")
    return any(fragment in path for fragment in _HOST_ONLY)


def _outwards(frame: FrameType, limit: int) -> Iterator[FrameType]:
    f = frame.f_back
    while f is not None and limit > 0:
        yield f
        f = f.f_back
        limit -= 1


def _source_matches(frame: FrameType, pattern: str) -> bool:
    name, line = frame.f_code.co_filename, frame.f_lineno
    text = "".join(linecache.getline(name, n) for n in range(max(line - 3, 1), line + 4))
    return re.search(pattern, text) is not None


def match_frame(frame: FrameType) -> tuple[KnownSync, str | None] | None:
    """The known sync a library frame makes, and what it names (a logged key), or None."""
    path = frame.f_code.co_filename.replace("\\", "/")
    for entry in KNOWN_SYNCS:
        if not path.endswith("/" + entry.file):
            continue
        if entry.functions and frame.f_code.co_name not in entry.functions:
            continue
        if entry.source is not None and not _source_matches(frame, entry.source):
            continue
        if entry.called_from is not None:
            file, func = entry.called_from
            if not any(
                f.f_code.co_name == func and f.f_code.co_filename.replace("\\", "/").endswith(file)
                for f in _outwards(frame, 12)
            ):
                continue
        return entry, _key(frame, entry)
    return None


def _key(frame: FrameType, entry: KnownSync) -> str | None:
    for f in _outwards(frame, 12):
        path = f.f_code.co_filename.replace("\\", "/")
        for file, local in entry.key_locals:
            if path.endswith(file):
                value = f.f_locals.get(local)
                if isinstance(value, str):
                    return value
    return None


#: the tag of a library frame that is no known sync
LIBRARY_TAG = " [library]"


def tag_of(entry: KnownSync | None, key: str | None = None) -> str:
    """What a library frame carries in a sync's stack: `` [id]``, `` [id: key 'k']`` for a
    known sync, :data:`LIBRARY_TAG` for any other."""
    if entry is None:
        return LIBRARY_TAG
    return f" [{entry.id}: key {key!r}]" if key is not None else f" [{entry.id}]"


def is_library_frame(frame_text: str) -> bool:
    """Whether a stack entry is a library's frame (tagged `` [library]`` or `` [id…]``)."""
    return _TAG.search(frame_text) is not None


def known_sync(frame_text: str) -> tuple[KnownSync, str | None] | None:
    """The known sync a stack entry (``file:line in fn [id: ...]``) was tagged with, and the
    tag's detail (``key 'loss'``), or None."""
    m = _TAG.search(frame_text)
    if m is None:
        return None
    entry = next((e for e in KNOWN_SYNCS if e.id == m.group("id")), None)
    return None if entry is None else (entry, m.group("detail"))
