"""Every embedding engine and quantization method, declared once: where its code lives, what it needs from the
host, and how simple it is. The candidate rules, the tie rule, the mixed-precision step and the artifact loader
read these tables (through infertune.registry) instead of testing names. Plain data: no imports beyond the
standard library, so `import infertune` stays light.

Needs are capability names checked by `infertune.hardware.needs` (cpu-bf16, cpu-vnni, gpu-bf16, gpu-fp8 ...).
Rank is simplicity: inside the tie margin the lowest engine rank plus quantization rank wins."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Offer:
    """A candidate an engine proposes by itself (engines whose host-tuned options are not written out in
    tasks/embedding/candidates.py, e.g. a new or third-party engine)."""

    device: str
    precision: str
    why: str
    prior: float = 1.0
    quant: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    probe_s: float | None = None


@dataclass(frozen=True)
class Engine:
    target: str  # "module:Class", imported lazily by infertune.registry.load_backend
    rank: int = 1  # moving parts in production: 0 eager torch, 1 an exported graph, 2 a compiler
    # what the first run of each new shape does per device ("compile" or "capture" a CUDA graph): warm-ups are
    # not cut short, and a compile gets a longer probe
    first_run: dict[str, str] = field(default_factory=dict)
    option_needs: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (option, value) -> needs
    artifact: str | None = None  # "module:function" loading a saved artifact; None: prepare() from the weights
    offers: tuple[Offer, ...] = ()


@dataclass(frozen=True)
class Rescue:
    """How mixed precision rescues an over-budget candidate of a quantizer on one device (tasks/embedding/mixed.py)."""

    search: str  # the quantizer whose per-layer sensitivity is measured (its rounding stands in for this one's)
    engine: str  # the mixed candidate's engine, unless the rescued candidate ran on another
    prior: float


@dataclass(frozen=True)
class Quant:
    label: str  # in words, for the candidate's `why`
    kind: str  # int8 | fp8: what the quantized layers compute in
    module: str  # infertune.quantize.<x>: its available(device, method) says whether it runs here
    engines: tuple[str, ...]  # the engines that apply it
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # device -> capabilities
    rank: int = 10  # an unquantized candidate beats any quantized one in a tie (no calibration, answers kept)
    rescue: dict[str, Rescue] = field(default_factory=dict)  # device -> mixed-precision rescue
    # device -> the GEMM of infertune.hardware.gemm_ladder its quantized Linear layers run there ("fp8", "int8"):
    # the precision ladder decides on it by that GEMM's measured speed (tasks/embedding/ladder.py). None where its
    # kernels are its own (ONNX Runtime, OpenVINO, fbgemm): torch's GEMMs would not speak for them
    gemm: dict[str, str] = field(default_factory=dict)
    # activation scales computed from each batch (dynamic quantization): a text's answer depends on its neighbours by
    # design, and is judged at the budget's per-text bound (tasks/embedding/invariance.py)
    per_batch_scales: bool = False
    # weights stored quantized, activations kept 16-bit: the GEMMs are 16-bit ones on dequantized tiles (int8) or
    # torch's int4 kernel; the kernels check asks for `kind` only where that kernel is its own (int4)
    weight_only: bool = False


# dtype needs per device: bf16 needs native bf16 (else emulated and slower than fp32), fp8 compute capability 8.9
PRECISION_NEEDS: dict[str, dict[str, tuple[str, ...]]] = {
    "bf16": {"cpu": ("cpu-bf16",), "cuda": ("gpu-bf16",)},
    "fp8": {"cuda": ("gpu-fp8",)},
}

_B = "infertune.engines."
ENGINES: dict[str, Engine] = {
    "st-naive": Engine(_B + "st_naive:SentenceTransformerNaive"),
    "torch-eager": Engine(_B + "torch_eager:TorchEager", rank=0, first_run={"cuda": "capture"},
                          option_needs={("batches", "packed"): ("gpu-bf16",)}),  # FlashAttention varlen
    "torch-compile": Engine(_B + "torch_compile:TorchCompile", rank=2,
                            first_run={"cpu": "compile", "cuda": "compile"},
                            option_needs={("batches", "packed"): ("gpu-bf16",)}),
    "onnxruntime": Engine(_B + "onnxruntime:OnnxRuntime", artifact=_B + "onnxruntime:load_artifact"),
    "openvino": Engine(_B + "openvino:OpenVino", artifact=_B + "openvino:load_artifact"),
    "fake": Engine(_B + "fake:FakeBackend"),
}

_TORCH = ("torch-eager", "torch-compile")
_TAO = "infertune.quantize.torchao"
QUANTS: dict[str, Quant] = {  # in this order: the mixed-precision sources and search methods are listed by it
    "ort-dynamic": Quant("ORT dynamic int8", "int8", "infertune.quantize.ort", ("onnxruntime",),
                         per_batch_scales=True, rescue={"cpu": Rescue("torch.ao-dynamic", "onnxruntime", 2.0)}),
    "ort-static": Quant("ORT static int8", "int8", "infertune.quantize.ort", ("onnxruntime",)),
    "nncf-ptq": Quant("OpenVINO NNCF int8", "int8", "infertune.quantize.nncf", ("openvino",),
                      needs={"cpu": ("cpu-vnni",)}),  # without VNNI its int8 kernels are slower than fp32
    "torch.ao-dynamic": Quant("torch.ao dynamic int8", "int8", "infertune.quantize.torch_ao", ("torch-eager",),
                              per_batch_scales=True),
    # torchao's kernels scale activations per token (PerRow, per-token int8): answers independent of the batch
    # torchao's GPU kernels take bf16 activations; on a CPU it is tried only when named (tests of the GPU path)
    "torchao-fp8": Quant("torchao fp8", "fp8", _TAO, _TORCH, needs={"cuda": ("gpu-fp8",)},
                         rescue={"cuda": Rescue("torchao-fp8", "torch-compile", 3.0)}, gemm={"cuda": "fp8"}),
    # weight-only: 16-bit activations, int8 or int4 weights; for small batches, where GEMMs wait on weight bytes
    "torchao-int8-wo": Quant("torchao int8 weight-only", "int8", _TAO, _TORCH, needs={"cuda": ("gpu-bf16",)},
                             weight_only=True),
    "torchao-int4-wo": Quant("torchao int4 weight-only", "int4", _TAO, _TORCH, needs={"cuda": ("gpu-bf16",)},
                             weight_only=True),
    "torchao-int8-dyn": Quant("torchao int8", "int8", _TAO, _TORCH, needs={"cuda": ("gpu-bf16",)},
                              rescue={"cpu": Rescue("torchao-int8-dyn", "torch-eager", 0.2),
                                      "cuda": Rescue("torchao-int8-dyn", "torch-compile", 3.0)},
                              gemm={"cuda": "int8", "cpu": "int8"}),
}
