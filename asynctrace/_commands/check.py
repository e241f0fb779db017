"""``asynctrace check script.py [args…]``: run a script unchanged and report its hidden syncs.

``asynctrace check -m pkg.train [args…]`` runs a module instead, as ``python -m`` would.

The script runs as ``__main__`` (``sys.argv`` = the script and its arguments, its folder first on
``sys.path``) inside ``asynctrace.trace(optimizer_steps=True, detect_syncs="lint")``: each
``optimizer.step()`` ends a step, and every host-device synchronization — or, on CPU, every op
that would synchronize on an accelerator — is counted per step with its file:line.

Options go before the script; ``--max-syncs-per-step`` and ``--json`` are also recognised after
it, up to the first ``--``: that ``--`` is dropped and everything after it goes to the script
unchanged (``check x.py -- --json`` gives the script ``--json``), as with ``run``.

Exit status: the script's own when it fails; else 1 when a step had more syncs than
``--max-syncs-per-step``; else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from asynctrace._commands._script import (
    add_script_argument,
    resolve_target,
    run_script,
    stdout_to_stderr,
)
from asynctrace._commands._sync_rows import site_rows
from asynctrace.analysis.diagnosis import Finding
from asynctrace.errors import AsyncTraceError
from asynctrace.records import Note, StepRecord, SyncSite
from asynctrace.render.output import output_folder, utf8
from asynctrace.render.printable import printable

if TYPE_CHECKING:
    from asynctrace.analysis.budget import SyncBudget
    from asynctrace.analysis.report import Report

__all__ = ["CHECK_SCHEMA_VERSION", "CheckResult", "add_arguments", "run", "split_trailing_options"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-syncs-per-step",
        type=int,
        metavar="N",
        default=None,
        help="exit with status 1 when any step synchronizes more than N times",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--detect",
        choices=("lint", "cuda", "auto"),
        default="lint",
        help="lint: ops that would sync on an accelerator, works on CPU (default); "
        "cuda: torch's CUDA sync hooks; auto: cuda where available, else nothing",
    )
    parser.add_argument(
        "--dir", default="traces", help="where the session records go (default: traces)"
    )
    add_script_argument(
        parser,
        help="the Python script to run, then its arguments; --json and --max-syncs-per-step "
        "among them are check's, up to the first --, which is dropped: everything after it goes "
        "to the script unchanged",
    )


def split_trailing_options(args: Sequence[str]) -> tuple[list[str], int | None, bool]:
    """Take ``--max-syncs-per-step N`` and ``--json`` out of the script's arguments.

    Returns (the script's arguments, the budget found or None, whether --json was found).
    Nothing after a ``--`` is taken; the ``--`` itself is dropped.
    """
    rest: list[str] = []
    budget: int | None = None
    as_json = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i + 1 :])
            break
        if a == "--json":
            as_json = True
        elif a == "--max-syncs-per-step" or a.startswith("--max-syncs-per-step="):
            if "=" in a:
                value = a.split("=", 1)[1]
            else:
                if i + 1 >= len(args):
                    raise AsyncTraceError("--max-syncs-per-step needs a number")
                i += 1
                value = args[i]
            try:
                budget = int(value)
            except ValueError:
                raise AsyncTraceError(
                    f"--max-syncs-per-step needs a number, got {value!r}"
                ) from None
        else:
            rest.append(a)
        i += 1
    return rest, budget, as_json


#: ``schema_version`` of ``check --json`` (docs/report-json.md); CI scripts parse it.
#: 3: ``diagnosis`` (the report's) in place of ``verdict``; 2: ``notes`` are ``{"code", "text"}``
#: objects (1: strings)
CHECK_SCHEMA_VERSION = 3


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``asynctrace check`` found; ``--json`` prints this."""

    schema_version: int = CHECK_SCHEMA_VERSION
    script: str
    exit_code: int
    #: the script's own status (0 when it ran to the end)
    script_exit_code: int
    device: str
    asynchronous: bool
    detect: str
    steps: int
    #: {site, op, count, steps, per_step, wait_ns, stack, from, known}, most frequent first;
    #: ``per_step``: the count over the steps the budget judges
    sync_sites: list[dict[str, Any]]
    #: the session's report's diagnosis, costliest first: ``diagnosis[0]`` is the headline
    #: ``asynctrace report`` shows for its records
    diagnosis: list[Finding]
    max_syncs_per_step: int | None
    #: steps with more syncs than the budget
    over_budget_steps: int
    max_syncs_in_a_step: int
    records_path: str | None
    notes: list[Note] = msgspec.field(default_factory=list)


def _display(site: str, cwd: str) -> str:
    """``site`` relative to ``cwd`` (where the command was typed) when it lies under it."""
    path, sep, line = site.rpartition(":")
    if not sep:
        return site
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return site
    return f"{rel}:{line}" if not rel.startswith("..") else site


#: said when no step completed and :func:`~asynctrace.analysis.budget.sync_budget` judged the run
#: as one step
_WHOLE_RUN_NOTE = Note(
    code="whole-run-one-step",
    text="no optimizer.step() completed a step: the whole run is judged as one step",
)


def _window_note(judged: int, steps: int) -> Note:
    return Note(
        code="budget-over-window",
        text=f"the records could not be written: the budget judged the last {judged} of "
        f"{steps} steps, the ones the summary keeps",
    )


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.budget import sync_budget
    from asynctrace.tracing import trace

    script_args, budget, as_json = split_trailing_options(args.args)
    budget = budget if budget is not None else args.max_syncs_per_step
    as_json = as_json or args.json
    if budget is not None and budget < 0:
        raise AsyncTraceError(f"--max-syncs-per-step must be >= 0, got {budget}")
    script = resolve_target(args)
    # absolute, like the sites' display base: the script may change its working folder
    folder = output_folder(args.dir, option="--dir").absolute()
    cwd = os.getcwd()

    session = trace(
        utf8(script.stem),  # a name that is not UTF-8 cannot go into the records
        dir=folder,
        optimizer_steps=True,
        detect_syncs=args.detect,
        print_summary=False,
    )
    # with --json, stdout carries only the result: the script's prints go to stderr
    out = stdout_to_stderr() if as_json else contextlib.nullcontext()
    with out:
        status = run_script(
            script, script_args, around=session, keep_main=getattr(args, "owns_process", False)
        )

    report = session.summary()
    # the headline (cpu-synchronous) already says the CPU runs synchronously
    notes = [n for n in report.notes if n.code != "cpu-synchronous"]
    steps, sites = _checked_run(session.records_path, report, cwd)
    judged = sync_budget(steps, max_syncs_per_step=budget, sync_sites=sites)
    # the sites' counts are over the steps they were counted in: the records', else the run's
    counted = judged.steps
    if judged.whole_run:
        notes.append(_WHOLE_RUN_NOTE)
    elif judged.steps < report.source.events:
        # no records: the summary kept the last steps only, but counted the sites over all
        notes.append(_window_note(judged.steps, report.source.events))
        counted = report.source.events
    sites = sorted(sites, key=lambda s: (-s.count, s.site))
    exit_code = status if status != 0 else (1 if judged.exceeded else 0)

    result = CheckResult(
        # as typed: "-m pkg.train" for a module
        script=str(args.script) if args.module is None else f"-m {args.module}",
        exit_code=exit_code,
        script_exit_code=status,
        device=report.source.device,
        asynchronous=report.source.asynchronous,
        detect=args.detect,
        steps=report.source.events,
        sync_sites=site_rows(sites, steps=counted),
        diagnosis=report.diagnosis,
        max_syncs_per_step=budget,
        over_budget_steps=judged.over_budget_steps,
        max_syncs_in_a_step=judged.max_syncs_in_a_step,
        # said as --dir was given, from where the command was typed
        records_path=(
            str(Path(args.dir) / session.records_path.name)
            if session.records_path is not None
            else None
        ),
        notes=notes,
    )
    if as_json:
        print(json.dumps(msgspec.to_builtins(result), indent=2))
    else:
        _print_text(result, sites, judged)
    return exit_code


def _checked_run(
    records_path: Path | None, report: Report, cwd: str
) -> tuple[Sequence[StepRecord], list[SyncSite]]:
    """The run's steps and its sync sites (shown from ``cwd``): from the records the session
    wrote, else (records could not be written: a note says why) the summary's, whose steps
    are its last window (``report.steps``)."""
    from asynctrace.files.sources import load_source
    from asynctrace.records import Records

    if records_path is not None:
        records = load_source(records_path)
        assert isinstance(records, Records)  # the session wrote them
        sites = [
            msgspec.structs.replace(
                s, site=_display(s.site, cwd), stack=[_display_frame(f, cwd) for f in s.stack]
            )
            for s in records.syncs
        ]
        return records.steps, sites
    sites = [msgspec.structs.replace(s, site=_display(s.site, cwd)) for s in report.sync_sites]
    return report.steps, sites


def _display_frame(frame: str, cwd: str) -> str:
    site, sep, func = frame.partition(" in ")
    return f"{_display(site, cwd)}{sep}{func}"


def _print_text(r: CheckResult, sites: Sequence[SyncSite], judged: SyncBudget) -> None:
    """``r`` as text: the headline as ``asynctrace report`` shows it, the sync sites (``sites``,
    the rows' own) with the fix of each library sync known, the budget over the steps
    ``judged`` counts, the notes."""
    from asynctrace.render.diagnosis import diagnosis_text
    from asynctrace.render.text import known_fix_lines

    # paths, sites and ops come from files: control characters are shown escaped
    p = printable
    print(
        f"asynctrace check {p(r.script)}: {r.steps} steps (one per optimizer.step()) on "
        f"{p(r.device)}, sync detection: {p(r.detect)}"
    )
    for line in diagnosis_text(r.diagnosis):
        print(p(line))
    if r.sync_sites:
        rows = [(p(s["site"]), s["count"], s["per_step"], p(s["op"])) for s in r.sync_sites]
        width = max(len(site) for site, *_ in rows)
        print("sync sites:")
        print(f"  {'site':<{width}}  {'count':>7}  {'per step':>8}  op")
        for (site, count, per_step, op), s in zip(rows, r.sync_sites, strict=True):
            print(f"  {site:<{width}}  {count:>7}  {per_step:>8.2f}  {op}")
            # a known sync's user frame is on its fix's line, below
            if s["from"] is not None and s["known"] is None:
                print(f"      from {p(s['from'])}")
        for line in known_fix_lines(sites):
            print(f"  {p(line)}")
    else:
        print("sync sites: none")
    if r.max_syncs_per_step is not None:
        state = "exceeded" if r.over_budget_steps else "kept"
        print(
            f"budget {state}: {r.over_budget_steps} of {judged.steps} step(s) had more than "
            f"{r.max_syncs_per_step} sync(s) (most in one step: {r.max_syncs_in_a_step})"
        )
    for note in r.notes:
        print(f"note: {p(note.text)}")
    if r.records_path is not None:
        print(f"records: {p(r.records_path)}")
    if r.script_exit_code:
        print(f"the script exited with status {r.script_exit_code}")
