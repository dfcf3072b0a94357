"""`--dimensions auto`: the smallest prefix of the embedding (the first N dims, renormalised, as `serve` renders a
request's "dimensions") that keeps the model's own answers within budget, and what it saves downstream.

Decided once, on the fp32 reference's vectors, when the reference is verified: every candidate after it is judged
on the dims clients will request. The figure is retrieval on `--eval-pairs` when given (recall@10 of the prefix
against the full vector, within --max-recall-drop), else neighbour agreement on the verified texts (the share of
each text's 10 nearest neighbours the prefix keeps, at least --min-topk-overlap, or NEIGHBOURS when that is
not set). Only a model trained for truncation (Matryoshka Representation Learning) gets a prefix: any model's
prefix can look fine on one workload, and a model that was not trained for it has no reason to keep it on the
next one. Such a model is still measured, so the user sees what truncation would cost."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

NEIGHBOURS = 0.9  # top-10 overlap a prefix must keep without --min-topk-overlap: 9 of a text's 10 neighbours
MIN_DIMS = 32  # smaller prefixes are not tried: below this even Matryoshka models lose most of their retrieval
CONFIG_KEYS = ("matryoshka_dimensions", "matryoshka_dims", "mrl_dimensions")
_CARD = re.compile(r"matryoshka", re.IGNORECASE)


def declared(model_dir: str | Path | None) -> tuple[bool, list[int], str]:
    """Does the model say it was trained for truncation: (yes, the dims it lists, the evidence in words). Read
    from config.json (`matryoshka_dimensions`, as jina-embeddings-v3 has it) or config_sentence_transformers.json,
    then the model card (README.md naming Matryoshka: sentence-transformers' cards tag `loss:MatryoshkaLoss`)."""
    if model_dir is None:
        return False, [], "no model files to read"
    d = Path(model_dir)
    d = d if d.is_dir() else d.parent
    for name in ("config.json", "config_sentence_transformers.json"):
        try:
            cfg = json.loads((d / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in CONFIG_KEYS:
            dims = cfg.get(key) if isinstance(cfg, dict) else None
            if isinstance(dims, list) and dims and all(isinstance(x, int) and x > 0 for x in dims):
                return True, sorted(set(dims)), f"{name} lists {key} {sorted(set(dims))}"
    try:
        card = (d / "README.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        card = ""
    if _CARD.search(card):
        return True, [], "its model card (README.md) names Matryoshka training"
    return False, [], "neither its config nor its model card says it was trained for truncation (Matryoshka)"


def prefixes(full: int, listed: Sequence[int] = ()) -> list[int]:
    """The prefixes to try, smallest first: the ones the model lists, else halvings of the full size and the
    sizes vector stores commonly use, none under MIN_DIMS."""
    if listed:
        return sorted({x for x in listed if x < full})
    out = {full // 2 ** i for i in range(1, 8) if full // 2 ** i >= MIN_DIMS}
    out |= {x for x in (64, 128, 256, 512, 768, 1024, 1536, 2048) if MIN_DIMS <= x < full}
    return sorted(out)


def saving(dims: int, full: int) -> dict[str, Any]:
    """What `dims` instead of `full` saves downstream: float32 index size per million vectors, and the share of
    the bytes a flat (exact) index scans per query, which bounds its speed."""
    return {"dims": dims, "full": full, "index_gb_per_million": round(4 * dims * 1e6 / 1e9, 3),
            "full_index_gb_per_million": round(4 * full * 1e6 / 1e9, 3), "scan_share": round(dims / full, 4)}


def decide(full: int, matryoshka: bool, evidence: str, figures: dict[int, float], passes: Callable[[float], bool],
           metric: str, bound: str, model: str = "the model") -> dict[str, Any]:
    """The choice from measured figures (prefix -> figure): on a Matryoshka model, the smallest prefix that passes
    and above which every tried prefix passes too (one lucky small prefix under a failing larger one is noise);
    otherwise, and when none passes, the full vector. `why` is the sentence the user reads."""
    tried = [{"dims": d, metric: round(v, 4), "ok": bool(passes(v))} for d, v in sorted(figures.items())]
    chosen = full
    if matryoshka:
        for t in reversed(tried):  # from the largest prefix down, while they pass
            if not t["ok"]:
                break
            chosen = t["dims"]
    out = {"chosen": chosen, "full": full, "matryoshka": matryoshka, "evidence": evidence, "metric": metric,
           "bound": bound, "tried": tried, "saving": saving(chosen, full)}
    big = tried[-1] if tried else None
    if not matryoshka:
        if big is None:
            out["why"] = f"--dimensions auto: {model} keeps all {full} dims ({evidence}; no prefix to try)."
        elif not big["ok"]:
            out["why"] = (f"--dimensions auto: truncation costs too much: "
                          f"{model} is not Matryoshka-trained ({evidence}), "
                          f"and its first {big['dims']} of {full} dims give {metric} {big[metric]:.3f} ({bound}); "
                          f"candidates are judged, and served, at all {full} dims.")
        else:
            out["why"] = (f"--dimensions auto: {model} keeps all {full} dims: "
                          f"it is not Matryoshka-trained ({evidence}); "
                          f"its first {big['dims']} dims gave {metric} {big[metric]:.3f} on this workload ({bound}), "
                          f"so `--dimensions {big['dims']}` would judge candidates on them.")
    elif chosen == full:
        smallest_fail = next((t for t in reversed(tried) if not t["ok"]), None)
        what = (f"its first {smallest_fail['dims']} dims give {metric} {smallest_fail[metric]:.3f} ({bound})"
                if smallest_fail else "no prefix to try")
        out["why"] = f"--dimensions auto: no prefix of {model} stays within budget ({what}); all {full} dims are kept."
    else:
        s = out["saving"]
        fig = next(t[metric] for t in tried if t["dims"] == chosen)
        out["why"] = (f"--dimensions auto: {chosen} of {full} dims ({evidence}): {metric} {fig:.3f} ({bound}); "
                      f"a float32 index holds {s['index_gb_per_million']:g} GB per million vectors instead of "
                      f"{s['full_index_gb_per_million']:g}, and a flat index scans {s['scan_share']:.0%} of the bytes "
                      "per query.")
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def measure(vectors: np.ndarray, dims: Sequence[int], budget, pairs=None,
            embed: Callable[[Sequence[str]], np.ndarray] | None = None) -> tuple[dict[int, float], Callable, str, str]:
    """(prefix -> figure, passes, metric name, bound in words) on the reference's vectors: recall@10 drop on the
    pairs (embedded once, then cut) when given, else top-10 neighbour overlap on the verified texts."""
    from infertune.tasks.embedding.verify import topk_overlap

    if pairs is not None and embed is not None:
        from infertune.tasks.embedding.task_eval import K, retrieval

        vec = np.asarray(embed(pairs.queries + pairs.corpus), dtype=np.float32)
        nq = len(pairs.queries)
        full = retrieval(vec[:nq], vec[nq:], pairs.positive)[f"recall@{K}"]
        figs = {d: full - retrieval(_unit(vec[:nq, :d]), _unit(vec[nq:, :d]), pairs.positive)[f"recall@{K}"]
                for d in dims}
        lim = budget.max_recall_drop
        return (figs, lambda v: v <= lim, f"recall@{K} drop",
                f"budget {lim:g}; recall@{K} {full:.3f} at full size, n={nq} queries")
    lim = budget.min_topk_overlap or NEIGHBOURS
    figs = {d: topk_overlap(vectors, vectors[:, :d]) for d in dims}
    return (figs, lambda v: v >= lim, "top-10 overlap",
            f"budget {lim:g}, against the full vector, n={len(vectors)} texts")


def judged_dims(task, vectors: np.ndarray, embed: Callable[[Sequence[str]], np.ndarray]) -> int:
    """The dims a candidate is judged on: --dimensions N, the full vector, or (auto) the choice made on the first
    vectors this is called with, the reference's."""
    want, full = task.cfg.dimensions, vectors.shape[1]
    if want != "auto":
        return want or full
    choice = getattr(task, "dims_choice", None)
    if choice is None:
        mrl, listed, evidence = declared(getattr(task.ref, "path", None))
        te = getattr(task, "task_eval", None)
        figs, passes, metric, bound = measure(vectors, prefixes(full, listed), task.cfg.accuracy,
                                              getattr(te, "pairs", None), embed)
        choice = decide(full, mrl, evidence, figs, passes, metric, bound, getattr(task.spec, "name", "the model"))
        task.dims_choice = choice
        if getattr(task, "result", None) is not None:
            task.result.dimensions = choice
        task.console.print(f"  {choice['why']}", highlight=False)
    return choice["chosen"]
