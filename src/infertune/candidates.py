"""Which candidates to try on a device. Backend x precision x quantization x batching, as plain data."""

from __future__ import annotations

from infertune.config import Batching, Candidate

BASELINE = Candidate(backend="st-naive", precision="fp32", batching=Batching(kind="fixed", size=32))


def reference(device: str) -> Candidate:
    return Candidate(backend="torch-eager", precision="fp32", batching=default_batching(device))


def default_batching(device: str) -> Batching:
    return Batching(kind="tokens", size=1024 if device == "cpu" else 16384, max_items=256 if device == "cpu" else 1024)


def _tokens(n: int, device: str) -> Batching:
    return Batching(kind="tokens", size=n, max_items=256 if device == "cpu" else 1024)


def default_candidates(device: str, quick: bool = False) -> list[Candidate]:
    """Everything worth trying on `device`, cheapest-to-build first. Mixed-precision candidates are
    added by tune once the sensitivity search has chosen which layers stay high."""
    tb = default_batching(device)
    fixed32 = Batching(kind="fixed", size=32)
    c: list[Candidate] = [BASELINE, reference(device)]
    if device == "cpu":
        c += [Candidate(backend="torch-eager", precision="bf16", batching=b)
              for b in (fixed32, _tokens(512, device), _tokens(768, device), tb, _tokens(2048, device))]
        c += [Candidate(backend="torch-eager", precision="int8", quant="torch.ao-dynamic", batching=tb),
              Candidate(backend="onnxruntime", precision="fp32", batching=tb),
              Candidate(backend="onnxruntime", precision="int8", quant="ort-dynamic", batching=tb)]
        if not quick:
            # torchao int8 weight-only is left out on CPU: eager it runs slower than fp32 here (see docs)
            # torchao int8-dynamic runs eager here: under torch.compile it costs ~60 s of compile on 2 cores
            # and still trails bf16 (see ../shared/reference); ask for it with a candidates list if wanted
            c += [Candidate(backend="torch-compile", precision="bf16", batching=tb),
                  Candidate(backend="torch-eager", precision="int8", quant="torchao-int8-dyn", batching=tb)]
    else:
        big = _tokens(65536, device)
        c += [Candidate(backend="torch-eager", precision=p, batching=b)
              for p in ("fp16", "bf16") for b in (_tokens(4096, device), tb, big)]
        c += [Candidate(backend="torch-compile", precision="fp16", batching=b) for b in (tb, big)]
        c += [Candidate(backend="onnxruntime", precision="fp32", batching=tb)]
        if not quick:
            c += [Candidate(backend="torch-compile", precision="fp16", options=(("mode", "reduce-overhead"),),
                            batching=tb),
                  Candidate(backend="torch-compile", precision="int8", quant="torchao-int8-dyn", batching=tb),
                  Candidate(backend="torch-compile", precision="fp8", quant="torchao-fp8", batching=tb)]
    return c


def mixed_candidates(device: str, keep_high: tuple[str, ...]) -> list[Candidate]:
    if device != "cpu" or not keep_high:
        return []
    tb = default_batching(device)
    return [Candidate(backend="torch-eager", precision="mixed", quant="torch.ao-dynamic", keep_high=keep_high,
                      batching=tb),
            Candidate(backend="onnxruntime", precision="mixed", quant="ort-dynamic", keep_high=keep_high,
                      batching=tb)]


def matches(c: Candidate, filters: list[str] | None) -> bool:
    """A candidate is kept if any filter is a substring of its id (baseline and reference always kept)."""
    return not filters or any(f in c.id for f in filters)
