"""CUDA graphs over packed batches: a decoder embedder on a GPU runs each batch padding-free (engines/varlen.py),
and each packed shape (total tokens and text slots, both rounded up to a few buckets) is captured once and
replayed, as in engines/cuda_graphs.py.

A packed shape has three numbers, not a rows x width grid: the tokens laid end to end (`token_bucket`: steps of
256 to 4,096, then 512, 1,024, 2,048), the text slots (`slot_bucket`: powers of two from 16) and the longest text
it admits (`len_bucket`: 512, then powers of two; FlashAttention sizes its grid by it). Tokens past the batch's
own are one filler text; slots past it are empty texts, which FlashAttention skips. So the usual shapes of a
server are few (128 up to 16,384 tokens and 127 texts of <= 512 tokens) and are captured before /ready; a batch
with a longer text gets its own graph at first sight.

Why a length bucket, not the model's limit: a mixed workload puts a text over 512 tokens in most batches of a
few hundred texts. Run at the model's limit (40,960 for Qwen3), every layer's attention launched a grid for
40,960-token texts, nearly all of it empty, and such batches ran without a graph, waiting for the device.

Checks, both before anything is answered from them:
- packing: the first packed batch against the padded eager forward of the same rows (row cosines); a mismatch
  turns packing off and the engine goes back to padded graphs (`packed` is False from then on).
- each graph: against the eager packed forward of the same rows at capture, as for padded graphs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from infertune.engines import varlen
from infertune.engines.cuda_graphs import GraphedEmbedder, _Shape
from infertune.engines.torch_eager import to_device, to_host
from infertune.models.embedding import row_cosines

log = logging.getLogger("infertune.serve")
MIN_SLOTS = 16


def token_bucket(n: int) -> int:
    """Packed tokens rounded up: steps of 256 to 4,096, 512 to 8,192, 1,024 to 16,384, 2,048 beyond (<= 1/16
    filler past 4,096 tokens; every filler text is shorter than the 512-token texts the grid is built for)."""
    step = 256 if n <= 4096 else 512 if n <= 8192 else 1024 if n <= 16384 else 2048
    return max(step, -(-n // step) * step)


def slot_bucket(texts: int) -> int:
    """Text slots for this many texts plus the filler one, rounded up to a power of two (>= 16)."""
    s = MIN_SLOTS
    while s < texts + 1:
        s *= 2
    return s


def len_bucket(longest: int, max_len: int, limit: int) -> int:
    """The longest text a packed shape admits: `max_len` (512) for short texts, else the next power of two times
    it, never past the model's `limit` (so at most a handful of values: each one is a graph shape)."""
    b = max_len
    while b < longest:
        b *= 2
    return max(max_len, min(b, limit))


def packed_grid(max_tokens: int, max_len: int, max_slots: int = 128) -> list[tuple[int, int]]:
    """The (tokens, slots) shapes captured before serving, smallest first: every token bucket up to
    `max_tokens` with every slot bucket up to `max_slots` that such a batch can have."""
    tokens = sorted({token_bucket(n) for n in range(1, max_tokens + 1, 64)} | {token_bucket(max_tokens)})
    slots = [s for s in (16, 32, 64, 128, 256, 512, 1024, 2048) if s <= max_slots]
    return sorted(((t, s) for t in tokens if t <= max_tokens for s in slots if t <= (s - 1) * max_len + 4096),
                  key=lambda x: (x[0] * x[1], x))


