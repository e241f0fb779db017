"""``Benchmark``: the book's timer (``d2l.Benchmark``), plus when the device finished.

``with Benchmark("torch"): ...`` prints ``torch: 0.0013 sec, done 0.0049 sec``:

* **returned** — host wall time from entering the block until Python got control back at its
  end; what ``d2l.Benchmark`` prints. On CUDA this is the time to *queue* the work.
* **done** — from entering the block until the device executed a marker recorded at its end;
  what the book needed a hand-placed ``torch.cuda.synchronize()`` for.

Markers are recorded at entry and exit through the device layer, and the only wait is for the
exit marker, after the block has run: the block's own synchronization behaviour is unchanged.
On the CPU backend every op finishes before it returns, so done equals returned, and the line
says so rather than printing a second, meaningless figure.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Any, Generic, TextIO, TypeVar, overload

from asynctrace.capture.devices import Device, get_device
from asynctrace.errors import CaptureError

__all__ = ["Benchmark", "BenchmarkResult"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class BenchmarkResult:
    """The two times of one ``Benchmark`` block, in ns on the device layer's host clock."""

    description: str
    #: entry → end of the block on the host ("Python got control back")
    returned_ns: int
    #: entry → the device executed the exit marker (== returned_ns on a synchronous backend)
    done_ns: int
    #: entry marker executed → exit marker executed: the device's span for the block's work;
    #: None on a synchronous backend, where it is the host time
    device_ns: int | None
    #: entry → the device executed the entry marker: work queued before the block ran first
    backlog_ns: int | None
    device_kind: str
    asynchronous: bool

    @property
    def returned_s(self) -> float:
        return self.returned_ns / 1e9

    @property
    def done_s(self) -> float:
        return self.done_ns / 1e9

    def line(self) -> str:
        """The printed line: ``torch: 0.0013 sec, done 0.0049 sec``."""
        head = f"{self.description}: {self.returned_s:.4f} sec"
        if not self.asynchronous:
            kind = self.device_kind
            return f"{head}, done {self.done_s:.4f} sec (= returned: {kind} is synchronous)"
        return f"{head}, done {self.done_s:.4f} sec"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Figure(Generic[_T]):
    """A figure of :attr:`Benchmark.result`, read on the benchmark itself (``b.done_ns``): a
    :class:`CaptureError` until the block has completed."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Figure[_T]: ...

    @overload
    def __get__(self, obj: Benchmark, owner: type) -> _T: ...

    def __get__(self, obj: Benchmark | None, owner: type) -> _Figure[_T] | _T:
        if obj is None:
            return self
        value: _T = getattr(obj._need(), self._name)
        return value


class Benchmark:
    """Drop-in for ``d2l.Benchmark`` that also reports when the device finished the work.

    ``device``: a device spec ("cuda", "cpu"), a :class:`Device`, or None for the default
    (CUDA if available). ``file``: where the line goes; None prints nothing.
    """

    def __init__(
        self,
        description: str = "Done",
        *,
        device: str | Device | None = None,
        file: TextIO | None = sys.stdout,
    ) -> None:
        self.description = description
        self.device: Device = get_device(device)
        self.file = file
        self.result: BenchmarkResult | None = None
        self._t0 = 0
        self._ev0: Any = None

    def __enter__(self) -> Benchmark:
        dev = self.device
        self._t0 = dev.host_now_ns()
        self._ev0 = dev.record()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        dev = self.device
        t1 = dev.host_now_ns()
        if exc_type is not None:
            return  # no figures for a block that did not finish; don't block the unwinding
        ev1 = dev.record()
        returned = t1 - self._t0
        if dev.asynchronous:
            dev.wait(ev1)
            end = dev.executed_at_ns(ev1)
            start = dev.executed_at_ns(self._ev0)
            # the exit marker cannot execute before the host reached it
            done = max(end - self._t0, returned)
            device_ns: int | None = end - start
            backlog_ns: int | None = max(0, start - self._t0)
        else:
            done, device_ns, backlog_ns = returned, None, None
        self.result = BenchmarkResult(
            description=self.description,
            returned_ns=returned,
            done_ns=done,
            device_ns=device_ns,
            backlog_ns=backlog_ns,
            device_kind=dev.kind,
            asynchronous=dev.asynchronous,
        )
        if self.file is not None:
            print(self.result.line(), file=self.file)

    def _need(self) -> BenchmarkResult:
        if self.result is None:
            raise CaptureError("Benchmark figures exist once its `with` block has completed")
        return self.result

    returned_ns = _Figure[int]()
    done_ns = _Figure[int]()
    returned_s = _Figure[float]()
    done_s = _Figure[float]()
