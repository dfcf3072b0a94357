"""Worker-side engines for causal LMs: how one candidate prefills, decodes, scores and greedy-decodes.

GenerateEngine is the naive baseline: `model.generate()` with its dynamic KV cache, eager.
StaticEngine owns the decode loop: a StaticCache per batch size (fixed shapes), an eager prefill, and a
decode step that is eager, torch.compile'd (one graph per batch size) or, on CUDA, captured once as a
CUDA graph and replayed. Both suppress EOS during greedy decoding exactly as generate(min_new_tokens=n)
does, so their continuations are comparable token for token.
"""

from __future__ import annotations

import time
from typing import Any

TOPK = 64  # KL is computed over the reference's top-64 tokens plus one bucket for the remaining mass


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _eos_ids(model) -> list[int]:
    e = model.generation_config.eos_token_id
    if e is None:
        return []
    return [e] if isinstance(e, int) else list(e)


class _Engine:
    def __init__(self, model, device: str, max_len: int):
        self.model, self.device, self.max_len = model, device, max_len
        self.eos = _eos_ids(model)

    def _ids(self, ids: list[int], batch: int = 1):
        import torch

        return torch.tensor([ids] * batch, dtype=torch.long, device=self.device)

    def ttft(self, ids: list[int]) -> float:
        """Prefill `ids` at batch 1 and pick the first token; milliseconds."""
        import torch

        x = self._ids(ids)
        with torch.inference_mode():
            _sync(self.device)
            t = time.perf_counter()
            out = self.model(x, use_cache=True)
            out.logits[:, -1].argmax(-1).tolist()
            _sync(self.device)
            return (time.perf_counter() - t) * 1000

    def score(self, seqs: list[list[int]], ref: dict | None = None) -> dict[str, Any]:
        """Teacher-forced next-token log-probs over `seqs`. Without `ref`: returns the reference's
        top-k data; with it: ppl, top-1 agreement and KL against it."""
        import torch

        nll, n, agree, kl = 0.0, 0, 0, 0.0
        tops_i, tops_lp, argmax = [], [], []
        with torch.inference_mode():
            for si, seq in enumerate(seqs):
                x = self._ids(seq)
                lp = torch.log_softmax(self.model(x, use_cache=False).logits[0, :-1].float(), -1)
                tgt = x[0, 1:]
                nll += float(-lp.gather(1, tgt[:, None]).sum())
                n += int(tgt.numel())
                am = lp.argmax(-1)
                if ref is None:
                    v, i = lp.topk(TOPK, -1)
                    tops_i.append(i.cpu().to(torch.int32).numpy())  # numpy: pickles plainly through the pipe
                    tops_lp.append(v.cpu().numpy())
                    argmax.append(am.cpu().numpy())
                    continue
                r_i = torch.from_numpy(ref["top_i"][si]).to(lp.device).long()
                r_lp = torch.from_numpy(ref["top_lp"][si]).to(lp.device)
                agree += int((am == torch.from_numpy(ref["argmax"][si]).to(lp.device)).sum())
                c_lp = lp.gather(1, r_i)
                p = r_lp.exp()
                rest_p = (1 - p.sum(-1)).clamp_min(1e-12)
                rest_q = (1 - c_lp.exp().sum(-1)).clamp_min(1e-12)
                kl += float(((p * (r_lp - c_lp)).sum(-1) + rest_p * (rest_p.log() - rest_q.log())).clamp_min(0).sum())
        out: dict[str, Any] = {"nll": nll, "n": n}
        if ref is None:
            out.update(top_i=tops_i, top_lp=tops_lp, argmax=argmax)
        else:
            out.update(top1_agreement=agree / max(n, 1), kl_mean=kl / max(n, 1))
        return out

    # subclasses implement greedy(ids, n) -> list[int] and decode_times(batch, ids, steps) -> list[float]


class GenerateEngine(_Engine):
    """transformers' `generate()`: what most code does."""

    def _generate(self, x, n: int, stopping=None):
        import torch

        with torch.inference_mode():
            return self.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
                                       do_sample=False, stopping_criteria=stopping)

    def ttft(self, ids: list[int]) -> float:
        x = self._ids(ids)
        _sync(self.device)
        t = time.perf_counter()
        self._generate(x, 1)
        _sync(self.device)
        return (time.perf_counter() - t) * 1000

    def greedy(self, ids: list[int], n: int) -> list[int]:
        return self._generate(self._ids(ids), n)[0, len(ids):].tolist()

    def decode_times(self, batch: int, ids: list[int], steps: int) -> list[float]:
        """Per-step times inside generate(): a stopping criterion timestamps every generated token."""
        from transformers import StoppingCriteria, StoppingCriteriaList

        stamps: list[float] = []
        device = self.device

        class Stamp(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                import torch

                _sync(device)
                stamps.append(time.perf_counter())
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        self._generate(self._ids(ids, batch), steps + 1, StoppingCriteriaList([Stamp()]))
        return [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)]


