"""The image a workload runs: for `infertune serve`, built from docker/Dockerfile.{cpu,cuda} in the checkout with
exactly the extras the artifact's engine needs; for vLLM, the vllm/vllm-openai tag whose CUDA the target's driver
runs (data/cuda_compat.toml's [[vllm_image]] rows, newest first)."""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import BaseModel

from infertune.errors import InfertuneError

ENGINE_EXTRAS = {"onnxruntime": ["serve", "onnx"], "openvino": ["serve", "onnx", "openvino"]}
TORCH_INDEX = {"cpu": "https://download.pytorch.org/whl/cpu", "cuda": "https://download.pytorch.org/whl/cu129"}
# docker run options for GPU engines: NVIDIA's recommendation for its framework containers (pinned host memory,
# NCCL, deep stacks in compiled kernels); Docker's defaults are a memlock of 64 KiB-8 MiB and an 8 MiB stack
GPU_ULIMITS = {"memlock": -1, "stack": 67108864}


class Image(BaseModel):
    name: str
    dockerfile: str | None = None  # relative to the checkout
    extras: list[str] = []
    build: str | None = None  # the command that builds it
    context: str | None = None
    notes: list[str] = []


def checkout() -> Path | None:
    """The source checkout this code runs from, when it has the Dockerfiles."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "docker" / "Dockerfile.cpu").is_file() and (root / "pyproject.toml").is_file() else None


def engine_extras(backend: str | None, device: str) -> list[str]:
    extras = list(ENGINE_EXTRAS.get(backend or "", ["serve"]))
    return extras + (["gpu"] if device == "cuda" else [])


def serve_image(backend: str | None, device: str, image: str | None) -> Image:
    from infertune import __version__

    extras = engine_extras(backend, device)
    engine = {"onnxruntime": "onnxruntime", "openvino": "openvino"}.get(backend or "", "torch")
    name = image or f"infertune:{__version__}-{device}-{engine}"
    dockerfile = f"docker/Dockerfile.{device}"
    root = checkout()
    ctx = str(root) if root else "<infertune checkout>"
    args = ["docker", "build", "-f", f"{ctx}/{dockerfile}", "--build-arg", f"EXTRAS={','.join(extras)}"]
    if device == "cuda" and backend == "onnxruntime":
        args += ["--build-arg", "ORT_GPU=1"]
    args += ["-t", name, ctx]
    notes = [] if root else ["this install has no checkout with docker/: build from a clone of the repository"]
    return Image(name=name, dockerfile=dockerfile, extras=extras, build=shlex.join(args), context=ctx, notes=notes)


def vllm_tag(driver_cuda: str | None) -> tuple[str, str | None, list[str]]:
    """(image, minimum driver, notes): the newest table image whose CUDA this driver runs."""
    from infertune.doctor.compat import min_driver, table, vtuple

    rows = sorted(table()["vllm_image"], key=lambda r: (vtuple(r["vllm"]), vtuple(r["cuda"])), reverse=True)
    if not driver_cuda:
        r = rows[0]
        return (r["image"], min_driver(r["cuda"]), [
            f"vLLM image {r['image']} (CUDA {r['cuda']}, driver >= {min_driver(r['cuda'])}): no GPU here and no "
            "--cuda given; pass --cuda X.Y (the CUDA Version `nvidia-smi` or `infertune doctor` shows on the nodes)"])
    dc = vtuple(driver_cuda)[:2]
    if len(dc) < 2:
        raise InfertuneError(f"--cuda takes the driver's CUDA version as major.minor (e.g. 12.9), not {driver_cuda!r}")
    fit = [r for r in rows if vtuple(r["cuda"])[:2] <= dc]
    if not fit:
        low = min(rows, key=lambda r: vtuple(r["cuda"]))
        raise InfertuneError(f"no vLLM image in the compat table runs on a driver with CUDA {driver_cuda}: the oldest, "
                             f"{low['image']}, needs CUDA {low['cuda']} (driver >= {min_driver(low['cuda'])}); update "
                             "the driver or pass --image")
    r = fit[0]
    notes = [f"vLLM image {r['image']}: built for CUDA {r['cuda']}, the newest in the compat table a driver with "
             f"CUDA {driver_cuda} runs"]
    newest = min((x for x in rows if x["vllm"] == rows[0]["vllm"]), key=lambda x: vtuple(x["cuda"]))
    if r["vllm"] != newest["vllm"]:
        notes.append(f"that is vLLM {r['vllm']}; {newest['image']} (vLLM {newest['vllm']}) needs a driver >= "
                     f"{min_driver(newest['cuda'])} (CUDA {newest['cuda']}): update the driver for a current vLLM")
    return r["image"], min_driver(r["cuda"]), notes


def pinned_vllm_tag(vllm: str, driver_cuda: str | None) -> tuple[str, str | None, list[str]]:
    """(image, minimum driver, notes) for the vLLM release tune measured with: that release's image whose CUDA the
    driver runs (the table's rows for it, newest CUDA first), else its default tag, assumed to need the CUDA of the
    newest release in the table."""
    from infertune.doctor.compat import min_driver, vllm_images, vtuple
    from infertune.engines.causal_lm.versions import base_version, image_for

    rows = vllm_images(vllm)
    if not rows:
        cuda = vllm_images()[0]["cuda"]
        return image_for(vllm), min_driver(cuda), [
            f"vLLM image {image_for(vllm)}: the release tune measured with; it is not in data/cuda_compat.toml, so "
            f"its CUDA is assumed to be the newest release's there ({cuda}, driver >= {min_driver(cuda)})"]
    dc = vtuple(driver_cuda)[:2] if driver_cuda else None
    fit = [r for r in rows if dc is None or vtuple(r["cuda"])[:2] <= dc]
    if not fit:
        low = rows[-1]
        raise InfertuneError(f"tune measured vLLM {base_version(vllm)}, and none of its images runs on a driver with "
                             f"CUDA {driver_cuda}: the oldest, {low['image']}, needs CUDA {low['cuda']} (driver >= "
                             f"{min_driver(low['cuda'])}); update the driver, re-tune with an older vLLM, or pass "
                             "--image")
    r = fit[0]
    how = f"the newest CUDA a driver with CUDA {driver_cuda} runs" if driver_cuda else "no --cuda given"
    return r["image"], min_driver(r["cuda"]), [
        f"vLLM image {r['image']}: vLLM {base_version(vllm)}, the release tune measured with, built for CUDA "
        f"{r['cuda']} (driver >= {min_driver(r['cuda'])}; {how})"]


def local_driver_cuda() -> str | None:
    """The CUDA version this host's driver supports (libcuda, else NVML's driver version)."""
    from infertune.doctor.compat import max_cuda_for_driver
    from infertune.hardware.driver import libcuda, nvml_access

    lc = libcuda()
    if lc.get("cuda_version"):
        return lc["cuda_version"]
    drv = nvml_access().get("driver")
    return max_cuda_for_driver(drv) if drv else None
