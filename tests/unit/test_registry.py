"""The one registry (infertune.registry over infertune.catalog): an engine or quantizer declared there reaches the
candidate rules, the host checks, the tie rule, the mixed-precision step and the artifact loader, with no name
tested anywhere else."""

import importlib.util
import json
import sys
import types

import pytest

from infertune import catalog, registry
from infertune.catalog import Engine, Offer
from infertune.config import Candidate, TuneConfig
from infertune.hardware import CPU, GPU, Capabilities, needs
from infertune.tasks.embedding import candidates

AMX = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
                 "amx_bf16", "amx_int8"})
AVX2 = frozenset({"avx2", "fma"})
T4 = Capabilities(device="cuda", cpu=CPU(flags=AVX2), gpus=(GPU(name="T4", capability=(7, 5)),))
H200 = Capabilities(device="cuda", cpu=CPU(flags=AMX), gpus=(GPU(name="H200", capability=(9, 0)),))


@pytest.fixture
def toy(monkeypatch):
    """A new engine declared in the catalog only: rank 0, a bf16 and an fp32 offer on the CPU, its own loader."""
    mod = types.ModuleType("toy_engine")
    mod.ToyBackend = type("ToyBackend", (), {})
    mod.load_artifact = lambda root, manifest, cand, device: ("toy artifact", cand.id, device)
    monkeypatch.setitem(sys.modules, "toy_engine", mod)
    offers = (Offer("cpu", "bf16", "toy bf16 kernels", 5.0), Offer("cpu", "fp32", "toy fp32", 0.5),
              Offer("cuda", "fp16", "toy on a GPU", 2.0, options=(("batches", "packed"),)))
    monkeypatch.setitem(catalog.ENGINES, "toy", Engine("toy_engine:ToyBackend", rank=0,
                                                       artifact="toy_engine:load_artifact", offers=offers,
                                                       option_needs={("batches", "packed"): ("gpu-bf16",)}))
    return mod


def test_a_new_engine_declared_in_the_registry_shows_up_in_candidates(toy):
    amx, avx2 = Capabilities(cpu=CPU(flags=AMX)), Capabilities(cpu=CPU(flags=AVX2))
    opts = {o.candidate.id: o for o in candidates.options(amx)}
    assert "toy/bf16/tokens-512" in opts and "toy/fp32/tokens-512" in opts
    bf16 = opts["toy/bf16/tokens-512"]
    assert (bf16.why, bf16.prior, bf16.needs, bf16.role) == ("toy bf16 kernels", 5.0, ("cpu-bf16",), "candidate")
    # its needs are its precision's: on an AVX2-only CPU the bf16 offer is skipped with the usual sentence
    skipped = {o.candidate.id: needs(avx2, o.needs) for o in candidates.options(avx2)}
    assert "no native bf16" in skipped["toy/bf16/tokens-512"] and skipped["toy/fp32/tokens-512"] is None
    # engine options declare needs too: its packed GPU offer needs bf16 tensor cores
    gpu = {o.candidate.id: needs(T4, o.needs) for o in candidates.options(T4)}
    assert "compute capability >= 8.0" in gpu["toy/fp16/batches=packed/tokens-16384"]
    assert registry.load_backend("toy") is toy.ToyBackend and "toy" in registry.backend_names()


def test_the_built_in_engines_offer_nothing_beyond_the_written_rules():
    for dev in ("cpu", "cuda"):
        assert candidates.offered(dev) == []


def test_the_tie_rule_reads_the_declared_simplicity(toy):
    from infertune.results import CandidateResult
    from infertune.tasks.embedding.task import EmbeddingTask

    task = EmbeddingTask(TuneConfig(), None, None)

    def rank(backend, quant=None):
        return task.rank(CandidateResult(name="x", status="ok", candidate={"backend": backend, "quant": quant}))

    assert rank("toy") == 0 < rank("onnxruntime") == rank("openvino") == 1 < rank("torch-compile") == 2
    assert rank("torch-eager") == 0 and rank("st-naive") == 1
    assert rank("some-plugin") == 1  # declared only through an entry point: the catalog's default
    assert rank("torch-eager", "torchao-fp8") == 10 and rank("onnxruntime", "ort-dynamic") == 11
    assert rank("torch-eager", "someone-elses-int4") == 10  # an undeclared quantizer still counts as one
    # and so the pick: the declared-simpler engine wins inside the tie margin
    from infertune.tuning.decide import pick

    def res(name, backend, speed):
        return CandidateResult(name=name, status="ok", items_per_s=speed, candidate={"backend": backend})

    win, fastest = pick(task, [res("compiled", "torch-compile", 262.0), res("toy", "toy", 255.0)], 0.05)
    assert (win.name, fastest.name) == ("toy", "compiled")