class StaticEngine(_Engine):
    """Own decode loop over a StaticCache; the step is eager, compiled or a replayed CUDA graph."""

    def __init__(self, model, device: str, max_len: int, mode: str = "eager"):
        super().__init__(model, device, max_len)
        self.mode = mode  # eager | compile | cudagraph | compile-graph
        self._slots: dict[int, dict[str, Any]] = {}

    def _slot(self, batch: int) -> dict[str, Any]:
        import torch
        from transformers import StaticCache

        if batch in self._slots:
            return self._slots[batch]
        cache = StaticCache(config=self.model.config, max_cache_len=self.max_len)
        model = self.model
        graphed = self.mode in ("cudagraph", "compile-graph")
        eos = torch.tensor(self.eos, device=self.device) if (graphed and self.eos) else None

        def step(ids, pos):
            logits = model(ids, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1]
            if not graphed:
                return logits
            # graph modes: the greedy pick runs inside the captured graph (no extra launches per step)
            if eos is not None:
                logits = logits.index_fill(1, eos, float("-inf"))
            return logits.argmax(-1, keepdim=True)

        if self.mode == "compile":
            fn = torch.compile(step, dynamic=False)
        elif self.mode == "compile-graph":
            # inductor's kernels (autotuned GEMV templates, fused norms/rope), then captured as one CUDA
            # graph below; inductor's own cudagraphs stay off so the capture is ours (one graph, fixed buffers)
            fn = torch.compile(step, dynamic=False, mode="max-autotune-no-cudagraphs")
        else:
            fn = step
        slot = {"cache": cache, "fn": fn, "graph": None,
                "ids": torch.zeros(batch, 1, dtype=torch.long, device=self.device),
                "pos": torch.zeros(1, dtype=torch.long, device=self.device)}
        self._slots[batch] = slot
        return slot

    def _prefill(self, slot, x):
        import torch

        slot["cache"].reset()
        L = x.shape[1]
        out = self.model(x, past_key_values=slot["cache"], cache_position=torch.arange(L, device=self.device),
                         use_cache=True)
        return out.logits[:, -1]

    def _step(self, slot, tok, pos: int):
        import torch

        slot["ids"].copy_(tok)
        slot["pos"].fill_(pos)
        if self.mode not in ("cudagraph", "compile-graph"):
            return slot["fn"](slot["ids"], slot["pos"])
        if slot["graph"] is None:  # warm up on a side stream, then capture one step
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    slot["fn"](slot["ids"], slot["pos"])
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                slot["out"] = slot["fn"](slot["ids"], slot["pos"])
            slot["graph"] = g
        slot["graph"].replay()
        return slot["out"]

    def _advance(self, slot, tok, pos: int):
        """The next greedy token after `tok` at position `pos` (graph modes pick it inside the graph)."""
        out = self._step(slot, tok, pos)
        return out if self.mode in ("cudagraph", "compile-graph") else self._next(out)

    def _next(self, logits):
        if self.eos:
            logits = logits.clone()
            logits[:, self.eos] = float("-inf")
        return logits.argmax(-1, keepdim=True)

    def _check(self, L: int, steps: int) -> None:
        if L + steps > self.max_len:
            raise ValueError(f"prompt {L} + {steps} steps exceeds the static cache ({self.max_len} tokens)")

    def greedy(self, ids: list[int], n: int) -> list[int]:
        import torch

        self._check(len(ids), n)
        slot = self._slot(1)
        out: list[int] = []
        with torch.inference_mode():
            tok = self._next(self._prefill(slot, self._ids(ids)))
            out.append(int(tok[0, 0]))
            for s in range(n - 1):
                tok = self._advance(slot, tok, len(ids) + s)
                out.append(int(tok[0, 0]))
        return out

    def decode_times(self, batch: int, ids: list[int], steps: int) -> list[float]:
        import torch

        self._check(len(ids), steps + 1)
        slot = self._slot(batch)
        times = []
        with torch.inference_mode():
            tok = self._next(self._prefill(slot, self._ids(ids, batch)))
            for s in range(steps):
                if self.device == "cuda":
                    # CUDA events around the step: its time on the GPU's timeline, launch gaps included
                    # (an eager step waiting for the host shows as such), host bookkeeping after it not
                    _sync(self.device)
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    tok = self._advance(slot, tok, len(ids) + s)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b))
                    continue
                t = time.perf_counter()
                tok = self._advance(slot, tok, len(ids) + s)
                tok.tolist()
                times.append((time.perf_counter() - t) * 1000)
        return times
