"""The table embed_compiled.sh ends with: every candidate of the tune (status, items/s, compile, share of the
peak), the served rate at 32 inputs per request and the forward-only ceilings. Usage: embed_table.py OUT WHICH"""

import json
import sys
from pathlib import Path


def load(p: Path):
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def main(out: str, which: str) -> None:
    o = Path(out)
    t = load(o / f"tune_{which}.json") or {}
    w = t.get("winner") or {}
    eager = next((c for c in t.get("candidates", []) if c["name"].startswith("torch-eager/bf16/")
                  and c.get("items_per_s")), None)
    print(f"\n## {which}: tune wall {t.get('wall_s')} s, winner {w.get('name')} at {w.get('items_per_s')} items/s")
    if eager and w.get("items_per_s"):
        print(f"winner / eager bf16 (same run): {w['items_per_s'] / eager['items_per_s']:.2f}x")
    for line in (t.get("ladder") or {}).get("summary", []) if isinstance(t.get("ladder"), dict) else []:
        print("ladder:", line)
    print("| candidate | status | items/s | P99 ms | cos min | compile s (cache) | % of peak | reason |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for c in t.get("candidates", []):
        ex = c.get("executed") or {}
        if ex.get("cuda_graphs") or ex.get("compiled"):
            g = ex.get("cuda_graphs") or {}
            print(f"  {c['name']}: graphs on={g.get('on')} packed={g.get('packed')} captured={g.get('captured')} "
                  f"compiled={json.dumps((ex.get('compiled') or {}).get('first_compile'))}")
    for c in t.get("candidates", []):
        comp = c.get("compile") or {}
        peak = c.get("peak") or {}
        frac = peak.get("fraction")
        acc = c.get("accuracy") or {}
        lat = (c.get("latency_ms") or {}).get("p99")
        print(f"| {c['name']} | {c['status']} | {c.get('items_per_s') or 0:,.0f} | {lat or 0:.0f} | "
              f"{acc.get('cosine_min') or 0:.5f} | {comp.get('seconds', '')} {comp.get('cache', '')} | "
              f"{'' if frac is None else f'{frac:.0%}'} | {(c.get('reason') or c.get('dropped') or '')[:90]} |")
    b = load(o / f"bench32_{which}.json")
    ca, ce = load(o / f"ceiling_art_{which}.json"), load(o / f"ceiling_eager_{which}.json")
    for p in (b or {}).get("points", []):
        items = p["achieved_rps"] * 32
        print(f"served 32 inputs/request c={(p.get('offered') or {}).get('concurrency')}: {items:,.0f} items/s, P50 "
              f"{p['latency_ms'].get('p50')} ms, P99 {p['latency_ms'].get('p99')} ms, valid {p['valid']}")
        for name, c in (("artifact", ca), ("eager bf16", ce)):
            if c:
                print(f"  ceiling {name}: {c['items_per_s']:,.0f} items/s (n={c['n']}, {c['min']:,.0f}-"
                      f"{c['max']:,.0f}); served / this ceiling {items / c['items_per_s']:.2f}")
    for line in (o / "start.txt").read_text().splitlines() if (o / "start.txt").exists() else []:
        print(line)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
