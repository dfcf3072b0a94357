"""Match a pasted log against the catalogue of known failure signatures (data/signatures.toml).

Each signature has strong patterns (one matching line is enough) and optional weak patterns (supporting
evidence; alone they give a low-confidence match). Ranking: strong before weak, then the number of
distinct patterns that matched, then the longest matched text (more specific), then the earliest line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

from infertune.doctor.schema import ExplainConfig, ExplainMatch, ExplainResult


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    patterns: tuple[re.Pattern, ...]
    weak: tuple[re.Pattern, ...]
    cause: str
    fix: str
    sources: tuple[str, ...]
    example: str
    more_examples: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def catalogue() -> tuple[Signature, ...]:
    raw = tomllib.loads((files("infertune") / "data" / "signatures.toml").read_text())
    return tuple(
        Signature(
            id=s["id"], title=s["title"], patterns=tuple(re.compile(p) for p in s["patterns"]),
            weak=tuple(re.compile(p) for p in s.get("weak", [])), cause=s["cause"], fix=s["fix"],
            sources=tuple(s["sources"]), example=s["example"], more_examples=tuple(s.get("more_examples", ())),
        )
        for s in raw["sig"]
    )


def _scan(sig: Signature, lines: list[str]) -> tuple[tuple, ExplainMatch] | None:
    first: tuple[int, str, re.Match] | None = None
    strong_hit: set[int] = set()
    weak_hit: set[int] = set()
    hits = 0
    longest = 0
    details: dict[str, str] = {}
    for no, line in enumerate(lines, 1):
        hit = False
        for kind, pats, seen in (("strong", sig.patterns, strong_hit), ("weak", sig.weak, weak_hit)):
            for i, p in enumerate(pats):
                m = p.search(line)
                if m is None:
                    continue
                hit = True
                seen.add(i)
                longest = max(longest, m.end() - m.start())
                details.update({k: v for k, v in m.groupdict().items() if v is not None and k not in details})
                if first is None or (kind == "strong" and first[0] < 0):
                    first = (no if kind == "strong" else -no, line, m)
        hits += hit
    if first is None:
        return None
    strong = bool(strong_hit)
    line_no = abs(first[0])
    match = ExplainMatch(
        id=sig.id, title=sig.title, cause=sig.cause, fix=sig.fix, line=first[1].strip()[:500], line_no=line_no,
        hits=hits, confidence="high" if strong else "low", details=details, source=sig.sources[0],
        sources=list(sig.sources),
    )
    key = (0 if strong else 1, -(len(strong_hit) + len(weak_hit)), -longest, line_no)
    return key, match


def explain(cfg: ExplainConfig | str) -> ExplainResult:
    """Rank the known signatures found in a log; say plainly when none matched."""
    if isinstance(cfg, str):
        cfg = ExplainConfig(text=cfg)
    lines = cfg.text.splitlines()
    sigs = catalogue()
    found = [r for r in (_scan(s, lines) for s in sigs) if r is not None]
    found.sort(key=lambda r: r[0])
    matches = [m for _, m in found[: cfg.max_matches]]
    if matches:
        msg = f"{len(found)} known signature(s) matched in {len(lines)} line(s); most likely: {matches[0].title}"
    else:
        msg = (f"no known signature matched ({len(lines)} line(s) checked against {len(sigs)} signatures); "
               "search the first error line with the library's name, or run `infertune doctor`")
    return ExplainResult(matches=matches, lines_checked=len(lines), signatures=len(sigs), message=msg)
