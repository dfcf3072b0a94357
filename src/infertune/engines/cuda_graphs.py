"""CUDA graphs for a served PyTorch embedding model: each batch shape, rounded up to a few buckets, is captured
once and then replayed, so a forward pass costs one graph launch instead of a Python call per kernel.

Why: in eager mode every forward is ~1,000 kernel launches for a 28-layer decoder (Qwen3-0.6B shape) and ~150 for
MiniLM, each a Python call. On a fast GPU a small batch finishes in about the time the host needs to launch it, so
eager serving reaches a fraction of the forward-only ceiling (docs/measurements/2026-11-30-h200-cuda-graphs). On a
2-core CPU, the same 28-layer forward with tiny matrices (so nothing but dispatch) costs 24 ms per call.

How (all standard PyTorch, torch.cuda.CUDAGraph):
- shapes: rows and widths rounded up to coarse buckets (`graph_rows`, `bucket_width`: <= 25% filler, ~13 widths
  to 512 tokens), since every shape costs a capture; the engine plans its batches at those widths
  (`pad_width`). A filler row attends one pad token and its output is dropped; extra columns are masked out.
- before serving, the usual shapes (<= 64 rows, <= the batch token budget) are captured, smallest first, within
  a time cap (`precapture`); any other shape up to `max_tokens` is captured on first sight, and bigger batches run
  eagerly (the GPU, not the launches, bounds them).
- an encoder's attention mask is built inside the graph from the 2D padding mask as a 4D boolean mask, which
  transformers passes to SDPA as is: no host sync in the forward, so it can be captured. A decoder gets no
  mask: its rows are right-padded (a left-padded batch runs eagerly) and causal attention never reaches them.
- every graph shares one memory pool (one engine thread replays one graph at a time; each result is copied out
  before the next replay).
- each shape is checked once, at capture, against the eager forward of the same rows (the warm-up run that
  precedes the capture; cosine of every row);
  a shape that does not capture or does not match runs eagerly from then on, and the first one that does not
  match turns graphs off with a log line. Nothing is answered from an unchecked graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from infertune.engines.torch_eager import Pending, TorchEmbedder, collect, right_padded, to_host
from infertune.models.embedding import pool, row_cosines

log = logging.getLogger("infertune.serve")
# a captured shape must give the eager forward's vectors. Same math, but not always the same kernels (cuBLAS may
# pick another algorithm inside a capture), so the bound follows the weights' precision: bf16's own rounding gave
# 0.999898 for one shape (docs/measurements/2026-12-01-h200-packed-embeddings, run 1). A real fault (a wrong mask
# or pooled position) is far below.
MIN_COSINE = 0.9999
MIN_COSINE_HALF = 0.999
# a quantized engine (fp8/int8 activations quantized per row) compiled against its eager twin: inductor computes the
# row scales in fused kernels, so values on a rounding edge land in the neighbouring fp8 step. On the H100 a
# random-weight Qwen3-Embedding shape in fp8 rowwise gave 0.9944 packed-compiled vs padded-eager; a layout fault
# (wrong positions or mask) is far below. The tune's accuracy gate against the fp32 reference judges the answers.
MIN_COSINE_QUANT = 0.99
CAPTURE_FAILURES_OFF = 2  # after this many shapes fail to capture, the engine stops trying (each try costs a run)


def min_cosine(model: Any) -> float:
    """The agreement a graph must show with the eager forward for weights of this model's float dtype."""
    import torch

    p = next(iter(model.parameters()), None)
    return MIN_COSINE_HALF if p is not None and p.dtype in (torch.float16, torch.bfloat16) else MIN_COSINE


# graph buckets are coarser than the engine's rounding: every shape costs a capture, and a server sees many
# (83 first sights in a 20 s benchmark at c=64 cost more than the graphs saved). <= 1/3 filler
GRAPH_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 640,
              768, 1024, 1280, 1536, 2048)


def graph_rows(n: int) -> int:
    """Rows rounded up to a graph bucket (n itself past the largest)."""
    return next((r for r in GRAPH_ROWS if r >= n), n)


