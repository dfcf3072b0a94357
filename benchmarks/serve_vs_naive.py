"""Batching pays: `infertune serve` of the artifact `infertune tune --quick` wrote, against the naive FastAPI
server people write (one request, one forward pass, fp32 MiniLM; scripts/bench_serve_vs_naive.py), on the
same box, model family and texts, measured side by side by `infertune.tasks.embedding.peers.compare` (the same
closed-loop `infertune bench` point for both, in rounds whose order rotates). Concurrency 32, one short
mixed-length text per request. Goal: infertune serve >= 2x the naive server's items/s (median of the per-round ratios).

The suite (tests/integration/serve/test_serve_load.py) checks that the tuned artifact is served under this
load without errors, in batches, with the vectors it gives when run directly; this measures how much faster.
Pass --artifact (or BENCH_ARTIFACT) to skip the tune."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import ROOT, Figure, Report

NAME = "serve-vs-naive"
TUNE_BUDGET_S = 150  # the suite's quick tune budget (tests/integration/tune_helpers.py)


def tuned_artifact(out: Path, rep: Report) -> Path:
    """The artifact of `infertune tune --quick` on the built-in sample workload, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    argv = [
        sys.executable,
        "-m",
        "infertune.cli.main",
        "tune",
        "minilm",
        "--quick",
        "--time-budget",
        str(TUNE_BUDGET_S),
        "--out",
        str(out),
        "--json",
    ]
    print(f"{NAME}: tuning first: {' '.join(argv[2:])} (about {TUNE_BUDGET_S / 60:.1f} min)", flush=True)
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TUNE_BUDGET_S * 3)
    if r.returncode != 0 or not (out / "artifact" / "manifest.json").exists():
        raise RuntimeError(f"infertune tune exited {r.returncode}: {r.stderr[-1500:]}")
    res = json.loads(r.stdout)
    win = res["winner"]
    base = res["baseline"]
    for who, c in (("winner " + win["name"], win), ("baseline " + base["name"], base)):
        runs = (c.get("measurement") or {}).get("items_per_s_runs") or []
        rep.add(
            Figure(
                NAME,
                f"tune --quick {who}: items/s per timed pass",
                "items/s",
                runs,
                note="inside tune's worker, no HTTP",
            )
        )
    rep.add(
        Figure(NAME, "tune --quick wall time", "s", [res["wall_s"]], note=f"--time-budget {TUNE_BUDGET_S} s")
    )
    return out / "artifact"


def run(rep: Report, repeats: int, out: Path, artifact: str | None = None) -> None:
    from bench_serve_vs_naive import naive, ours, sample_texts

    from infertune.tasks.embedding.peers import compare

    art = Path(artifact or os.environ.get("BENCH_ARTIFACT") or tuned_artifact(out / "tune", rep))
    texts = [t for t in sample_texts(2) if len(t) <= 250]  # <= 252 tokens: nothing over MiniLM's 256
    a = ours(str(art), "--drain-s", "0")
    b = naive("minilm")
    try:
        a.wait_ready()
        b.wait_ready()
        got = compare(
            {"infertune serve": a.url, "naive FastAPI": b.url},
            texts,
            concurrency=32,
            duration=5,
            warmup=1,
            rounds=repeats,
            progress=lambda s: print(f"{NAME}: {s}", flush=True),
        )
    finally:
        b.stop()
        a.stop()
    ours_r, naive_r = got
    for r in got:
        if r.error:
            raise RuntimeError(f"{r.name}: {r.error}")
        rep.add(
            Figure(
                NAME,
                f"{r.name} ({art.name if r is ours_r else 'minilm fp32'}), c=32: items/s",
                "items/s",
                [x.items_per_s for x in r.rounds],
                note=f"errors {sum(x.errors for x in r.rounds)}",
            )
        )
        rep.add(
            Figure(NAME, f"{r.name}, c=32: P99 end to end", "ms", [x.p99_ms for x in r.rounds if x.p99_ms])
        )
    ratios = [
        x.items_per_s / max(y.items_per_s, 1e-9) for x, y in zip(ours_r.rounds, naive_r.rounds, strict=False)
    ]
    rep.add(
        Figure(
            NAME,
            "infertune serve / naive items/s, same round",
            "x",
            ratios,
            "median >= 2.0x",
            bool(ratios) and statistics.median(ratios) >= 2.0,
            digits=2,
            note=f"naive answers vs served: min cosine {naive_r.cosine_vs_first_min}",
        )
    )