class PackedGraphEmbedder(GraphedEmbedder):
    """A GraphedEmbedder whose batches run packed (a decoder on a GPU); padded graphs if packing fails its check."""

    def __init__(self, emb: Any, max_tokens: int = 16384):
        super().__init__(emb, max_tokens)
        self.packed = True
        self.packing_checked = False
        # the longest text the usual shapes admit (FlashAttention sizes its grid by it, so it is a constant of
        # every captured shape); a batch with a longer text runs at its `len_bucket` (a few values, not its own
        # length: each value is a graph shape, and a compiled model may compile again for a new one)
        self.max_len = min(-(-max(self.spec.max_length, 16) // 8) * 8, 512)
        self.long_len = max(self.max_len, -(-self.spec.max_length // 8) * 8)
        # tokens: real ones, and what the packed batches ran (real plus graph filler)
        self.stats.update(packed_batches=0, packed_tokens=0, real_tokens=0)
        self.ran_tokens = 0

    # the engine plans packed batches by real tokens: no width or row rounding
    def pad_rows(self, rows: int) -> int:
        return rows if self.packed else super().pad_rows(rows)

    def pad_width(self, width: int) -> int:
        return width if self.packed else super().pad_width(width)

    # --- packed forward -----------------------------------------------------------------------------------
    def _tensors(self, p: varlen.Packed) -> dict[str, Any]:
        import torch

        if str(self.device).startswith("cuda"):  # through pinned memory: a pageable copy waits for the device
            return {k: to_device(v, self.device) for k, v in p.arrays().items()}
        return {k: torch.from_numpy(v) for k, v in p.arrays().items()}

    def _run_packed(self, t: dict[str, Any], max_len: int | None = None) -> Any:
        return varlen.run_packed(self.model, self.spec.pooling, t, max_len or self.max_len, self.needs_token_types)

    def len_bucket(self, longest: int) -> int:
        return len_bucket(longest, self.max_len, self.long_len)

    def _eager_rows(self, batch: dict[str, np.ndarray]) -> Any:
        """The packed forward without a graph (exact token and slot counts), as device rows."""
        import torch

        mask = batch["attention_mask"]
        p = varlen.Packed(batch["input_ids"], mask, self.pad_id)
        with torch.inference_mode():
            return self._run_packed(self._tensors(p), self.len_bucket(int(mask.sum(1).max(initial=1))))[: p.n]

    def eager_packed(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """The packed forward without a graph, waited for (checks)."""
        return self._eager_rows(batch).cpu().numpy()

    def check_packing(self, batch: dict[str, np.ndarray]) -> bool:
        """Packed rows against the padded eager forward of the same rows, once; packing stays on if they agree."""
        self.packing_checked = True
        try:
            got = self.eager_packed(batch)
        except Exception as e:  # noqa: BLE001 - no varlen kernel here: padded graphs, as before
            log.warning("packed batches turned off (%s: %s); batches are padded", type(e).__name__, e)
            self.packed = False
            return False
        want = self.reference_forward(batch)
        cos = row_cosines(got, want)
        if not np.isfinite(cos).all() or cos.min() < self.min_cos:
            log.warning("packed batches turned off: min cosine %.6f against the padded forward (< %g)",
                        float(np.nanmin(cos)), self.min_cos)
            self.packed = False
            return False
        self.stats["packing_check_cosine"] = round(float(cos.min()), 6)
        return True

    def launch(self, batch: dict[str, np.ndarray]) -> Any:
        if not self.packing_checked:
            self.check_packing(batch)
        self.ran_tokens = 0  # tokens this batch really ran (the engine's telemetry); 0: the padded batch
        if not self.packed:
            return super().launch(batch)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        n, used = ids.shape[0], int(mask.sum())
        key = (token_bucket(used), slot_bucket(n), self.len_bucket(int(mask.sum(1).max(initial=0))))
        self.stats["packed_batches"] += 1
        self.stats["real_tokens"] += used
        if not self.on or key[0] > self.max_tokens or self.shapes.get(key, 0) is None:
            self.stats["eager_batches"] += 1
            self.stats["packed_tokens"] += used
            self.ran_tokens = used
            rows = self._eager_rows(batch)  # queued, not waited for: the engine builds the next batch meanwhile
            return to_host(rows) if rows.is_cuda else rows.numpy()
        self.stats["packed_tokens"] += key[0]
        self.ran_tokens = key[0]
        p = varlen.Packed(ids, mask, self.pad_id, key[0], key[1], max_len=key[2])
        shape = self.shapes.get(key)
        if shape is None:
            return self._first_packed(key, p)
        return self._replay(shape, p.arrays(), n)

    def _first_packed(self, key: tuple[int, int, int], p: varlen.Packed) -> np.ndarray:
        """`p` at first sight of its packed shape: captured and checked as padded shapes are (GraphedEmbedder);
        a shape that cannot be captured runs packed eagerly, at its bucketed size."""
        import torch

        def capture() -> tuple[_Shape, np.ndarray]:
            return self._record(lambda **t: self._run_packed(t, key[2]), self._tensors(p))

        def eager() -> np.ndarray:
            with torch.inference_mode():
                return self._run_packed(self._tensors(p), key[2])[: p.n].cpu().numpy()

        return self._first(key, "packed shape", capture, p.n, eager)

    # --- warm-up -------------------------------------------------------------------------------------------
    def _synthetic_batch(self, tokens: int, slots: int) -> dict[str, np.ndarray]:
        """`slots - 1` right-padded texts of mixed lengths (<= max_len) filling about `tokens` tokens."""
        texts = slots - 1
        avg = max(1, min(self.max_len, (tokens - 1) // texts))
        lens = [max(1, min(self.max_len, avg - (r * 7) % max(1, avg // 2))) for r in range(texts)]
        ids, mask = self.synthetic_rows(lens, max(lens))
        return {"input_ids": ids, "attention_mask": mask}

    def settle_packing(self) -> bool:
        """Check packing now (on synthetic rows) unless a batch already did; whether batches run packed. For
        callers that plan batches before the first forward (the warm-up, the ceiling)."""
        if not self.packing_checked:
            self.check_packing(self._synthetic_batch(2048, 32))
        return self.packed

    def precapture(self, max_s: float = 30.0, max_rows: int = 64) -> dict[str, Any]:
        """Check packing once, then capture the usual packed shapes (smallest first, until `max_s`)."""
        t0 = time.perf_counter()
        if not self.settle_packing():
            return super().precapture(max(0.0, max_s - (time.perf_counter() - t0)), max_rows)
        shapes = packed_grid(self.max_tokens, self.max_len, slot_bucket(max_rows))
        done = 0
        for tokens, slots in shapes:
            key = (tokens, slots, self.max_len)
            if not self.on or time.perf_counter() - t0 > max_s:
                break
            if key in self.shapes:
                continue
            b = self._synthetic_batch(tokens, slots)
            p = varlen.Packed(b["input_ids"], b["attention_mask"], self.pad_id, tokens, slots, max_len=self.max_len)
            self._first_packed(key, p)
            done += 1
        return {"shapes": len(shapes), "captured": self.stats["captured"], "tried": done,
                "seconds": round(time.perf_counter() - t0, 1), "packed": self.packed}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["cuda_graphs"]["packed"] = self.packed
        return d
