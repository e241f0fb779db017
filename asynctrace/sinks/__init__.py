"""The sinks ``asynctrace.trace()`` plugs into a capture session from its options.

Each is a :class:`~asynctrace.capture.sinks.Sink`: the records file (:mod:`.records`), the
TensorBoard events (:mod:`.tensorboard`), the live status line (:mod:`.live`), the exit summary
(:mod:`.summary`), the deep-mode annotator (:mod:`.annotate`) and the rank gather
(:mod:`.ranks`). They sit downstream of capture: they may use the analysis and the exporters,
which the capture session itself never imports.
"""

from asynctrace.sinks.annotate import AnnotateSink
from asynctrace.sinks.live import LiveSink
from asynctrace.sinks.ranks import RankGatherSink
from asynctrace.sinks.records import RecordsSink
from asynctrace.sinks.summary import SummarySink
from asynctrace.sinks.tensorboard import TensorBoardSink

__all__ = [
    "AnnotateSink",
    "LiveSink",
    "RankGatherSink",
    "RecordsSink",
    "SummarySink",
    "TensorBoardSink",
]
