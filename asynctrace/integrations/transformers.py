"""Hugging Face ``Trainer``: ``Trainer(..., callbacks=[AsyncTraceCallback()])``.

Each ``trainer.train()`` is one asynctrace session; each optimizer step of the Trainer (one
``on_step_begin``/``on_step_end`` pair: with gradient accumulation, all its micro-batches) is
one step; ``train_step`` and ``optimizer_step`` are NVTX ranges in domain ``asynctrace``. The
session starts at the first step and ends at ``on_train_end``.

The Trainer has no hook for an exception, so a ``train()`` that raises leaves the session open
until the callback is told. Use the callback as a context manager to close it in every case::

    with AsyncTraceCallback() as cb:
        Trainer(model, args, train_dataset=ds, callbacks=[cb]).train()

(a later ``train()``, with this callback or a new one, also closes a session left open by a
failed one first).

Needs ``transformers`` and ``accelerate`` (``pip install 'asynctrace[transformers]'``).
"""

from __future__ import annotations

from typing import Any

from asynctrace.integrations._driver import DrivingCallback

try:
    from transformers import TrainerCallback
except ImportError:  # pragma: no cover - depends on what the user installed
    raise ImportError(
        "asynctrace.integrations.transformers needs Hugging Face transformers: "
        "pip install 'asynctrace[transformers]'"
    ) from None

__all__ = ["AsyncTraceCallback"]


class AsyncTraceCallback(DrivingCallback, TrainerCallback):  # type: ignore[misc]
    """A ``transformers.TrainerCallback`` that runs each ``train()`` in an asynctrace session.

    ``name`` (default ``"transformers"``) and ``dir`` name the records file; ``ranges=False``
    turns off the NVTX hook ranges; every other option of :func:`asynctrace.trace`
    (:class:`~asynctrace.TraceOptions`: ``device``, ``detect_syncs``, ``profile``,
    ``tensorboard``, ``live``, ``nsys_capture``, ...) goes to the session, with steps counted in
    the Trainer's optimizer steps, except ``optimizer_steps`` (each step already is one). After
    ``train()``, :attr:`session` holds the session (``.summary()``, ``.records_path``).
    """

    default_name = "transformers"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.begin()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.batch_start()
        self._driver.push("train_step")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.push("optimizer_step")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.pop("optimizer_step")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.pop("train_step")
        self._driver.batch_end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.close()

    def close(self, exc: BaseException | None = None) -> None:
        """End a session left open (``train()`` raised); ``exc`` is recorded as its error."""
        self._driver.close(exc)

    def __enter__(self) -> AsyncTraceCallback:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._driver.close(exc)
