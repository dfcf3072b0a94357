"""Verification of a causal-LM candidate against the reference on the evaluation text.

- perplexity delta: exp(mean NLL) of the candidate over the reference's, minus 1 (teacher-forced prefill)
- top-1 agreement: fraction of positions whose argmax next token equals the reference's
- mean KL(ref || cand) per token over the reference's top-64 tokens plus one bucket for the rest
  (a lower bound of the full KL by the data-processing inequality; exact up to the tail's shape)
- greedy agreement: on the workload's prompts, tokens generated before the first divergence from the
  reference's greedy continuation (this one runs the candidate's own decode path: static cache,
  compiled step or CUDA graph), as a fraction of the tokens asked for
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from infertune.config import LMAccuracyBudget
from infertune.engines.causal_lm.vllm_server import prefix_match
from infertune.results import Accuracy


def greedy_agreement(ref: Sequence[Sequence[int]], cand: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(mean fraction of tokens before the first divergence, fraction of prompts that match fully)."""
    if not ref:
        return 1.0, 1.0
    fr = [prefix_match(r, c) / max(len(r), 1) for r, c in zip(ref, cand, strict=True)]
    return sum(fr) / len(fr), sum(f == 1.0 for f in fr) / len(fr)


def accuracy(ref_score: dict, score: dict | None, ref_greedy, greedy) -> Accuracy:
    ppl_ref = math.exp(ref_score["nll"] / ref_score["n"])
    g, ge = greedy_agreement(ref_greedy, greedy) if greedy is not None else (None, None)
    if score is None:  # the reference itself
        return Accuracy(ppl=ppl_ref, ppl_ref=ppl_ref, ppl_delta_rel=0.0, top1_agreement=1.0, kl_mean=0.0,
                        greedy_agreement=g, greedy_exact=ge, n=ref_score["n"])
    ppl = math.exp(score["nll"] / score["n"])
    return Accuracy(ppl=ppl, ppl_ref=ppl_ref, ppl_delta_rel=ppl / ppl_ref - 1, top1_agreement=score["top1_agreement"],
                    kl_mean=score["kl_mean"], greedy_agreement=g, greedy_exact=ge, n=score["n"])


def within_budget(acc: Accuracy, budget: LMAccuracyBudget) -> tuple[bool, str]:
    why = []
    if acc.ppl_delta_rel is not None and acc.ppl_delta_rel > budget.max_ppl_delta_rel:
        why.append(f"perplexity +{acc.ppl_delta_rel * 100:.2f}% > +{budget.max_ppl_delta_rel * 100:g}% budget")
    if acc.top1_agreement is not None and acc.top1_agreement < budget.min_top1_agreement:
        why.append(f"top-1 agreement {acc.top1_agreement:.4f} < {budget.min_top1_agreement:g}")
    return not why, "; ".join(why)


def judge_batch(acc: Accuracy, alone: Sequence[Sequence[int]], together: Sequence[Sequence[int]],
                prompts: Sequence[Sequence[int]], bound: float | None) -> str:
    """Greedy continuations sent one at a time against the same sent at once (sharing the server's batches): the
    token agreement and the prompts that moved go into `acc`; the reason to reject, or "" (`bound` None: recorded,
    not judged, as for the reference, whose own figure is the engine's)."""
    fracs, moved = [], []
    for p, a, b in zip(prompts, alone, together, strict=True):
        n = prefix_match(a, b)
        fracs.append(n / max(len(a), 1))
        if n < len(a):
            moved.append({"prompt_tokens": len(p), "after_tokens": n, "of": len(a)})
    acc.greedy_batch_agreement = round(sum(fracs) / max(len(fracs), 1), 4)
    acc.greedy_batch_moved = moved
    if bound is None or acc.greedy_batch_agreement >= bound:
        return ""
    where = ", ".join(f"a {m['prompt_tokens']}-token prompt after {m['after_tokens']}/{m['of']}" for m in moved[:3])
    return (f"greedy continuations move when batched: agreement {acc.greedy_batch_agreement:.3f} alone vs at once "
            f"< {bound:.3f} ({where})")