def test_requirements_join_precision_quantizer_and_engine_options_once():
    def req(dev, **kw):
        return registry.requirements(Candidate(**kw), dev)

    assert req("cpu", backend="torch-eager", precision="bf16") == ("cpu-bf16",)
    assert req("cuda", backend="torch-eager", precision="bf16") == ("gpu-bf16",)
    assert req("cpu", backend="openvino", precision="int8", quant="nncf-ptq") == ("cpu-vnni",)
    assert req("cuda", backend="torch-eager", precision="fp8", quant="torchao-fp8") == ("gpu-fp8",)
    assert req("cuda", backend="torch-compile", precision="mixed", quant="torchao-int8-dyn") == ("gpu-bf16",)
    assert req("cuda", backend="torch-eager", precision="fp16", options=(("batches", "packed"),)) == ("gpu-bf16",)
    assert req("cpu", backend="torch-eager", precision="int8", quant="torchao-int8-dyn") == ()
    assert req("cpu", backend="onnxruntime", precision="int8", quant="ort-dynamic") == ()


def test_compiled_and_eager_torchao_int8_share_one_floor_on_a_gpu():
    skipped = {o.candidate.id: needs(T4, o.needs) for o in candidates.options(T4, extra=True)}
    floor = "bf16 needs compute capability >= 8.0; T4 is 7.5"
    assert skipped["torch-compile/int8/torchao-int8-dyn/tokens-16384"] == floor
    assert skipped["torch-eager/int8/torchao-int8-dyn/tokens-16384"] == floor
    assert all(needs(H200, o.needs) is None for o in candidates.options(H200, extra=True))


def test_mixed_precision_sources_and_search_methods_come_from_the_declared_rescues():
    assert registry.rescued("cpu") == ("ort-dynamic", "torchao-int8-dyn")
    assert registry.rescued("cuda") == ("torchao-fp8", "torchao-int8-dyn")
    assert registry.search_methods("cpu") == ("torch.ao-dynamic", "torchao-int8-dyn")
    assert registry.search_methods("cuda") == ("torchao-fp8", "torchao-int8-dyn")
    with pytest.raises(ValueError, match="no mixed-precision rescue"):
        candidates.mixed_options("cpu", ("a",), "torchao-fp8")


def test_every_declaration_points_at_code_that_exists():
    for name, e in catalog.ENGINES.items():
        for target in filter(None, (e.target, e.artifact)):
            assert importlib.util.find_spec(target.split(":")[0]) is not None, (name, target)
    for name, q in catalog.QUANTS.items():
        assert importlib.util.find_spec(q.module) is not None, name
        assert q.engines and all(e in catalog.ENGINES for e in q.engines), name
        assert all(r.engine in q.engines for r in q.rescue.values()), name


def test_quantizer_availability_goes_through_its_declared_module():
    assert registry.quant_available("torch.ao-dynamic", "cuda") == "torch.ao dynamic int8 kernels are CPU-only"
    assert registry.quant_available("torch.ao-dynamic", "cpu") is None
    assert "unknown quantization" in registry.quant_available("int3", "cpu")


def test_the_artifact_loader_is_the_one_the_engine_declares(toy, tmp_path):
    from infertune.engines.embedding_artifact import load_embedder
    from infertune.tasks.embedding.artifact import FORMAT, MANIFEST

    cand = Candidate(backend="toy", precision="bf16")
    (tmp_path / MANIFEST).write_text(json.dumps({"format": FORMAT, "candidate": cand.model_dump(mode="json"),
                                                 "device": "cpu", "files": {}, "embedding": {}}))
    assert load_embedder(tmp_path) == ("toy artifact", cand.id, "cpu")
    assert load_embedder(tmp_path, "cuda")[2] == "cuda"
