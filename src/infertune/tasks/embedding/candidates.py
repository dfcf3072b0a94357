"""Which embedding engines to try on this host, from what it can do (infertune.hardware), as plain data.

Each option says what it needs (`needs`, checked against the detected capabilities), what it is good at
here (`why`, written into results.json) and how fast it is expected to be relative to the fp32 reference
(`prior`: the search starts with the most promising, so the time budget cuts the tail). The priors are
measured speeds relative to torch fp32 with the same length-sorted batches: on the AMX Xeon
(docs/cpu_engines.md, n=4 quiet interleaved rounds) OpenVINO int8 3.0x, OpenVINO bf16 2.9x, ORT dynamic
int8 2.25x, torch bf16 1.9x, ORT static int8 1.6x, OpenVINO fp32 1.16x, ORT fp32 1.1x; on an AVX2-only
EPYC, measured the same way, ORT dynamic int8 1.8x, OpenVINO fp32 1.37x, ORT
fp32 1.22x, OpenVINO int8 slower than its fp32 (no VNNI).

What each option needs from the host is not written here: it is declared once per precision, quantizer and
engine option in infertune.catalog and read through `registry.requirements`. Engines declared there with
their own `offers` (a new or third-party engine) are added after the options below."""

from __future__ import annotations

from dataclasses import replace

from infertune.config import Batching, Candidate
from infertune.engines.embedding_artifact import reference  # noqa: F401 - the search's reference, read from here
from infertune.hardware import Capabilities
from infertune.hardware.sizing import PROBE_TOKENS, max_items, tokens  # noqa: F401 - read from here by the search
from infertune.registry import engine, quant, requirements
from infertune.tuning.task import Option

BASELINE = Candidate(backend="st-naive", precision="fp32", batching=Batching(kind="fixed", size=32))
def options(caps: Capabilities, quick: bool = False, extra: bool = False, arch: str = "encoder") -> list[Option]:
    """Everything worth trying here, each with the host capabilities it needs (infertune.catalog). `extra` adds
    options kept out of the default list because they are known to be slow or redundant here (tried only when
    named with --candidates). `arch`: a decoder's compiled engines run bf16 (the dtype decoders are trained in;
    fp16 can overflow in their activations), an encoder's fp16."""
    dev = caps.device
    out = _written(caps, quick, extra, "bf16" if arch == "decoder" else "fp16") + offered(dev)
    return [replace(o, needs=requirements(o.candidate, dev)) for o in out]


def offered(device: str) -> list[Option]:
    """The options engines declare themselves in the catalog (none of the built-in ones do)."""
    from infertune.catalog import ENGINES

    return [Option(Candidate(backend=name, precision=f.precision, quant=f.quant, options=f.options,
                             batching=tokens(device)), f.why, f.prior, probe_s=f.probe_s)
            for name, e in ENGINES.items() for f in e.offers if f.device == device]


def _written(caps: Capabilities, quick: bool, extra: bool, half: str = "fp16") -> list[Option]:
    """The built-in engines' options, with what they are good at and their priors on this host."""
    dev = caps.device
    tb = tokens(dev)
    C = Candidate
    out = [Option(reference(dev), "the fp32 reference: every candidate is verified against its vectors",
                  1.0, role="reference"),
           Option(BASELINE, "the naive baseline: SentenceTransformer.encode in batches of 32", 0.6,
                  role="baseline")]
    if dev == "cpu":
        cpu = caps.cpu
        int8_kernels = "VNNI/AMX int8 dot products" if cpu.vnni else "AVX2 u8s8 kernels (no VNNI)"
        out += [
            Option(C(backend="torch-eager", precision="bf16", batching=tb),
                   "native bf16 matmuls on AMX tiles" if cpu.amx else "native bf16 (AVX512-BF16)",
                   1.9 if cpu.amx else 1.3),
            Option(C(backend="onnxruntime", precision="int8", quant="ort-dynamic", batching=tb),
                   f"int8 weights (per channel), activations quantized on the fly; ONNX Runtime's {int8_kernels}",
                   2.25 if cpu.vnni else 1.8),
            Option(C(backend="onnxruntime", precision="int8", quant="ort-static", batching=tb),
                   f"int8 weights and activations, ranges calibrated on the workload's calibration split; "
                   f"{int8_kernels}",
                   1.6 if cpu.vnni else 1.5),
            Option(C(backend="openvino", precision="bf16", batching=tb),
                   "OpenVINO's fused CPU graph with native bf16 (its default on AMX)", 2.9 if cpu.amx else 1.5),
            Option(C(backend="openvino", precision="fp32", batching=tb),
                   "OpenVINO's fused CPU graph (LATENCY hint): the fastest lossless engine measured on AVX2", 1.37),
            Option(C(backend="openvino", precision="int8", quant="nncf-ptq", batching=tb),
                   "OpenVINO int8 from NNCF post-training quantization on the calibration split",
                   3.0 if cpu.amx else 2.0),
            Option(C(backend="onnxruntime", precision="fp32", batching=tb), "ONNX Runtime's fused fp32 graph", 1.2),
            Option(C(backend="torch-eager", precision="int8", quant="torch.ao-dynamic", batching=tb),
                   f"torch.ao dynamic int8 Linear layers ({int8_kernels}); usually over MiniLM's accuracy budget",
                   1.3 if cpu.vnni else 1.1),
        ]
        if not quick:
            out.append(Option(C(backend="torch-compile", precision="bf16", batching=tb),
                              "inductor-fused bf16 kernels (a compile per padded shape, ~1 min on 2 cores)",
                              2.0 if cpu.amx else 1.3, probe_s=90.0))
        if extra:  # eager torchao int8 ran at 0.05x on an AVX2 CPU and trailed fp32 on AMX
            out.append(Option(C(backend="torch-eager", precision="int8", quant="torchao-int8-dyn", batching=tb),
                              "torchao int8 dynamic quantization, eager (fast only compiled on GPU)", 0.2))
    else:
        out += [
            Option(C(backend="torch-eager", precision="fp16", batching=tb), "fp16 tensor cores", 4.0),
            # an encoder's batches are padded to their longest text unless packed; a decoder's always pack on a
            # GPU (so this option is dropped for decoders). Packed, MiniLM's forward-only ceiling is ~1.6x the padded
            # one on an H200 (docs/measurements/2026-12-01-h200-engine-overlap)
            Option(C(backend="torch-eager", precision="fp16", options=(("batches", "packed"),), batching=tb),
                   "fp16 with padding-free batches: texts laid end to end, FlashAttention varlen", 4.2),
            Option(C(backend="torch-eager", precision="bf16", batching=tb), "bf16 tensor cores", 3.9),
            Option(C(backend="onnxruntime", precision="fp32", batching=tb), "ONNX Runtime on its CUDA provider", 2.0),
        ]
        out += compiled_gpu_options(tb, half, quick)
        if extra:
            out += [
                Option(C(backend="torch-compile", precision="fp16", options=(("mode", "reduce-overhead"),),
                         batching=tb), "inductor's own CUDA graphs (reduce-overhead), padded batches", 3.0,
                       probe_s=90.0),
                Option(C(backend="torch-eager", precision="fp8", quant="torchao-fp8", batching=tb),
                       "torchao fp8, eager (no compile: each Linear's activation is quantized by its own kernel)",
                       1.5),
                Option(C(backend="torch-eager", precision="int8", quant="torchao-int8-dyn", batching=tb),
                       "torchao int8 dynamic quantization, eager (no compile)", 1.0),
            ]
    return out


