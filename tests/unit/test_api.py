"""The documented library calls (`infertune.bench(BenchConfig(...))`, `infertune.plan(...)`, ...) are the
functions, also after their subpackages were imported (`import infertune.bench.config` once turned
`infertune.bench` into a module, and the README's own snippet did that import)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import infertune
from infertune._api import COMMANDS

LLAMA = str(Path(__file__).parent / "configs" / "llama-3-8b.json")

# every subpackage and module that shares a command's name, imported first
IMPORT_ALL = ("import infertune.bench.config, infertune.bench.runner, infertune.plan.planner, "
              "infertune.doctor.checks, infertune.doctor.schema, infertune.serve.config, infertune.tune, "
              "infertune.validate.config, infertune.inspect, infertune.doctor.explain")


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_every_command_is_its_function_after_its_subpackage_is_imported():
    code = f"""{IMPORT_ALL}
import infertune, importlib, inspect, types
from infertune._api import COMMANDS
for name, (target, module) in COMMANDS.items():
    obj = getattr(infertune, name)
    mod, attr = target.split(':')
    fn = getattr(importlib.import_module(mod), attr)
    assert callable(obj) and obj.function is fn, name
    assert inspect.signature(obj) == inspect.signature(fn), name
    if module:
        assert type(importlib.import_module(module)) is types.ModuleType, module  # plain, not callable
import sys
assert 'torch' not in sys.modules
"""
    r = _py(code)
    assert r.returncode == 0, r.stderr[-2000:]


def test_submodule_paths_keep_working_through_the_command():
    code = """import infertune.bench.config as c
import infertune
from infertune.bench.config import BenchConfig
assert c.BenchConfig is BenchConfig is infertune.bench.config.BenchConfig
import infertune.validate as v
assert v is infertune.validate and callable(v)
from infertune.validate.runner import validate
assert infertune.validate.runner.validate is validate
from infertune.tune import tune, NO_WINNER_EXIT
assert infertune.tune.NO_WINNER_EXIT == NO_WINNER_EXIT == 3 and infertune.tune.function is tune
assert not hasattr(infertune.bench, 'no_such_module')
"""
    r = _py(code)
    assert r.returncode == 0, r.stderr[-2000:]


def test_plan_as_documented():
    import infertune.plan.planner  # noqa: F401  (the import that used to shadow the function)
    from infertune.plan.planner import PlanConfig

    r = infertune.plan(PlanConfig(model=LLAMA, gpu="H100", context=8192))
    assert r.fits and r.kv_bytes_per_token == 131072


def test_doctor_as_documented():
    import infertune.doctor.checks  # noqa: F401
    from infertune.doctor.schema import DoctorConfig

    r = infertune.doctor(DoctorConfig(probe_torch=False))
    assert r.worst in ("ok", "warning", "error") and r.findings


def test_explain_as_documented():
    from infertune.doctor.schema import ExplainConfig

    r = infertune.explain(ExplainConfig(text="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert r.matches


def test_bench_as_documented_reaches_the_function():
    import infertune.bench.config  # noqa: F401
    from infertune.bench.config import BenchConfig

    # nothing listens on port 9: the function runs and says so (a user mistake, not a TypeError); wait_ready=0
    # says it at the first refused connection instead of after the 5 s a starting server is given
    with pytest.raises(infertune.InfertuneError, match="127.0.0.1:9"):
        infertune.bench(BenchConfig(url="http://127.0.0.1:9", api="embeddings", concurrency=[1], duration=1,
                                    wait_ready=0))


@pytest.mark.parametrize("name", ["tune", "serve", "validate", "inspect_model"])
def test_heavy_commands_forward_to_their_function(name, monkeypatch):
    target, _ = COMMANDS[name]
    mod, attr = target.split(":")
    import importlib

    seen = []
    monkeypatch.setattr(importlib.import_module(mod), attr, lambda *a, **k: seen.append((a, k)) or "result")
    assert getattr(infertune, name)("cfg", x=1) == "result" and seen == [(("cfg",), {"x": 1})]


def test_monkeypatch_through_the_command_reaches_the_module(monkeypatch):
    import infertune.bench.runner

    monkeypatch.setattr("infertune.bench.runner.find_knee", "patched")
    assert infertune.bench.runner.find_knee == "patched"


def test_unknown_attribute_says_so():
    with pytest.raises(AttributeError, match="no_such_thing"):
        infertune.no_such_thing  # noqa: B018
    assert "bench" in dir(infertune) and inspect.getdoc(infertune.doctor).startswith("Probe")


def test_all_lists_every_command():
    assert set(infertune.__all__) == {"InfertuneError", "__version__", *COMMANDS}


def test_a_command_survives_copy_and_pickle_free_introspection():
    import copy

    c = copy.copy(infertune.plan)
    assert c is infertune.plan and repr(infertune.plan).startswith("<infertune function plan")
    import pickle

    assert copy.deepcopy(infertune.bench) is infertune.bench
    assert pickle.loads(pickle.dumps(infertune.validate)) is infertune.validate


def test_deploy_as_documented(tmp_path):
    """infertune.deploy(DeployConfig(...)) writes and validates, like `infertune deploy`."""
    import infertune.deploy.config  # the subpackage imported first must not shadow the function
    from infertune.deploy.config import DeployConfig

    r = infertune.deploy(DeployConfig(source="minilm", out=tmp_path, replicas=2))
    assert r.workload.name == "minilm" and {f.path.split("/")[-1] for f in r.files} >= {"compose.yaml", "minilm.yaml"}
    assert (tmp_path / "k8s" / "minilm.yaml").exists()
