"""The user's own task metrics for an embedding tune, computed with the reference and with every candidate on the
same texts: recall@10 and MRR over labelled pairs (`--eval-pairs`), and a user's callable (`--eval
module:function`) that gets an embed function and returns named metrics. verify.within_budget gates on their
drop from the reference."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import AccuracyBudget
from infertune.errors import InfertuneError
from infertune.results import TaskMetric

K = 10  # recall@10: "does the right document stay in the top 10"

Embed = Callable[[Sequence[str]], np.ndarray]  # texts -> unit vectors, one row per text


@dataclass
class Pairs:
    """Labelled retrieval pairs: each query's positive is one document of a corpus made of every document the
    file names (positives and negatives, deduplicated)."""

    queries: list[str]
    corpus: list[str]
    positive: list[int]  # corpus position of each query's positive
    source: str


def _strings(obj: dict, key: str, where: str, many: bool = False) -> list[str]:
    val = obj.get(key, [] if many else None)
    if many and isinstance(val, list) and all(isinstance(v, str) and v.strip() for v in val):
        return list(val)
    if not many and isinstance(val, str) and val.strip():
        return [val]
    want = "a list of non-empty strings" if many else "a non-empty string"
    raise InfertuneError(f"{where}: {key!r} must be {want}, got {val!r:.60}")


def load_pairs(path: str | Path) -> Pairs:
    """Read a JSONL file of {"query": ..., "positive": ...[, "negatives": [...]]}; errors name file and line."""
    p = Path(path)
    queries: list[str] = []
    positive: list[int] = []
    corpus: dict[str, int] = {}
    for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{no}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InfertuneError(f"{where}: invalid JSON ({e.msg} at column {e.colno}); each line must be one "
                                 'object like {"query": "...", "positive": "...", "negatives": ["..."]}') from e
        if not isinstance(obj, dict):
            raise InfertuneError(f"{where}: expected a JSON object with \"query\" and \"positive\"")
        q = _strings(obj, "query", where)[0]
        pos = _strings(obj, "positive", where)[0]
        for doc in [pos, *_strings(obj, "negatives", where, many=True)]:
            corpus.setdefault(doc, len(corpus))
        queries.append(q)
        positive.append(corpus[pos])
    if not queries:
        raise InfertuneError(f"{p}: no pairs found; expected one {{\"query\": ..., \"positive\": ...}} per line")
    if len(corpus) <= K:
        raise InfertuneError(f"{p}: the corpus has {len(corpus)} documents, so every positive is in the top {K}; "
                             f"give more than {K} documents (more pairs, or \"negatives\")")
    return Pairs(queries=queries, corpus=list(corpus), positive=positive, source=str(p))


def retrieval(q: np.ndarray, docs: np.ndarray, positive: Sequence[int], k: int = K) -> dict[str, float]:
    """recall@k and MRR of each query's positive among all documents, by cosine; a document scoring the same as
    the positive does not push it down."""
    qu = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    du = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
    sims = qu @ du.T
    pos = sims[np.arange(len(qu)), np.asarray(positive)]
    rank = 1 + (sims > pos[:, None]).sum(1)
    return {f"recall@{k}": float(np.mean(rank <= k)), "mrr": float(np.mean(1.0 / rank))}


def load_callable(target: str) -> Callable[[Embed], Any]:
    """`module:function` (importable, the working directory included) or `path/to/file.py:function`."""
    mod_name, sep, fn_name = target.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise InfertuneError(f"--eval {target!r}: expected module:function or path/to/file.py:function")
    try:
        if mod_name.endswith(".py") or "/" in mod_name:
            path = Path(mod_name)
            if not path.is_file():
                raise InfertuneError(f"--eval {target!r}: {path} is not a file")
            spec = importlib.util.spec_from_file_location(f"infertune_eval_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            mod = importlib.import_module(mod_name)
    except InfertuneError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module: any import error is theirs to fix
        raise InfertuneError(f"--eval {target!r}: importing {mod_name} failed: {type(e).__name__}: {e}") from e
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InfertuneError(f"--eval {target!r}: {mod_name} has no function {fn_name!r}")
    return fn


def parse_metrics(got: Any, target: str) -> dict[str, tuple[float, bool]]:
    """name -> (value, higher_is_better) from what a user function returned: {name: number} (higher is better),
    {name: (number, "higher"|"lower")} or {name: {"value": number, "higher_is_better": bool}}."""
    bad = (f"--eval {target}: expected a dict of name -> number, (number, 'higher'|'lower') or "
           f"{{'value': number, 'higher_is_better': bool}}, got {got!r:.80}")
    if not isinstance(got, dict) or not got:
        raise InfertuneError(bad)
    out: dict[str, tuple[float, bool]] = {}
    for name, v in got.items():
        if isinstance(v, dict) and "value" in v:
            val, higher = v["value"], bool(v.get("higher_is_better", True))
        elif isinstance(v, (tuple, list)) and len(v) == 2 and v[1] in ("higher", "lower"):
            val, higher = v[0], v[1] == "higher"
        else:
            val, higher = v, True
        if isinstance(val, bool) or not isinstance(val, (int, float, np.floating, np.integer)):
            raise InfertuneError(bad)
        out[str(name)] = (float(val), higher)
    return out


class TaskEval:
    """The task metrics of one tune: what to embed, the reference's figures (the first call's), the gates."""

    def __init__(self, pairs: str | Path | None, fn: str | None, budget: AccuracyBudget):
        self.pairs = load_pairs(pairs) if pairs is not None else None
        self.target = fn
        self.fn = load_callable(fn) if fn else None
        self.budget = budget
        self.reference: dict[str, dict[str, tuple[float, bool]]] | None = None  # source -> name -> (value, higher)

    def __bool__(self) -> bool:
        return self.pairs is not None or self.fn is not None

    def score(self, embed: Embed) -> list[TaskMetric]:
        """The metrics for one engine; the first call is the reference's and sets the figures to compare with.
        A user function that fails on the reference is the user's mistake (InfertuneError); on a candidate it
        leaves its metrics without a value, which the gate rejects."""
        first = self.reference is None
        got: dict[str, dict[str, tuple[float | None, bool]]] = {}
        errors: dict[str, str] = {}
        if self.pairs is not None:
            p = self.pairs
            vec = embed(p.queries + p.corpus)
            r = retrieval(vec[:len(p.queries)], vec[len(p.queries):], p.positive)
            got["eval-pairs"] = {k: (v, True) for k, v in r.items()}
        if self.fn is not None:
            engine: list[BaseException] = []

            def engine_embed(texts: Sequence[str]) -> np.ndarray:
                try:
                    return embed(texts)
                except BaseException as e:
                    engine.append(e)
                    raise

            try:
                got[self.target] = parse_metrics(self.fn(engine_embed), self.target)
            except InfertuneError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's function
                if engine:  # the engine failed under the user's call: the run records that as the engine's failure
                    raise engine[0] from None
                if first:
                    raise InfertuneError(f"--eval {self.target} raised {type(e).__name__}: {e} "
                                         "(on the reference)") from e
                errors[self.target] = f"{type(e).__name__}: {str(e)[:200]}"
                got[self.target] = {n: (None, hi) for n, (_, hi) in (self.reference or {}).get(self.target, {}).items()}
        if first:
            self.reference = got
        return [self._metric(src, name, v, hi, errors.get(src))
                for src, ms in got.items() for name, (v, hi) in ms.items()]

    def _metric(self, src: str, name: str, value: float | None, higher: bool, error: str | None) -> TaskMetric:
        ref = (self.reference or {}).get(src, {}).get(name, (None, higher))[0]
        if src == "eval-pairs":
            gate = self.budget.max_recall_drop if name == f"recall@{K}" else None
            n = len(self.pairs.queries) if self.pairs else None
        else:
            gate, n = self.budget.max_eval_drop, None
        return TaskMetric(name=name, source=src, value=value, reference=ref, higher_is_better=higher,
                          max_drop=gate, n=n, error=error)
