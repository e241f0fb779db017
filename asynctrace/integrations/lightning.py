"""Lightning: ``Trainer(callbacks=[AsyncTraceCallback()])`` traces every ``fit``.

Each ``trainer.fit(...)`` is one asynctrace session; each training batch is one step; the
hooks between are NVTX ranges in domain ``asynctrace`` (``train_batch``, ``backward``,
``optimizer_step``, ``validation``), so Nsight Systems shows them under the step ranges.
The session starts at the first training batch (setup and the sanity check are not steps),
ends at ``on_fit_end``, and ends with the error in ``on_exception`` when training fails. Under
DDP every rank traces itself and writes its own ``rank<N>`` records file.

Needs ``lightning`` (``pip install 'asynctrace[lightning]'``); the older ``pytorch_lightning``
package name is used where ``lightning`` is not installed.
"""

from __future__ import annotations

from typing import Any

from asynctrace.integrations._driver import DrivingCallback

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - depends on what the user installed
    try:
        from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef,assignment]
    except ImportError:
        raise ImportError(
            "asynctrace.integrations.lightning needs Lightning: pip install 'asynctrace[lightning]'"
        ) from None

__all__ = ["AsyncTraceCallback"]


class AsyncTraceCallback(DrivingCallback, Callback):  # type: ignore[misc]
    """A Lightning callback that runs each ``fit`` in an asynctrace session.

    ``name`` (default ``"lightning"``) and ``dir`` name the records file
    (``<dir>/<name>.<host>.<pid>[.rank<N>]...``); ``ranges=False`` turns off the per-hook NVTX
    ranges; every other option of :func:`asynctrace.trace` (:class:`~asynctrace.TraceOptions`:
    ``device``, ``detect_syncs``, ``profile``, ``tensorboard``, ``live``, ``nsys_capture``, ...)
    goes to the session, with steps counted in training batches, except ``optimizer_steps``
    (each batch already is a step). After ``fit`` returns, :attr:`session` holds the session:
    ``callback.session.summary()`` and ``callback.session.records_path``.
    """

    default_name = "lightning"

    @property
    def state_key(self) -> str:
        # several callbacks with different names may trace different trainers
        return f"AsyncTraceCallback[{self._driver.name}]"

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._driver.begin()

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._driver.batch_start()
        self._driver.push("train_batch")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        # with several optimizers (manual optimization), the previous optimizer's step is over
        self._driver.pop("optimizer_step")
        self._driver.push("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._driver.pop("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        # Lightning has no "after optimizer step" hook: the range runs to the next backward,
        # the next optimizer's step or the batch's end, whichever comes first
        self._driver.pop("optimizer_step")
        self._driver.push("optimizer_step")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._driver.pop("train_batch")
        self._driver.batch_end()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._driver.push("validation")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._driver.pop("validation")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._driver.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._driver.close(exception)
