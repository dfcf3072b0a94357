"""The search in a few sentences, for the console and both HTML reports."""

from __future__ import annotations

from infertune.results import TuneResult


def search_lines(result: TuneResult) -> list[str]:
    """The search in a few sentences: host, budget, stages, what was dropped or not tried, and why."""
    s = result.search
    if not s:
        return []
    lines = [f"Host: {s.get('capabilities', '?')}."]
    stages = ", ".join(f"{x['stage']} {x['ended_s'] - x['started_s']:.0f} s" for x in s.get("stages", []))
    ph = s.get("phases_s") or {}
    where = f"; setup {ph.get('setup', 0):.0f} s, artifact {ph['artifact']:.0f} s" if "artifact" in ph else ""
    lines.append(f"Search: {s.get('wall_s') or 0:.0f} s of a {s.get('time_budget_s', 0):.0f} s budget ({stages}"
                 f"{where}).")
    if s.get("cost_s"):
        spent = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(s["cost_s"].items(), key=lambda kv: -kv[1]))
        ref, base = result.reference, result.baseline.name if result.baseline else None
        own = [f"{who} {(s.get('candidates', {}).get(k) or {}).get('time_s') or 0:.0f} s"
               for who, k in (("the reference", ref), ("the naive baseline", base)) if k]
        lines.append(f"Worker time by stage: {spent}" + (f"; of it {', '.join(own)}." if own else "."))
    for d in s.get("dropped", []):
        c = s.get("candidates", {}).get(d["candidate"], {})
        lines.append(f"Dropped at the {d['stage']}: {d['candidate']} ({d['ratio']:.2f}x the best so far, "
                     f"cost {c.get('time_s') or 0:.1f} s).")
    for eng, e in (s.get("refine") or {}).items():
        pts = ", ".join(f"{p['tokens']}: {p['items_per_s']:.0f}/s P99 {p['p99_ms']:.0f} ms" for p in e["points"])
        lines.append(f"Batch budget of {eng} searched against the SLO ({e['target_ms']:.0f} ms probe target; "
                     f"padded tokens: items/s, P99): {pts} -> {e['chosen_tokens']} tokens.")
    if result.dimensions.get("why"):  # --dimensions auto
        lines.append(result.dimensions["why"])
    for n in s.get("not_tried", []):
        if "--candidates" not in n["why"]:
            lines.append(f"Not tried: {n['candidate']}: {n['why']}.")
    return lines


def print_search(result: TuneResult, con=None) -> None:
    if con is None:
        from rich.console import Console

        con = Console(stderr=True)
    for line in search_lines(result):
        con.print(f"[dim]{line}[/]", highlight=False)
