"""Request bodies for a bench run: from a JSONL file or a synthetic length spec, pre-encoded to bytes so
the load loop does no JSON work on the way out."""

from __future__ import annotations

import io
import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from infertune.errors import InfertuneError
from infertune.workloads.source import at, not_an_object, nothing_read, read_text

# Short common English words: nearly all are one token in BPE/WordPiece vocabularies, so a prompt of
# N words is close to N tokens (reported as an estimate unless the server returns usage).
_WORDS = tuple(["the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "as", "with", "his", "they", "at",
                "be", "this", "from", "have", "or", "by", "one", "had", "not", "but", "what", "all", "were", "when",
                "we", "there", "can", "an", "your", "which", "their", "said", "if", "do", "will", "each", "about",
                "how", "up", "out", "them", "then", "she", "many", "some", "so", "these", "would", "other", "into",
                "has", "more", "her", "two", "like", "him", "see", "time", "could", "no", "make", "than", "first",
                "been", "its", "who", "now", "people", "my", "made", "over", "did", "down", "only", "way", "find",
                "use", "may", "water", "long", "little", "very", "after", "words", "called", "just", "where", "most",
                "know", "get", "through", "back", "much", "before", "go", "good", "new", "write", "our", "used", "me",
                "man", "too", "any", "day", "same", "right", "look", "think", "also", "around", "another", "came",
                "come", "work", "three", "word", "must", "because", "does", "part", "even", "place", "well", "such",
                "here", "take", "why", "things", "help", "put", "years", "different", "away", "again", "off", "went",
                "old", "number", "great", "tell", "men", "say", "small", "every", "found", "still", "between", "name",
                "should", "home", "big", "give", "air", "line", "set", "own", "under", "read", "last", "never", "us",
                "left", "end", "along", "while", "might", "next", "sound", "below", "saw"])


