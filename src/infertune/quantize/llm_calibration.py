"""The workload's length-stratified calibration split, written where llm-compressor's `oneshot` reads it.

The split is the one tune uses for every family (infertune.workloads.buckets.stratified_split over prompt token counts,
eval_fraction 0.7, seed 0): 30% of each token-length bucket, so a workload whose tail is long prompts calibrates
on long prompts too. Each request is rendered with the model's chat template, because that is the text vLLM's
engine sees (the template's special tokens are part of the activations the scales must cover).

The file is `<dir>/train.json`, JSON lines `{"text": ...}`: oneshot(dataset="json", dataset_path=<dir>,
splits="train", text_column="text") loads it as the "train" split (quantize/llm_checkpoint_step.py names that command).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.quantize.llm_checkpoint_step import EVAL_FRACTION

FILE = "train.json"  # oneshot's `splits="train"` picks the data file whose name holds the split name


class CalibrationSplit(BaseModel):
    """What was written: enough for the checkpoint's record and for oneshot's num_calibration_samples."""

    file: str
    source: str  # the workload file
    n: int  # requests in the split
    n_workload: int
    n_split: int | None = None  # the calibration side before --quick's cap (None: not capped)
    eval_fraction: float
    seed: int
    tokens: dict[str, float]  # prompt tokens of the split (chat template applied): min, p50, max, total
    histogram: list[dict[str, Any]]  # per token-length bucket, as the tune report shows the workload


@dataclass
class RenderedWorkload:
    """A chat workload as the model's engine sees it: each request rendered with the chat template, and its ids.
    Made once per tune (render_workload); the calibration split, the eval sets and the summary all read it."""

    reqs: list[Any]
    source: str
    texts: list[str]
    ids: list[list[int]]


def render_workload(tokenizer: Any, workload: str | Path | None = None,
                    requests: tuple[list[Any], str] | None = None) -> RenderedWorkload:
    """Render and tokenize `workload` (None: the built-in chat sample), or `requests` already read
    (load_chat_workload's answer)."""
    from infertune.workloads.chat import load_chat_workload

    reqs, source = requests if requests is not None else load_chat_workload(workload)
    texts = [r.render(tokenizer) for r in reqs]
    return RenderedWorkload(reqs, source, texts, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts])


def split_indices(lengths: list[int], eval_fraction: float = EVAL_FRACTION, seed: int = 0) -> list[int]:
    """Indices of the calibration requests: the stratified split's calibration side (the rest is tune's eval)."""
    from infertune.workloads.buckets import stratified_split

    return stratified_split(lengths, eval_fraction, seed)[0]


def write_calibration(out_dir: str | Path, tokenizer, workload: str | Path | None = None, *,
                      eval_fraction: float = EVAL_FRACTION, seed: int = 0,
                      rendered: RenderedWorkload | None = None, max_n: int | None = None) -> CalibrationSplit:
    """Write the calibration split of `workload` (None: the built-in chat sample) to `out_dir`/train.json.

    `tokenizer` is the model's (transformers; anything with __call__ and apply_chat_template): it renders the
    chat requests and counts their tokens, the lengths the split is stratified on. `rendered`: that work done
    already (render_workload), for this tokenizer and workload. `max_n`: at most this many, taken evenly over the
    split's lengths (shortest to longest), so a capped split still spans the workload's prompt lengths.
    """
    from infertune.workloads.buckets import histogram

    r = rendered or render_workload(tokenizer, workload)
    reqs, source, texts = r.reqs, r.source, r.texts
    lengths = [len(x) for x in r.ids]
    keep = split_indices(lengths, eval_fraction, seed)
    n_split = len(keep)
    if max_n and len(keep) > max_n:
        by_len = sorted(keep, key=lambda i: lengths[i])
        keep = sorted({by_len[round(k * (len(by_len) - 1) / max(max_n - 1, 1))] for k in range(max_n)})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    with path.open("w", encoding="utf-8") as f:
        for i in keep:
            f.write(json.dumps({"text": texts[i]}, ensure_ascii=False) + "\n")
    sub = sorted(lengths[i] for i in keep)
    return CalibrationSplit(
        file=str(path), source=source, n=len(keep), n_workload=len(reqs), eval_fraction=eval_fraction, seed=seed,
        n_split=n_split if len(keep) < n_split else None,
        tokens={"min": sub[0], "p50": sub[len(sub) // 2], "max": sub[-1], "total": sum(sub)} if sub else {},
        histogram=histogram(sub))


__all__ = ["CalibrationSplit", "RenderedWorkload", "render_workload", "write_calibration", "split_indices", "FILE"]
