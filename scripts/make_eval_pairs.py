"""Build a `tune --eval-pairs` file from a workload (default: the embedded sample): every distinct text of two or
more sentences gives one pair, its query one of its sentences (chosen with a fixed seed) and its positive the
text without that sentence, so the query's words are not simply inside the document it should find. Every
other pair's document is a negative (the corpus is all of them); pairs whose document repeats another's are
left out.

    python scripts/make_eval_pairs.py runs/pairs.jsonl [--workload FILE] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from infertune.workloads.texts import load_workload

SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def pairs(texts: list[str], seed: int = 0, min_words: int = 4) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out, seen = [], set()
    for text in dict.fromkeys(texts):  # distinct, in order
        parts = [s for s in SENTENCE.split(text.strip()) if s]
        if len(parts) < 2:
            continue
        i = rng.randrange(len(parts))
        query, doc = parts[i], " ".join(parts[:i] + parts[i + 1:])
        if len(query.split()) < min_words or len(doc.split()) < min_words or doc in seen:
            continue
        seen.add(doc)
        out.append({"query": query, "positive": doc})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--workload", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = pairs(load_workload(a.workload).items, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} pairs -> {a.out}")


if __name__ == "__main__":
    main()
