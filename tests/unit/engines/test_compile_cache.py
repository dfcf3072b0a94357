"""Compiled engines' machinery on the CPU (inductor runs here too): block-by-block compilation of a stack of identical
blocks, the eager twin that checks it, the compile cache's key, directory and the kernels an artifact carries. The
compiled model in CUDA graphs is tests/gpu/test_cuda_graphs.py."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.nn.functional.silu(self.lin(x))


class Stack(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(n))
        self.head = torch.nn.ModuleList([torch.nn.Linear(16, 16)])

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return self.head[0](x)


def test_blocks_finds_the_stack_of_identical_blocks():
    from infertune.engines.torch_compile import blocks

    assert blocks(Stack(6)) is not None and len(blocks(Stack(6))) == 6
    assert blocks(Stack(3)) is None  # too shallow to be worth a regional compile


def test_regional_compile_gives_the_eager_answers_and_its_eager_twin_runs_without_dynamo():
    from torch._dynamo.utils import counters

    from infertune.engines.torch_compile import _EagerView, compile_model, compile_seconds

    torch.manual_seed(0)
    model = Stack(4).eval()
    x = torch.randn(5, 16)
    with torch.inference_mode():
        want = model(x)
        compiled, scope = compile_model(model, None, "regional")
        assert compiled is model and scope == "regional (4 x Block)"
        before = compile_seconds()
        got = compiled(x)
        assert compile_seconds() > before  # it compiled
        assert torch.allclose(got, want, atol=1e-5)
        frames = dict(counters["frames"])
        twin = _EagerView(model)(torch.randn(7, 16))
        assert twin.shape == (7, 16) and dict(counters["frames"]) == frames  # dynamo never ran
    whole, scope = compile_model(Stack(2), None, "regional")  # no stack of >= 4 blocks: compiled whole
    assert scope == "full" and whole is not None


def test_the_cache_key_names_what_decides_a_compile(tmp_path):
    from infertune.engines import compile_cache

    (tmp_path / "config.json").write_text('{"hidden_size": 16}')
    k1, parts = compile_cache.key(str(tmp_path), "torch-compile/bf16", "cpu")
    assert k1 == compile_cache.key(str(tmp_path), "torch-compile/bf16", "cpu")[0]
    assert k1 != compile_cache.key(str(tmp_path), "torch-compile/fp8/torchao-fp8", "cpu")[0]
    (tmp_path / "config.json").write_text('{"hidden_size": 32}')
    assert k1 != compile_cache.key(str(tmp_path), "torch-compile/bf16", "cpu")[0]
    assert parts["versions"]["torch"] and parts["engine"] == "torch-compile/bf16"


def test_setup_moves_torchs_default_cache_keeps_a_users_and_loads_carried_kernels(tmp_path, monkeypatch, caplog):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from infertune.engines import compile_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    model = tmp_path / "artifact" / "model"
    model.mkdir(parents=True)
    spec, cand = SimpleNamespace(path=str(model)), SimpleNamespace(engine_id="torch-compile/bf16")
    info = compile_cache.setup(spec, cand, "cpu")
    assert info["cache_dir"] == str(tmp_path / "xdg" / "infertune" / "inductor") and not info["from_artifact"]
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == info["cache_dir"]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache.setup(spec, cand, "cpu")["cache_dir"] == str(tmp_path / "mine")
    # a carried file that is not torch's cache format: a warning and a compile, never an error
    (model.parent / compile_cache.FILE).write_bytes(b"not a cache")
    with caplog.at_level(logging.WARNING, logger="infertune"):
        assert compile_cache.setup(spec, cand, "cpu")["from_artifact"] is False
    assert "not loaded" in caplog.text


def test_what_a_process_compiled_is_saved_and_loads_again(tmp_path):
    from infertune.engines import compile_cache

    model = Stack(4).eval()
    model.layers[0].compile(dynamic=True)
    with torch.inference_mode():
        model(torch.randn(3, 16))
    saved = compile_cache.save(tmp_path)
    assert saved is not None and saved["compile_cache_bytes"] > 0
    assert (Path(tmp_path) / compile_cache.FILE).stat().st_size == saved["compile_cache_bytes"]
    assert compile_cache.load(Path(tmp_path) / compile_cache.FILE) is True