def bucket_width(width: int, limit: int) -> int:
    """Sequence length rounded up to a graph bucket: 16, then multiples of 8 to 64, 16 to 128, 32 to 256, 64 to
    512 and 128 beyond (19 widths to 512; <= 25% filler past 16 tokens); never past `limit` rounded up to 8."""
    step = 16 if width <= 16 else 8 if width <= 64 else 16 if width <= 128 else 32 if width <= 256 else \
        64 if width <= 512 else 128
    return min(-(-width // step) * step, -(-limit // 8) * 8)


def grid(limit: int, max_tokens: int, max_rows: int = 64) -> list[tuple[int, int]]:
    """The shapes captured before serving (up to `max_rows` rows and `max_tokens` padded tokens), smallest
    first: the ones where a launch costs most next to the work."""
    widths = sorted({bucket_width(w, limit) for w in range(1, limit + 1)})
    return sorted(((r, w) for r in GRAPH_ROWS if r <= max_rows for w in widths if r * w <= max_tokens),
                  key=lambda s: (s[0] * s[1], s))


def why_not(emb: Any) -> str | None:
    """None when `emb` can be served with CUDA graphs, else why not (one sentence). PyTorch eager and
    torch.compile'd models (inductor's kernels are captured like eager ones), 16-bit or torchao-quantized."""
    from infertune.engines.torch_compile import CompiledEmbedder

    if type(emb) not in (TorchEmbedder, CompiledEmbedder):
        return f"the {type(emb).__name__} engine runs its own way (graphs wrap PyTorch engines only)"
    if getattr(emb, "bucket", 0):
        return "torch.compile mode reduce-overhead captures its own CUDA graphs"
    if not str(emb.device).startswith("cuda"):
        return "CUDA graphs need a CUDA device"
    if emb.candidate.quant and not emb.candidate.quant.startswith("torchao"):
        return f"quantized weights ({emb.candidate.quant}) are served eagerly"
    attn = getattr(getattr(emb.model, "config", None), "_attn_implementation", None)
    if attn != "sdpa":
        return f"the model's attention is {attn!r}; graphs pass a 4D mask to SDPA"
    return None


class _Shape:
    """A captured graph, the static input tensors it reads (by name) and the output it writes."""

    __slots__ = ("graph", "inputs", "out")

    def __init__(self, graph: Any, inputs: dict[str, Any], out: Any):
        self.graph, self.inputs, self.out = graph, inputs, out


class GraphedEmbedder(TorchEmbedder):
    """A TorchEmbedder on a GPU whose forward replays a captured graph per bucketed shape."""

    # True would make the engine also run warm_shapes, capturing an overlapping set of shapes outside
    # precapture's time cap; precapture is this engine's warm-up (serve calls it before /ready)
    compiles_per_shape = False

    def __init__(self, emb: TorchEmbedder, max_tokens: int = 16384):
        super().__init__(emb.spec, emb.tokenizer, emb.model, emb.candidate, emb.device)
        self.pad_id, self.needs_token_types = emb.pad_id, emb.needs_token_types
        self.inner = emb
        # what checks the packed forward: the uncompiled model (a compiled one's eager twin), else the model
        self.reference_model = getattr(emb, "base_model", None) or emb.model
        self.max_tokens = max_tokens  # bigger shapes run eagerly: launch cost is small next to their compute
        self.causal = emb.spec.arch == "decoder"
        self.shapes: dict[tuple[int, ...], _Shape | None] = {}  # None: runs eagerly (did not capture or match)
        self.pool: Any = None
        self.on = True
        # worst_check_cosine: the lowest row cosine any kept graph showed against the eager forward
        self.stats = {"captured": 0, "eager_shapes": 0, "replays": 0, "eager_batches": 0, "worst_check_cosine": 1.0}
        self.min_cos = MIN_COSINE_QUANT if emb.candidate.quant else min_cosine(self.model)
        # a quantized engine's first runs of a shape may still set things up (scales' kernels, autotuning), which a
        # capture cannot hold: one more warm-up run before it
        self.extra_warmups = 1 if emb.candidate.quant else 0

    # --- the forward that a graph records ----------------------------------------------------------------
    def _run(self, ids: Any, mask: Any) -> Any:
        import torch

        if self.causal:  # right-padded rows (forward checks): causal attention never reaches their pads
            kw = {"input_ids": ids}
        else:
            width = ids.shape[1]
            keys = mask.bool()[:, None, None, :]  # [R, 1, 1, W]: which positions hold tokens
            kw = {"input_ids": ids, "attention_mask": keys.expand(ids.shape[0], 1, width, width)}
        if self.needs_token_types:
            kw["token_type_ids"] = torch.zeros_like(ids)
        hidden = self.model(**kw).last_hidden_state
        return pool(hidden, mask, self.spec.pooling)

    def padded(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's ids and 2D mask at its bucketed shape (filler rows attend one pad token)."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        rows, width = ids.shape
        shape = (graph_rows(rows), self.pad_width(width))
        if shape == (rows, width):
            return ids.astype(np.int64, copy=False), mask.astype(np.int64, copy=False)
        big_ids = np.full(shape, self.pad_id, dtype=np.int64)
        big_mask = np.zeros(shape, dtype=np.int64)
        big_ids[:rows, :width], big_mask[:rows, :width] = ids, mask
        big_mask[rows:, 0] = 1
        return big_ids, big_mask

    def pad_rows(self, rows: int) -> int:
        """The rows a batch of this many items runs at (the engine's batch planner costs them)."""
        return graph_rows(rows) if self.on else rows

    def pad_width(self, width: int) -> int:
        """The width a batch of this longest row runs at (the engine plans its batches with it)."""
        return bucket_width(width, max(width, self.spec.max_length))

    def synthetic_rows(self, lens: list[int], width: int) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded rows of these lengths (ids, mask), as the engine collates them; token ids spread over the
        vocabulary. What the warm-up captures and checks shapes on."""
        vocab = max(2, len(self.tokenizer) if hasattr(self.tokenizer, "__len__") else 1000)
        ids = np.full((len(lens), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(lens), width), dtype=np.int64)
        for r, n in enumerate(lens):
            ids[r, :n] = (np.arange(n) * 31 + r) % vocab
            mask[r, :n] = 1
        return ids, mask

    def precapture(self, max_s: float = 30.0, max_rows: int = 64) -> dict[str, Any]:
        """Capture the usual shapes before serving (smallest first, until `max_s`), each checked against the
        eager forward on the same (synthetic) rows; the rest are captured on first sight."""
        import time

        t0 = time.perf_counter()
        shapes = grid(self.spec.max_length, self.max_tokens, max_rows)
        done = 0
        for rows, width in shapes:
            if not self.on or time.perf_counter() - t0 > max_s:
                break
            if (rows, width) in self.shapes:
                continue
            ids, mask = self.synthetic_rows([max(1, width - (r * 7) % max(1, width // 2)) for r in range(rows)],
                                            width)
            self._first_padded((rows, width), {"input_ids": ids, "attention_mask": mask}, ids, mask)
            done += 1
        took = time.perf_counter() - t0
        return {"shapes": len(shapes), "captured": self.stats["captured"], "tried": done, "seconds": round(took, 1)}

    # --- serving -------------------------------------------------------------------------------------------
    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return collect(self.launch(batch))

    def launch(self, batch: dict[str, np.ndarray]) -> Any:
        """A replay is queued and returns at once (collect waits); a first sight runs to the end (it checks)."""
        rows = batch["input_ids"].shape[0]
        ids, mask = self.padded(batch)
        key = ids.shape
        if (not self.on or key[0] * key[1] > self.max_tokens or self.shapes.get(key, 0) is None
                or (self.causal and not right_padded(batch["attention_mask"]))):
            self.stats["eager_batches"] += 1
            return TorchEmbedder.launch(self, batch)
        shape = self.shapes.get(key)
        if shape is None:
            return self._first_padded(key, batch, ids, mask)
        return self._replay(shape, {"ids": ids, "mask": mask}, rows)

    def _first_padded(self, key: tuple[int, int], batch: dict[str, np.ndarray], ids: np.ndarray,
                      mask: np.ndarray) -> np.ndarray:
        """`batch` (its rows bucketed to `ids`/`mask`) at first sight of its shape; eagerly if it cannot capture."""
        return self._first(key, "batch shape", lambda: self._capture(ids, mask), batch["input_ids"].shape[0],
                           lambda: TorchEmbedder.forward(self, batch))

    # --- the graph mechanics, shared with packed graphs (engines/packed_graphs.py) -------------------------
    def _replay(self, shape: _Shape, arrays: dict[str, np.ndarray], rows: int) -> Pending | np.ndarray:
        """Queue: `arrays` into the shape's static inputs (same names, through pinned memory), the replay, and the
        copy of its first `rows` rows to pinned host memory; nothing waits for the device (collect does).
        Stream order keeps it safe with other batches in flight: the next batch's inputs land, and its replay
        reuses the shared pool, only after this replay and its copy out."""
        import torch

        cuda = shape.out.is_cuda  # (a CPU stand-in in the unit tests copies plainly)
        with torch.inference_mode():
            for name, arr in arrays.items():
                src = torch.from_numpy(arr)
                shape.inputs[name].copy_(src.pin_memory() if cuda else src, non_blocking=cuda)
            shape.graph.replay()
            out = to_host(shape.out, rows) if cuda else shape.out[:rows].numpy().copy()
        self.stats["replays"] += 1
        return out

    def _first(self, key: tuple[int, ...], what: str, capture: Callable[[], tuple[_Shape, np.ndarray]],
               rows: int, eager: Callable[[], np.ndarray]) -> np.ndarray:
        """First sight of a shape: capture it (the warm-up before the capture is an eager forward of these very
        rows, and answers this batch), replay, and keep the graph only if the replay gives the same rows. A
        capture that raises marks the shape eager (`eager` answers); a replay that disagrees turns graphs off."""
        self.stats["eager_batches"] += 1
        try:
            shape, warm = capture()
            want = warm[:rows]
            shape.graph.replay()
            got = shape.out[:rows].cpu().numpy()
        except Exception as e:  # noqa: BLE001 - a shape that cannot be captured runs eagerly
            log.warning("CUDA graph capture failed for %s %s (it runs eagerly): %s: %s", what, key,
                        type(e).__name__, e)
            self.shapes[key] = None
            self.stats["eager_shapes"] += 1
            if self.stats["eager_shapes"] >= CAPTURE_FAILURES_OFF:
                log.warning("CUDA graphs turned off: %d shapes failed to capture; batches run without graphs",
                            self.stats["eager_shapes"])
                self.on = False
            return eager()
        cos = row_cosines(got, want)
        if not np.isfinite(cos).all() or cos.min() < self.min_cos:
            log.warning("CUDA graphs turned off: the graph for %s %s gave min cosine %.6f against the eager "
                        "forward of the same rows (< %g); serving eagerly", what, key, float(np.nanmin(cos)),
                        self.min_cos)
            self.on = False
            return want
        self.stats["worst_check_cosine"] = round(min(self.stats["worst_check_cosine"], float(cos.min())), 6)
        self.shapes[key] = shape
        self.stats["captured"] += 1
        return want

    def _record(self, run: Callable[..., Any], inputs: dict[str, Any]) -> tuple[_Shape, np.ndarray]:
        """Capture `run(**inputs)` (device tensors) as a graph in the shared pool; return it with the output of
        the eager warm-up run that precedes the capture (off the capture stream: cuBLAS workspaces, lazy inits)."""
        import torch

        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(1 + self.extra_warmups):
                    warm = run(**inputs)
            torch.cuda.current_stream().wait_stream(side)
            warm = warm.cpu().numpy()
            graph = torch.cuda.CUDAGraph()
            # captured on the stream the warm-up ran on: what a library sets up lazily per stream (cuBLASLt's
            # workspace for the fp8 GEMMs) exists before the capture, which must not allocate or sync.
            # thread_local: the engine's answer thread may wait on an earlier batch's copy during a capture
            with torch.cuda.graph(graph, pool=self.pool, stream=side, capture_error_mode="thread_local"):
                out = run(**inputs)
            if self.pool is None:
                self.pool = graph.pool()
        return _Shape(graph, inputs, out), warm

    def _capture(self, ids: np.ndarray, mask: np.ndarray) -> tuple[_Shape, np.ndarray]:
        """The graph for this padded shape, and the eager forward's rows from the warm-up that precedes it."""
        import torch

        dev = torch.device(self.device)
        return self._record(self._run, {"ids": torch.from_numpy(ids).to(dev), "mask": torch.from_numpy(mask).to(dev)})

    def reference_forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """The padded forward of the uncompiled model: what packing and compiling are checked against."""
        import torch

        model, self.model = self.model, self.reference_model
        try:
            with torch.inference_mode():
                return self._pooled(batch).cpu().numpy()
        finally:
            self.model = model

    def save(self, path: Any) -> dict[str, Any]:
        return self.inner.save(path)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if "compiled" in (inner := self.inner.describe()):
            d["compiled"] = inner["compiled"]
        d["cuda_graphs"] = {"on": self.on, "shapes": len([s for s in self.shapes.values() if s is not None]),
                            "max_tokens": self.max_tokens, **self.stats}
        return d
