"""What every benchmark here shares: figures reported as median (min-max, n) with a unit, goals checked on
them, and the servers the benchmarks measure (the test fixtures' stub and fake-backend artifacts, and
`infertune serve` through scripts/bench_serve_vs_naive.py), so a benchmark measures what the suite runs."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (
    ROOT / "src",
    ROOT / "scripts",
    ROOT / "tests" / "integration" / "bench",
    ROOT / "tests" / "integration" / "serve",
    ROOT / "tests" / "integration",
):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def spread(values: list[float], unit: str, digits: int = 1) -> str:
    """'12.3 unit (min 11.0, max 13.1, n=3)': the median, the range and n."""
    if not values:
        return "n/a (n=0)"
    f = f"{{:,.{digits}f}}"
    med = statistics.median(values)
    return (
        f"{f.format(med)} {unit} (min {f.format(min(values))}, max {f.format(max(values))}, n={len(values)})"
    )


@dataclass
class Figure:
    bench: str
    name: str
    unit: str
    values: list[float]
    goal: str = ""  # what must hold, in words; empty for a figure reported without a goal
    met: bool | None = None  # None: no goal, or not measured
    note: str = ""
    digits: int = 1

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def line(self) -> str:
        verdict = {True: "MET", False: "MISSED", None: ""}[self.met] if self.goal else ""
        goal = f"  goal: {self.goal} -> {verdict}" if self.goal else ""
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.bench}: {self.name}: {spread(self.values, self.unit, self.digits)}{goal}{note}"


@dataclass
class Report:
    """The figures of one `make bench` run; printed as they come and once more at the end."""

    figures: list[Figure] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    def add(self, fig: Figure) -> Figure:
        self.figures.append(fig)
        print(fig.line(), flush=True)
        return fig

    def skip(self, bench: str, why: str) -> None:
        self.skipped.append((bench, why))
        print(f"{bench}: skipped: {why}", flush=True)

    def fail(self, bench: str, why: str) -> None:
        self.failed.append((bench, why))
        print(f"{bench}: FAILED to measure: {why}", flush=True)

    @property
    def missed(self) -> list[Figure]:
        return [f for f in self.figures if f.goal and f.met is False]

    def summary(self) -> str:
        lines = ["", "=" * 100, "make bench: median (min, max, n) per figure", "=" * 100]
        lines += [f.line() for f in self.figures]
        lines += [f"{b}: skipped: {why}" for b, why in self.skipped]
        lines += [f"{b}: FAILED to measure: {why}" for b, why in self.failed]
        goals = [f for f in self.figures if f.goal]
        lines.append(
            f"goals: {sum(f.met is True for f in goals)} of {len(goals)} met"
            + (f"; missed: {', '.join(f'{f.bench}/{f.name}' for f in self.missed)}" if self.missed else "")
            + (f"; {len(self.failed)} benchmark(s) failed to measure" if self.failed else "")
        )
        return "\n".join(lines)

    def write(self, path: Path, environment: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "environment": environment,
            "figures": [{**asdict(f), "median": f.median} for f in self.figures],
            "skipped": self.skipped,
            "failed": self.failed,
        }
        path.write_text(json.dumps(doc, indent=2))


# --- servers ---------------------------------------------------------------------------------------------
@contextmanager
def stub(mode: str = "fast", **flags) -> Iterator[str]:
    """tests/fixtures/openai_stub.py on a free port (the server the bench tests load), stopped afterwards."""
    from bench_helpers import STUB, free_port, stop, wait_port

    port = free_port()
    args = [sys.executable, str(STUB), "--port", str(port), "--mode", mode]
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, 15)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def fake_artifact(root: Path, us_per_token: int) -> Path:
    """The serve tests' fake-backend artifact (forward sleeps us_per_token per padded token, no torch)."""
    from serve_helpers import write_fake_artifact

    return write_fake_artifact(root, us_per_token)
