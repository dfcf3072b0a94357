"""Weight-only int8 for CPU decode: per-output-channel symmetric int8 weights, activations kept in
bf16/fp32, matmul by PyTorch's own `torch._weight_int8pack_mm` kernel (the int8 CPU path gpt-fast
uses). Decode reads 1 byte per weight instead of 4 (fp32) or 2 (bf16); with bf16 activations the kernel
is the fast one on x86 (fp32 activations take a slow path)."""

from __future__ import annotations


def _module():
    import torch

    class Int8WeightOnlyLinear(torch.nn.Module):
        def __init__(self, lin: torch.nn.Linear, act_dtype):
            super().__init__()
            w = lin.weight.detach().float()
            s = (w.abs().amax(1) / 127).clamp_min(1e-12)
            self.register_buffer("weight_int8", (w / s[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous())
            self.register_buffer("scales", s.to(act_dtype))
            self.bias = None if lin.bias is None else torch.nn.Parameter(lin.bias.detach().to(act_dtype), False)
            self.in_features, self.out_features, self.act_dtype = lin.in_features, lin.out_features, act_dtype

        def forward(self, x):
            shp = x.shape
            y = torch._weight_int8pack_mm(x.reshape(-1, shp[-1]).to(self.act_dtype), self.weight_int8, self.scales)
            y = y.reshape(*shp[:-1], self.out_features)
            return (y + self.bias if self.bias is not None else y).to(x.dtype)

    return Int8WeightOnlyLinear


def int8_weight_only(model, include_lm_head: bool = True):
    """Replace every nn.Linear (and lm_head unless told not to) in place; returns the model."""
    import torch

    cls = _module()
    act = next(model.parameters()).dtype
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            full = f"{name}.{cname}" if name else cname
            if isinstance(child, torch.nn.Linear) and (include_lm_head or full != "lm_head"):
                setattr(mod, cname, cls(child, act))
    if hasattr(model.config, "tie_word_embeddings"):
        model.config.tie_word_embeddings = False  # lm_head is now its own int8 copy
    return model
