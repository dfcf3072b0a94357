"""`make bench`: the speed claims, measured side by side and repeated, each printed as median (min, max, n)
with its unit; exit 1 when a stated goal is missed or a benchmark could not measure, 0 otherwise (a benchmark
that needs what this box lacks, a GPU or `make vllm-env`, is skipped and says why).

    .venv/bin/python benchmarks/run.py [--only client,slo-repeat] [--repeats 3] [--out runs/bench-suite/STAMP]
                                       [--artifact runs/quick/artifact] [--verbose]

Run it on a quiet box: these figures depend on how busy the box is, which is why they are not in `make test`
(benchmarks/README.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Report  # noqa: E402

# cheapest first: a broken setup shows in the first minute
ORDER = ["client", "serve-overload", "slo-repeat", "serve-vs-naive", "vllm-streams", "gpu"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(ORDER)}")
    ap.add_argument("--repeats", type=int, default=3, help="n per figure (default 3)")
    ap.add_argument("--out", type=Path, default=None, help="results.json and the tune runs go here")
    ap.add_argument(
        "--artifact", default=None, help="serve-vs-naive: serve this artifact instead of tuning one"
    )
    ap.add_argument("--verbose", action="store_true", help="show the servers' own logs")
    a = ap.parse_args()
    only = [x for x in a.only.split(",") if x] or ORDER
    unknown = set(only) - set(ORDER)
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(ORDER)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not a.verbose:
        os.environ.setdefault(
            "INFERTUNE_QUIET", "1"
        )  # scripts/bench_serve_vs_naive.py: servers' logs to /dev/null
    out = a.out or ROOT / "runs" / "bench-suite" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)

    from infertune.hardware.fingerprint import fingerprint

    env = fingerprint().model_dump(mode="json")
    load0 = os.getloadavg()
    print(
        f"make bench: {', '.join(only)}; n={a.repeats}; CPU {env['cpu_model']}, "
        f"{os.cpu_count()} cores; load average {load0[0]:.2f} at start; results in {out}",
        flush=True,
    )
    rep = Report()
    t0 = time.monotonic()
    for name in ORDER:
        if name not in only:
            continue
        t = time.monotonic()
        print(f"\n--- {name} ---", flush=True)
        try:
            if name == "client":
                import client

                client.run(rep, a.repeats)
            elif name == "serve-overload":
                import serve_overload

                serve_overload.run(rep, a.repeats)
            elif name == "slo-repeat":
                import slo_repeat

                slo_repeat.run(rep, a.repeats)
            elif name == "serve-vs-naive":
                import serve_vs_naive

                serve_vs_naive.run(rep, a.repeats, out, a.artifact)
            elif name == "vllm-streams":
                import vllm_streams

                vllm_streams.run(rep, a.repeats)
            elif name == "gpu":
                import gpu

                gpu.run(rep, a.repeats, out)
        except Exception as e:  # noqa: BLE001 - one benchmark failing must not hide the others' figures
            traceback.print_exc()
            rep.fail(name, f"{type(e).__name__}: {e}"[:500])
        print(f"--- {name}: {time.monotonic() - t:.0f} s ---", flush=True)
    load1 = os.getloadavg()
    env["load_average"] = {"start": load0, "end": load1}
    rep.write(out / "results.json", env)
    print(rep.summary())
    print(
        f"wall {time.monotonic() - t0:.0f} s; load average (1 min) {load0[0]:.2f} at start, "
        f"{load1[0]:.2f} at end "
        f"on {os.cpu_count()} cores; {out / 'results.json'}"
    )
    return 1 if rep.missed or rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
