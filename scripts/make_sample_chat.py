"""Build the built-in chat workload (src/infertune/data/sample_chat.jsonl): real English text from the
Python documentation shipped with CPython (pydoc_data.topics), shaped as OpenAI chat and completions
requests. Prompt lengths follow a long-tailed spread like chat traffic: many short questions, a body
of "explain this passage" requests with a paragraph or two of context, and a tail of long-context
summaries. `max_tokens` varies (32-256). Deterministic (seeded); run once, the output is committed.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

QUESTIONS = [
    "What does the {t} statement do in Python?", "Explain {t} in one paragraph.",
    "Give a short example that uses {t}.", "When should I avoid {t}?", "How is {t} different in Python 2?",
    "What are common mistakes with {t}?", "Summarize the rules for {t}.", "Is {t} thread-safe?",
]
TASKS = [
    "Explain the following passage from the Python reference in plain words:\n\n{p}",
    "Summarize this documentation excerpt in three bullet points.\n\n{p}",
    "Read the text below and answer: what is the single most important rule it states?\n\n{p}",
    "Rewrite this for a beginner, keeping it short:\n\n{p}",
]


def paragraphs() -> list[str]:
    import pydoc_data.topics as topics

    out = []
    for text in topics.topics.values():
        for para in re.split(r"\n\s*\n", text):
            para = " ".join(para.split())
            if len(para) > 80 and not para.startswith(("***", ">>>", "...")):
                out.append(para)
    return out


def main(path: Path, n: int = 240, seed: int = 0) -> None:
    import pydoc_data.topics as topics

    rng = random.Random(seed)
    paras = paragraphs()
    names = [t.replace("-", " ") for t in topics.topics]
    rows = []
    for i in range(n):
        kind = rng.random()
        max_tokens = rng.choice([32, 64, 64, 128, 128, 256])
        if kind < 0.35:  # a short question
            content = rng.choice(QUESTIONS).format(t=rng.choice(names))
        else:  # a passage of log-normal length (median ~2 paragraphs, tail to ~12)
            k = max(1, min(14, round(rng.lognormvariate(0.6, 0.75))))
            start = rng.randrange(len(paras) - k)
            content = rng.choice(TASKS).format(p="\n\n".join(paras[start:start + k]))
            content = content[:6000]
        if i % 4 == 3:  # every fourth request in completions shape
            rows.append({"prompt": content + "\n\nAnswer:", "max_tokens": max_tokens})
        else:
            rows.append({"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} requests to {path}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("src/infertune/data/sample_chat.jsonl"))
