"""Quantization methods, one file per family. Each module exposes FITS (backends it applies to),
`available(device) -> reason | None` and an apply function."""

METHODS = {
    "torch.ao-dynamic": "infertune.quantize.torch_ao",
    "torchao-int8-dyn": "infertune.quantize.torchao",
    "torchao-int8-wo": "infertune.quantize.torchao",
    "torchao-fp8": "infertune.quantize.torchao",
    "ort-dynamic": "infertune.quantize.ort",
    "ort-static": "infertune.quantize.ort",
    "nncf-ptq": "infertune.quantize.nncf",
}