@dataclass
class Requests:
    bodies: list[bytes]
    input_tokens: list[int]  # estimate per body (words x 1.3 for files, exact word count for synthetic)
    max_tokens: list[int | None]
    source: str

    def summary(self) -> dict:
        it = sorted(self.input_tokens)
        mt = [m for m in self.max_tokens if m]
        return {"source": self.source, "n": len(self.bodies),
                "input_tokens_est": {"p50": it[len(it) // 2], "max": it[-1], "mean": round(sum(it) / len(it), 1)},
                "max_tokens": {"p50": sorted(mt)[len(mt) // 2], "max": max(mt)} if mt else None}


_DIST = re.compile(r"^\s*(\w+)\s*=\s*(?:(\w+)\(([^)]*)\)|([\d.]+))\s*$")


def _sampler(name: str, args: list[float], rng: random.Random):
    if name == "constant" and len(args) == 1:
        return lambda: args[0]
    if name == "uniform" and len(args) == 2:
        return lambda: rng.uniform(args[0], args[1])
    if name == "normal" and len(args) == 2:
        return lambda: rng.gauss(args[0], args[1])
    if name == "lognormal" and len(args) == 2:  # (median, sigma): median = exp(mu)
        mu = math.log(args[0])
        return lambda: rng.lognormvariate(mu, args[1])
    raise InfertuneError(f"unknown distribution {name}({', '.join(map(str, args))}); use N, uniform(a,b), "
                         "normal(mean,sd) or lognormal(median,sigma)")


def parse_synthetic(spec: str) -> dict[str, tuple[str, list[float]]]:
    """'prompt=lognormal(200,0.6),output=128,n=500' -> {key: (dist, args)}."""
    out: dict[str, tuple[str, list[float]]] = {}
    for part in re.split(r",(?![^()]*\))", spec):
        if not part.strip():
            continue
        m = _DIST.match(part)
        if not m:
            raise InfertuneError(f"cannot read {part!r} in --synthetic; "
                                 "write e.g. 'prompt=lognormal(200,0.6),output=128'")
        key, fn, args, num = m.groups()
        if key not in ("prompt", "output", "n", "batch"):
            raise InfertuneError(f"--synthetic key {key!r} unknown; keys are prompt, output, n, batch")
        try:
            out[key] = (fn, [float(a) for a in args.split(",")]) if fn else ("constant", [float(num)])
        except ValueError as e:
            raise InfertuneError(f"--synthetic {part!r}: numbers expected") from e
    if "prompt" not in out:
        raise InfertuneError("--synthetic needs prompt=..., e.g. 'prompt=lognormal(200,0.6),output=128'")
    return out


def _body(api: str, model: str | None, stream: bool, *, text: str | list[str] | None = None,
          messages: list | None = None, max_tokens: int | None = None, extra: dict | None = None) -> dict:
    b: dict = {}
    if model:
        b["model"] = model
    if api == "embeddings":
        b["input"] = text
    elif api == "completions":
        b["prompt"] = text if text is not None else "\n".join(str(m.get("content", "")) for m in messages or [])
    else:
        b["messages"] = messages if messages is not None else [{"role": "user", "content": text}]
    if api != "embeddings":
        if max_tokens:
            b["max_tokens"] = max_tokens
        if stream:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
    b.update(extra or {})
    return b


def synthetic(spec: str, api: str, model: str | None, stream: bool, seed: int, ignore_eos: bool = True) -> Requests:
    d = parse_synthetic(spec)
    rng = random.Random(seed)
    p_len = _sampler(*d["prompt"], rng)
    o_len = _sampler(*d["output"], rng) if "output" in d else None
    n = int(d.get("n", ("constant", [512]))[1][0])
    batch = int(d.get("batch", ("constant", [1]))[1][0])
    bodies, toks, maxt = [], [], []
    for i in range(n):
        texts = []
        for _ in range(batch if api == "embeddings" else 1):
            k = max(1, round(p_len()))
            # a unique first word per request keeps prefix caches from turning the test into a cache test
            texts.append(" ".join([f"r{i}x{rng.randrange(10**6)}"] + [rng.choice(_WORDS) for _ in range(k - 1)]))
        mt = max(1, round(o_len())) if o_len and api != "embeddings" else None
        extra = {"ignore_eos": True} if (ignore_eos and mt and api != "embeddings") else None
        text: str | list[str] = texts if batch > 1 else texts[0]
        bodies.append(json.dumps(_body(api, model, stream, text=text, max_tokens=mt, extra=extra)).encode())
        toks.append(sum(len(t.split()) for t in texts))
        maxt.append(mt)
    return Requests(bodies, toks, maxt, f"synthetic:{spec}")


EXAMPLE = '{"input": "..."}, {"prompt": "...", "max_tokens": 64} or {"messages": [...]}'


def from_file(path: Path, api: str, model: str | None, stream: bool, default_max_tokens: int = 128) -> Requests:
    bodies, toks, maxt = [], [], []
    for ln, line in enumerate(io.StringIO(read_text(path), newline=None), 1):  # the lines open() would give
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:  # not JSON: the line is the text
            obj = {"input": line} if api == "embeddings" else {"prompt": line}
        if not isinstance(obj, dict):
            raise not_an_object(obj, at(path, ln), EXAMPLE)
        text = obj.get("input", obj.get("prompt", obj.get("text")))
        messages = obj.get("messages")
        if text is None and messages is None:
            raise InfertuneError(f"{at(path, ln)}: needs 'input', 'prompt', 'text' or 'messages'; write each line "
                                 f"like {EXAMPLE}")
        if api == "embeddings" and text is None:
            text = "\n".join(str(m.get("content", "")) for m in messages)
        mt = obj.get("max_tokens", obj.get("max_completion_tokens", default_max_tokens))
        mt = int(mt) if api != "embeddings" and mt else None
        extra = {k: v for k, v in obj.items() if k in ("temperature", "top_p", "ignore_eos", "min_tokens", "stop")}
        bodies.append(json.dumps(_body(api, model, stream, text=text, messages=messages, max_tokens=mt,
                                       extra=extra)).encode())
        words = text if isinstance(text, str) else " ".join(
            text if isinstance(text, list) else [str(m.get("content", "")) for m in messages])
        toks.append(max(1, round(len(str(words).split()) * 1.3)))
        maxt.append(mt)
    if not bodies:
        raise nothing_read(path, "requests", "one JSON object (or text) per line")
    return Requests(bodies, toks, maxt, str(path))


def to_file(reqs: Requests, path: Path) -> Path:
    """The requests as a JSONL workload `from_file` reads back (validate hands its screened requests to bench
    this way); without the model, which the reader sets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for b in reqs.bodies:
            obj = json.loads(b)
            f.write(json.dumps({k: v for k, v in obj.items() if k != "model"}) + "\n")
    return path


def group_inputs(reqs: Requests, per_request: int, model: str | None) -> Requests:
    """Embeddings: pack `per_request` consecutive inputs into each request (OpenAI takes up to 2048), the
    way a batch-indexing client sends them; the workload is cycled so every request is full."""
    texts: list[str] = []
    for b in reqs.bodies:
        x = json.loads(b)["input"]
        texts += x if isinstance(x, list) else [x]
    n = max(1, len(texts) // per_request)
    texts = (texts * (-(-n * per_request // len(texts))))[: n * per_request]
    bodies = [json.dumps(_body("embeddings", model, False, text=texts[i * per_request:(i + 1) * per_request])).encode()
              for i in range(n)]
    toks = [sum(max(1, round(len(t.split()) * 1.3)) for t in texts[i * per_request:(i + 1) * per_request])
            for i in range(n)]
    return Requests(bodies, toks, [None] * n, f"{reqs.source} ({per_request} inputs per request)")


def build(api: str, model: str | None, stream: bool, workload: Path | None, spec: str | None, seed: int,
          inputs_per_request: int = 1) -> Requests:
    if inputs_per_request > 1:
        if api != "embeddings":
            raise InfertuneError("--inputs-per-request applies to --api embeddings only")
        return group_inputs(build(api, model, stream, workload, spec, seed), inputs_per_request, model)
    if workload is not None:
        return from_file(workload, api, model, stream)
    if spec:
        return synthetic(spec, api, model, stream, seed)
    if api == "embeddings":
        from infertune.workloads.texts import sample_path

        return from_file(sample_path(), api, model, stream)
    return synthetic("prompt=128,output=64", api, model, stream, seed)
