"""Quantization methods, one file per family: each exposes `available(device, ...) -> reason | None` and the
function that applies it; the engines in engines/ call them by the candidate's `quant`."""
