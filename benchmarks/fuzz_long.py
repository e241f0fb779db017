"""The long fuzz run of the readers (not a test: run it by hand or nightly).

    python benchmarks/fuzz_long.py --cases 100000            # seeded random mutations
    python benchmarks/fuzz_long.py --engine hypothesis --cases 50000
    python benchmarks/fuzz_long.py --engine atheris -- -runs=200000   # coverage-guided

Every case is a mutated Kineto trace, Nsight Systems export or session records file (the
mutations of ``tests/fuzz/_mutators.py``, seeded from ``tests/fuzz/corpus`` and the small real
traces in ../shared/traces when present). The contract is the CI fuzz tests' one: a report or
``TraceFormatError``, within the per-case deadline. A case that breaks it is written to
``--out`` (bytes, plus the ops that made it) and counted; the run goes on. The summary table at
the end is what docs/reliability.md quotes.

The ``atheris`` engine needs ``pip install atheris``; without it the script says so and falls
back to the seeded random engine.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import KINETO_DIR, NSYS_DIR  # noqa: E402
from tests.fuzz._mutators import (  # noqa: E402
    KINETO_OPS,
    NSYS_OPS,
    RECORDS_OPS,
    Op,
    check_records_file,
    check_trace_file,
    kineto_corpus_seeds,
    kineto_shared_seeds,
    mutate_kineto,
    mutate_nsys,
    mutate_records,
    nsys_corpus_seeds,
    nsys_shared_seeds,
    records_corpus_seeds,
)

__all__ = ["main"]

_U32 = 2**32


class _Fuzzer:
    def __init__(self, out: Path) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="asynctrace-fuzz-"))
        self.out = out
        self.kineto = kineto_corpus_seeds() + (
            kineto_shared_seeds(KINETO_DIR) if KINETO_DIR.is_dir() else []
        )
        self.nsys = nsys_corpus_seeds() + (nsys_shared_seeds(NSYS_DIR) if NSYS_DIR.is_dir() else [])
        self.records = [s for s in records_corpus_seeds() if s[0].startswith("seed_")]
        self.outcomes: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self.per_family: Counter[str] = Counter()
        self.slowest_s = 0.0

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # one case ---------------------------------------------------------------------------------
    def case(self, family: int, seed: int, ops: list[Op]) -> None:
        fam = ("kineto", "nsys", "records")[family % 3]
        self.per_family[fam] += 1
        if fam == "kineto":
            name, doc = self.kineto[seed % len(self.kineto)]
            path = self.tmp / "case.json"
            path.write_bytes(mutate_kineto(doc, ops))
            run: Callable[[Path], str] = check_trace_file
        elif fam == "nsys":
            src = self.nsys[seed % len(self.nsys)]
            name = src.name
            path = self.tmp / "case.sqlite"
            path.unlink(missing_ok=True)
            mutate_nsys(src, path, ops)
            run = check_trace_file
        else:
            name, data = self.records[seed % len(self.records)]
            path = self.tmp / "case.records.jsonl"
            path.write_bytes(mutate_records(data, ops))
            run = check_records_file
        t0 = time.perf_counter()
        try:
            self.outcomes[run(path)] += 1
        except Exception as e:  # the contract is broken: keep the case, go on
            frames = [
                f for f in traceback.extract_tb(e.__traceback__) if "asynctrace" in f.filename
            ]
            where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
            sig = f"{type(e).__name__} at {where}"
            self.outcomes["CRASH"] += 1
            if not self.crashes[sig]:
                self.out.mkdir(parents=True, exist_ok=True)
                n = len(self.crashes)
                shutil.copyfile(path, self.out / f"crash{n}_{path.name}")
                (self.out / f"crash{n}.json").write_text(
                    json.dumps(
                        {
                            "signature": sig,
                            "seed": name,
                            "ops": [o.__dict__ for o in ops],
                            "error": str(e)[:2000],
                        },
                        indent=1,
                    )
                )
                print(f"new crash: {sig} (seed {name}): {str(e)[:200]}", flush=True)
            self.crashes[sig] += 1
        self.slowest_s = max(self.slowest_s, time.perf_counter() - t0)

    def ops_from(self, family: int, draw: Callable[[int], int]) -> list[Op]:
        kinds = (KINETO_OPS, NSYS_OPS, RECORDS_OPS)[family % 3]
        return [
            Op(kinds[draw(len(kinds))], draw(_U32), draw(_U32), draw(_U32))
            for _ in range(1 + draw(3))
        ]

    def summary(self, seconds: float) -> str:
        n = sum(self.outcomes.values())
        rows = [
            f"cases: {n} in {seconds:.0f} s ({1000 * seconds / max(n, 1):.1f} ms/case, slowest "
            f"{self.slowest_s:.2f} s)",
            f"by family: {dict(self.per_family)}",
            f"outcomes: {dict(self.outcomes)}",
            f"crashes: {dict(self.crashes) or 'none'}",
        ]
        return "\n".join(rows)


def _random_engine(f: _Fuzzer, cases: int, seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    for _ in range(cases):
        if time.monotonic() > end:
            break
        family = rng.randrange(3)
        f.case(family, rng.randrange(_U32), f.ops_from(family, rng.randrange))


def _hypothesis_engine(f: _Fuzzer, cases: int, seed: int) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    @hseed(seed)
    @settings(
        max_examples=cases, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(family=st.integers(0, 2), seed=st.integers(0, _U32 - 1), data=st.data())
    def run(family: int, seed: int, data: Any) -> None:
        f.case(family, seed, f.ops_from(family, lambda n: data.draw(st.integers(0, n - 1))))

    run()


def _atheris_engine(f: _Fuzzer, argv: list[str]) -> bool:
    try:
        import atheris
    except ImportError:
        print("atheris is not installed (pip install atheris): using the random engine")
        return False

    def one_input(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        family = fdp.ConsumeIntInRange(0, 2)
        seed = fdp.ConsumeIntInRange(0, _U32 - 1)
        f.case(family, seed, f.ops_from(family, lambda n: fdp.ConsumeIntInRange(0, n - 1)))
        # libFuzzer ends the process itself (no atexit): report as we go
        n = sum(f.outcomes.values())
        if n % 1000 == 0:
            print(f.summary(time.perf_counter() - t0), flush=True)

    t0 = time.perf_counter()

    # the loaders are imported lazily by load(); import them before instrumenting
    import asynctrace.traces.kineto
    import asynctrace.traces.nsys  # noqa: F401

    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("random", "hypothesis", "atheris"), default="random")
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=3600.0, help="random engine: time cap")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-crashes"))
    parser.add_argument("rest", nargs="*", help="after --: arguments for libFuzzer (atheris)")
    args = parser.parse_args(argv)
    f = _Fuzzer(args.out)
    t0 = time.perf_counter()
    try:
        if args.engine == "atheris" and _atheris_engine(f, args.rest):
            return 0
        if args.engine == "hypothesis":
            _hypothesis_engine(f, args.cases, args.seed)
        else:
            _random_engine(f, args.cases, args.seconds, args.seed)
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        print(f.summary(time.perf_counter() - t0))
        f.close()
    return 1 if f.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