def mixed_options(device: str, keep_high: tuple[str, ...], method: str = "ort-dynamic",
                  backend: str | None = None) -> list[Option]:
    """The mixed candidate once the sensitivity search chose the layers to keep high (none: nothing to add).
    `backend`: the engine of the candidate it rescues, when it applies `method` (torchao: eager or compiled, as
    that one ran); else the engine the catalog declares for the rescue."""
    if not keep_high:
        return []
    q = quant(method)
    rescue = q.rescue.get(device) if q else None
    if rescue is None:
        raise ValueError(f"the catalog declares no mixed-precision rescue of {method!r} on {device}")
    backend = backend if backend in q.engines else rescue.engine
    c = Candidate(backend=backend, precision="mixed", quant=method, keep_high=keep_high, batching=tokens(device))
    compiled = engine(backend).first_run.get(device) == "compile"
    why = (f"{q.label} with the {len(keep_high)} most {q.kind}-sensitive Linear layers kept in "
           f"{'bf16' if device == 'cuda' else 'fp32'} (per-layer sensitivity on the calibration split)"
           + (", compiled" if compiled else ""))
    return [Option(c, why, rescue.prior, needs=requirements(c, device), probe_s=90.0 if compiled else None)]


def compiled_gpu_options(tb, half: str, quick: bool) -> list[Option]:
    """The compiled GPU engines: inductor's fused kernels, compiled block by block (one block's compile serves the
    stack), served like eager ones (packed or padded batches, each shape a checked CUDA graph): 2.28x eager bf16 on
    an H100 for a Qwen3-Embedding-0.6B shape (docs/measurements/2026-12-06-h100-compiled-embeddings). fp8's prior
    sits below the lossless engine's: it compiles longer and risks the accuracy budget. The precision ladder
    (tasks/embedding/ladder.py) scales the quantized ones' priors by their measured GEMM speed, or skips them."""
    C = Candidate
    packed = (("batches", "packed"),)
    out = [Option(C(backend="torch-compile", precision=half, batching=tb),
                  f"inductor-fused {half} kernels in CUDA graphs (packed batches for a decoder)", 8.0, probe_s=90.0)]
    if half == "fp16":  # an encoder: padded or packed, whichever measures faster
        out.append(Option(C(backend="torch-compile", precision=half, options=packed, batching=tb),
                          "inductor-fused fp16 kernels in CUDA graphs over padding-free batches", 8.2, probe_s=90.0))
    if not quick:
        out += [
            Option(C(backend="torch-compile", precision="fp8", quant="torchao-fp8", batching=tb),
                   "torchao fp8 rowwise (Hopper/Ada tensor cores), activation scales fused by inductor, in CUDA "
                   "graphs", 5.5, probe_s=120.0),
            Option(C(backend="torch-compile", precision="int8", quant="torchao-int8-dyn", batching=tb),
                   "torchao int8 dynamic quantization, compiled, in CUDA graphs", 5.0, probe_s=120.0),
            # last in line: they pay where the SLO keeps batches small and the weights' bytes dominate (a laptop
            # GPU); on an H100 both trailed bf16 at 1 and 4 texts per batch, and compiled they recompiled for each
            # new batch shape, so they run eagerly in graphs (docs/measurements/2026-12-06-h100-long-text-graphs)
            Option(C(backend="torch-eager", precision="int4", quant="torchao-int4-wo", batching=tb),
                   "torchao int4 weight-only Linear layers (groups of 128, torch's int4 kernel) in CUDA graphs: a "
                   "quarter of the weight bytes, for small latency-bound batches", 1.6),
            Option(C(backend="torch-eager", precision="int8", quant="torchao-int8-wo", batching=tb),
                   "torchao int8 weight-only Linear layers in CUDA graphs: half the weight bytes, for small "
                   "latency-bound batches", 1.5),
        ]
    return out
