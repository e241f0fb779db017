"""Files to reports: paths → sources → reports.

The part between the files on disk and the analysis. :mod:`asynctrace.files.sources` is the one
loader (``load_source``: a trace or a session's records; ``find_sources``: a folder of ranks;
``source_kind``: what a file of a log folder is read as). :mod:`asynctrace.files.many` maps
the analysis (or the Parquet export) over many rank files (``analyze_many``, ``export_many``)
on this process, local worker processes (:mod:`~asynctrace.files._pool`) or a Dask cluster
(:mod:`~asynctrace.files._dask`), then reduces the reports run by run.
"""

__all__: list[str] = []
