"""Build the built-in sample workload: real English prose from the Python documentation shipped with
CPython (pydoc_data.topics and stdlib docstrings), cut into items whose lengths follow a long-tailed
(log-normal) distribution like real embedding traffic: many short queries, a body of paragraph-sized
chunks, and a tail of long documents past the 256-token limit of small encoders.

Run once; the output is committed as package data. Deterministic (seeded).
"""

from __future__ import annotations

import importlib
import json
import random
import re
import sys
from pathlib import Path

MODULES = ["argparse", "asyncio", "collections", "csv", "datetime", "email", "functools", "http.client",
           "inspect", "json", "logging", "os", "pathlib", "pickle", "re", "shutil", "socket", "sqlite3",
           "subprocess", "tarfile", "threading", "typing", "unittest", "urllib.request", "zipfile"]


def sentences() -> list[str]:
    import pydoc_data.topics as topics

    texts = list(topics.topics.values())
    for name in MODULES:
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 80 and getattr(obj, "__module__", name) == name:
                texts.append(doc)
    out: list[str] = []
    for text in texts:
        for para in re.split(r"\n\s*\n", text):
            # prose only: skip code blocks, grammar rules and underlines
            if para.startswith((" ", "\t")) or "::=" in para or re.fullmatch(r"[*=\-~^\s]+", para):
                continue
            para = " ".join(para.split())
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
                if len(s.split()) >= 3 and not s.startswith((">>>", "...")):
                    out.append(s)
    return out


def main(path: Path, n: int = 1000, seed: int = 7) -> None:
    rng = random.Random(seed)
    sents = sentences()
    items, i = [], 0
    while len(items) < n:
        # target length in words: log-normal, median 30 words (~40 tokens), sigma 1.0 -> p99 ~ 300 words
        target = max(2, min(700, int(rng.lognormvariate(3.4, 1.0))))
        start = rng.randrange(len(sents))
        words: list[str] = []
        j = start
        while len(words) < target and j < len(sents):
            words += sents[j].split()
            j += 1
        if target <= 12:  # query-like: a short phrase cut from a sentence
            words = words[:target]
        text = " ".join(words)
        if text:
            items.append({"input": text})
        i += 1
    # a few non-ASCII items, as real traffic has them
    extra = ["Café au lait — naïve résumé, über straße.", "数据库连接超时，请检查网络设置。",
             "Привет, как дела? Это тестовая строка.", "emoji test 🚀🔥 deploy to production 🎉"]
    for k, t in enumerate(extra):
        items[k * 97 + 5] = {"input": t}
    with path.open("w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    print(f"wrote {len(items)} items to {path} from {len(sents)} sentences")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("src/infertune/data/sample_embeddings.jsonl"))
