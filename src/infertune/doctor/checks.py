"""`infertune doctor`: turn the probed facts into findings (ok / warning / error, each with a fix)."""

from __future__ import annotations

import re
from typing import Any

from infertune.doctor import probes
from infertune.doctor.compat import arch_covers, max_cuda_for_driver, runtime_vs_driver, vtuple
from infertune.doctor.schema import EXIT_CODES, LEVEL_RANK, DoctorConfig, DoctorReport, Finding
from infertune.hardware import driver as drv
from infertune.hardware import gpus as hw_gpus
from infertune.hardware.shell import run

# NVML clocks-event reasons (nvmlClocksEventReason*): the ones that mean the GPU is held back.
SLOWDOWN_BITS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                 0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}
GIB = 2**30


def _gib(b: float | None) -> str:
    return "?" if b is None else f"{b / GIB:.1f} GiB"


def _host(f: list[Finding], h: dict[str, Any]) -> None:
    where = f", in a {h['container']} container" if h["container"] else (", under WSL2" if h["wsl"] else "")
    f.append(Finding(check="os", level="ok", message=f"{h['os']} (kernel {h['kernel']}, {h['machine']}){where}; "
                     f"Python {h['python']}"))
    isa = ", ".join(h["cpu_flags"]) or "no AVX2/AVX-512/AMX flags reported"
    f.append(Finding(check="cpu", level="ok", message=f"{h['cpu_model'] or 'unknown CPU'}: {h['cpu_logical']} "
                     f"logical / {h['cpu_physical']} physical cores; ISA: {isa}"))
    f.append(Finding(check="ram", level="ok" if h["ram_bytes"] >= 8 * GIB else "warning",
                     message=f"{_gib(h['ram_bytes'])} RAM",
                     fix="" if h["ram_bytes"] >= 8 * GIB
                         else "loading models needs RAM for at least one copy of the weights"))


def _no_gpu(f: list[Finding], n: dict, lc: dict, smi: dict, h: dict, e: dict) -> bool:
    """Report hosts and containers without a usable NVIDIA GPU. Returns True when there is none."""
    if n["dev"] or lc.get("loadable") or smi.get("available"):
        return False
    if h["container"] and e.get("NVIDIA_VISIBLE_DEVICES") not in (None, "", "void", "none"):
        f.append(Finding(check="gpu", level="warning", message="in a container with NVIDIA_VISIBLE_DEVICES set, "
                         "but no /dev/nvidia* nodes and no libcuda.so.1: the container was started without GPU access",
                         fix="start it with `docker run --gpus all` (or --runtime=nvidia) "
                         "and the NVIDIA Container Toolkit"))
    else:
        f.append(Finding(check="gpu", level="ok", message="no NVIDIA GPU on this host (no /dev/nvidia* nodes, no "
                         "nvidia-smi, libcuda.so.1 not loadable): CPU only; infertune tune/serve use the CPU"))
    return True


def _driver(f: list[Finding], n: dict, lc: dict, nv: dict, smi: dict) -> tuple[str | None, str | None]:
    gpus = smi.get("gpus") or []
    driver = nv.get("driver") or (gpus[0].get("driver") if gpus else None)
    cuda = lc.get("cuda_version") or smi.get("cuda_version") or (max_cuda_for_driver(driver) if driver else None)
    via = smi.get("source", "nvidia-smi")
    note = "" if via == "nvml" else (" (read with nvidia-smi: nvidia-ml-py is not installed; "
                                     "`pip install nvidia-ml-py` for direct NVML queries)")
    if driver:
        f.append(Finding(check="driver", level="ok",
                         message=f"NVIDIA driver {driver}, CUDA driver API {cuda or '?'}{note}",
                         data={"driver": driver, "cuda": cuda, "source": via}))
    elif smi.get("error"):
        f.append(Finding(check="driver", level="error", message=f"nvidia-smi failed: {smi['error'][:200]}",
                         fix="run `infertune doctor explain` on this message; usually the kernel module is not loaded"))
    if n["kernel_module"] and driver and n["kernel_module"] != driver:
        f.append(Finding(check="driver-mismatch", level="error", message=f"kernel module {n['kernel_module']} but "
                         f"user-space driver {driver}: NVML and CUDA fail with 'Driver/library version mismatch'",
                         fix="reboot (or unload and reload the nvidia modules); pin the driver packages"))
    if lc.get("loadable"):
        f.append(Finding(check="libcuda", level="ok", message=f"libcuda.so.1 loads from {lc.get('path') or '?'}"))
    else:
        f.append(Finding(check="libcuda", level="error",
                         message=f"libcuda.so.1 cannot be loaded: {lc.get('error', '')[:160]}",
                         fix="in a container: start it with --gpus all and the NVIDIA Container Toolkit so the driver "
                         "libraries are mounted; on a host: install the driver"))
    if nv.get("loadable") and nv.get("init_rc") == 0:
        f.append(Finding(check="nvml", level="ok", message="NVML initialises (libnvidia-ml.so.1)"))
    else:
        err = nv.get("error", "")
        f.append(Finding(check="nvml", level="error", message=f"NVML unavailable: {err[:160]}",
                         fix="'driver/library version mismatch': reboot; 'unknown error' inside a container: restart "
                         "the container (systemd daemon-reload revoked its device access, see nvidia-docker#1730)"))
    dev = n["dev"]
    missing = [d for d in ("/dev/nvidiactl", "/dev/nvidia-uvm") if d not in dev]
    f.append(Finding(check="device-nodes", level="warning" if missing else "ok",
                     message=f"device nodes: {', '.join(dev) or 'none'}"
                     + (f"; missing {', '.join(missing)}" if missing else ""),
                     fix="sudo nvidia-modprobe -c 0 -u (creates /dev/nvidia-uvm); in a container use --gpus"
                         if missing else ""))
    return driver, cuda


def _gpu(f: list[Finding], g: dict) -> None:
    i = g.get("index")
    mem = f"{g['memory_mib'] / 1024:.1f} GiB" if g.get("memory_mib") else "?"
    clocks = f"SM {g.get('sm_clock_mhz')}/{g.get('sm_clock_max_mhz')} MHz" if g.get("sm_clock_max_mhz") else ""
    f.append(Finding(check=f"gpu{i}", level="ok",
                     message=f"GPU {i}: {g.get('name')}, compute capability {g.get('cc')}, "
                     f"{mem}, ECC {g.get('ecc') or 'n/a'}, MIG {g.get('mig') or 'n/a'}, {g.get('temperature_c')} C, "
                     f"{clocks}, power {g.get('power_w')}/{g.get('power_limit_w')} W", data=g))
    reasons = g.get("clock_reasons")
    if isinstance(reasons, int):
        slow = [name for bit, name in SLOWDOWN_BITS.items() if reasons & bit]
        if slow:
            f.append(Finding(check=f"gpu{i}-throttle", level="warning",
                             message=f"GPU {i} clocks held back now: {', '.join(slow)}",
                             fix="check cooling and power limits (nvidia-smi -q -d PERFORMANCE); "
                             "measurements taken now understate the GPU"))
    errs = g.get("ecc_uncorrected_volatile")
    if isinstance(errs, int) and errs > 0:
        f.append(Finding(check=f"gpu{i}-ecc", level="error",
                         message=f"GPU {i}: {errs} uncorrectable ECC errors since the driver loaded",
                         fix="reset the GPU / reload the driver to retire the pages; drain and RMA if it repeats"))
    if str(g.get("retired_pages_pending")).lower() in ("yes", "1", "true"):
        f.append(Finding(check=f"gpu{i}-retired-pages", level="warning", message=f"GPU {i}: retired pages pending",
                         fix="reset the GPU or reload the driver to activate the retirement"))
    if str(g.get("mig")).lower() == "enabled":
        f.append(Finding(check=f"gpu{i}-mig", level="warning", message=f"GPU {i} is in MIG mode: processes see MIG "
                         "instances, not the whole GPU", fix="address instances by MIG UUID in CUDA_VISIBLE_DEVICES "
                         "(nvidia-smi -L); size models against the instance's memory, not the GPU's"))
    cc = vtuple(g.get("cc"))
    if cc and cc < (8, 0):
        f.append(Finding(check=f"gpu{i}-features", level="warning",
                         message=f"GPU {i} (compute capability {g.get('cc')}) has no bfloat16 and no FlashAttention-2",
                         fix="serve in float16 (--dtype half) with SDPA attention"))
    elif cc and cc < (8, 9):
        f.append(Finding(check=f"gpu{i}-features", level="ok",
                         message=f"GPU {i}: bf16 and FlashAttention-2 yes; no FP8 "
                         "tensor cores (FP8 checkpoints run as weight-only FP8 through Marlin kernels)"))


def _torch(f: list[Finding], t: dict, gpus: list[dict], driver: str | None, dcuda: str | None) -> None:
    if not t.get("installed"):
        f.append(Finding(check="torch", level="ok" if not gpus else "warning",
                         message=("torch not importable: "
                                  f"{t.get('import_error') or t.get('error', 'not installed')}")[:300],
                         fix="pip install torch (pick the CUDA wheel matching the driver)" if gpus else ""))
        return
    arch = t.get("arch_list") or []
    f.append(Finding(check="torch", level="ok", message=f"torch {t['version']}, built for CUDA {t.get('cuda') or '-'}"
                     f"{', ROCm ' + t['hip'] if t.get('hip') else ''}; "
                     f"arch list: {' '.join(arch) or 'none (CPU build)'}; "
                     f"cuda.is_available() = {t.get('cuda_available')}",
                     data={k: t.get(k) for k in ("version", "cuda", "arch_list", "cudnn")}))
    if gpus and not t.get("cuda"):
        f.append(Finding(check="torch-build", level="error",
                         message="this host has an NVIDIA GPU but torch is a CPU build",
                         fix="pip install torch --index-url "
                         f"https://download.pytorch.org/whl/cu{(dcuda or '12.8').replace('.', '')}"))
        return
    if t.get("cuda"):
        lvl, msg, fix = runtime_vs_driver(t["cuda"], dcuda, driver)
        if gpus or lvl == "ok":
            f.append(Finding(check="torch-cuda", level=lvl if gpus else "ok", message=f"torch: {msg}", fix=fix))
    if gpus and t.get("cuda") and not t.get("cuda_available"):
        why = t.get("cuda_error") or "; ".join(t.get("warnings", []))[:300] or "no reason given"
        f.append(Finding(check="torch-cuda-init", level="error", message=f"torch cannot use the GPU: {why}",
                         fix="run `infertune doctor explain` on this message"))
    for g in gpus:
        ok, by = arch_covers(arch, g.get("cc") or "")
        if ok:
            f.append(Finding(check=f"torch-arch-gpu{g.get('index')}", level="ok",
                             message=f"torch has kernels for GPU {g.get('index')} "
                             f"(compute capability {g.get('cc')}) via {by}"))
        else:
            f.append(Finding(check=f"torch-arch-gpu{g.get('index')}", level="error",
                             message=f"torch {t['version']} has no kernels for compute capability {g.get('cc')} "
                             f"(arch list {' '.join(arch)}): "
                             "'no kernel image is available for execution on the device'",
                             fix="install a torch wheel whose arch list covers this GPU (cu128 or newer for Blackwell; "
                             "cu126 or older for Maxwell/Pascal/Volta)"))


def _stack(f: list[Finding], pk: dict, ort: dict, t: dict, dcuda: str | None, driver: str | None,
           has_gpu: bool) -> None:
    v = pk["versions"]
    majors: dict[str, int] = {k: m for k, m in pk["cuda_majors"].items() if m}
    if t.get("cuda"):
        majors["torch"] = vtuple(t["cuda"])[0]
    names = {"vllm": "vLLM", "tensorrt": "TensorRT", "torchao": "torchao", "onnxruntime-gpu": "onnxruntime-gpu"}
    listed = [f"{label} {v[k]}" + (f" (CUDA {majors[k.split('-')[0]]})" if majors.get(k.split("-")[0]) else "")
              for k, label in names.items() if k in v]
    if v.get("tensorrt") is None and pk["tensorrt_dists"]:
        listed.append("TensorRT " + ", ".join(pk["tensorrt_dists"]))
    if ort.get("installed"):
        listed.append(f"onnxruntime {ort['version']} (providers: {', '.join(ort.get('providers', []))})")
    f.append(Finding(check="packages", level="ok",
                     message="; ".join(listed) or "no vLLM, TensorRT, onnxruntime or torchao installed",
                     data={"versions": v, "cuda_majors": majors}))
    if "onnxruntime" in v and "onnxruntime-gpu" in v:
        f.append(Finding(check="onnxruntime-dup", level="warning", message="both onnxruntime and onnxruntime-gpu are "
                         "installed; they overwrite each other's files",
                         fix="pip uninstall onnxruntime onnxruntime-gpu; pip install onnxruntime-gpu"))
    if has_gpu and "onnxruntime-gpu" in v and "CUDAExecutionProvider" not in ort.get("providers", []):
        f.append(Finding(check="onnxruntime-cuda", level="warning",
                         message="onnxruntime-gpu has no CUDAExecutionProvider: sessions silently run on the CPU",
                         fix="install the onnxruntime-gpu build for your CUDA/cuDNN majors"))
    if len(set(majors.values())) > 1:
        f.append(Finding(check="cuda-majors", level="warning", message="CUDA majors differ across packages: "
                         + ", ".join(f"{k} {m}" for k, m in sorted(majors.items())) + " (one library may fail to load "
                         "'libcudart.so.N' or pick up the wrong one)",
                         fix="install one CUDA major for the whole stack"))
    for k, m in majors.items():
        if k != "torch" and has_gpu:
            lvl, msg, fix = runtime_vs_driver(f"{m}.0", dcuda, driver)
            if lvl != "ok":
                f.append(Finding(check=f"{k}-cuda", level=lvl, message=f"{k}: {msg}", fix=fix))


def _visible(f: list[Finding], e: dict, gpus: list[dict], h: dict) -> None:
    cvd = e.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [x.strip() for x in cvd.split(",") if x.strip()]
        bad = [x for x in ids if not re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+|MIG-[\w/-]+", x)]
        out_of_range = [x for x in ids if x.isdigit() and gpus and int(x) >= len(gpus)]
        if not ids:
            f.append(Finding(check="cuda-visible-devices", level="warning", message="CUDA_VISIBLE_DEVICES is set but "
                             "empty: CUDA sees no GPU", fix="unset CUDA_VISIBLE_DEVICES or list device indices"))
        elif bad or out_of_range or len(set(ids)) != len(ids):
            f.append(Finding(
                check="cuda-visible-devices", level="warning", message=f"CUDA_VISIBLE_DEVICES={cvd!r}: "
                f"{'invalid ' + ','.join(bad) if bad else ''}"
                f"{' indices beyond the ' + str(len(gpus)) + ' GPU(s) ' + ','.join(out_of_range) if out_of_range else ''}"  # noqa: E501
                f"{' duplicates' if len(set(ids)) != len(ids) else ''}; "
                "CUDA ignores everything after the first bad entry",
                fix="use indices from `nvidia-smi -L` (or GPU-/MIG- UUIDs), each once"))
        else:
            f.append(Finding(check="cuda-visible-devices", level="ok", message=f"CUDA_VISIBLE_DEVICES={cvd}"))
    if gpus and len(gpus) > 1 and e.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        f.append(Finding(check="cuda-device-order", level="ok", message="several GPUs: CUDA numbers them fastest-first "
                         "unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so indices may differ from nvidia-smi's"))
    shm = h.get("shm_bytes")
    if h.get("container") and shm is not None and shm < GIB:
        f.append(Finding(check="shm", level="warning", message=f"/dev/shm is {shm / 2**20:.0f} MiB in this container: "
                         "NCCL (multi-GPU) and DataLoader workers need more",
                         fix="docker run --ipc=host (or --shm-size=16g)"))


def _hybrid(f: list[Finding], adapters: list[dict], n: dict, has_gpu: bool) -> None:
    vendors = {a["vendor"] for a in adapters}
    if "NVIDIA" in vendors and vendors & {"Intel", "AMD"}:
        loaded = any(m.startswith("nvidia") for m in n["modules"])
        prime = run(["prime-select", "query"])
        profile = prime[1].strip() if prime and prime[0] == 0 else None
        msg = (f"hybrid graphics: {', '.join(sorted(vendors))} display adapters; nvidia module "
               f"{'loaded' if loaded else 'NOT loaded'}" + (f"; PRIME profile '{profile}'" if profile else ""))
        bad = not loaded or profile == "intel"
        f.append(Finding(check="hybrid-gpu", level="warning" if bad else "ok", message=msg,
                         fix="sudo prime-select on-demand (keeps the NVIDIA driver loaded for CUDA while the "
                         "integrated GPU drives the display), then reboot" if bad else ""))
    elif not has_gpu and "NVIDIA" in vendors:
        f.append(Finding(check="hybrid-gpu", level="error",
                         message="an NVIDIA display adapter is on the PCI bus but no driver is loaded",
                         fix="install the NVIDIA driver (check Secure Boot / nouveau)"))


def probes_before_serving(f: list[Finding], adapters: list[dict], n: dict, gpus: list[dict]) -> dict:
    """Secure Boot, DKMS, nouveau, the container runtime, memlock, persistence/VBIOS, topology, GPU processes."""
    from infertune.doctor import board_checks as b
    from infertune.doctor import host_checks as h
    from infertune.doctor.host_probes import gather

    raw = gather()
    nvidia_gpu = any(a["vendor"] == "NVIDIA" for a in adapters) or bool(gpus)
    loaded = "nvidia" in n["modules"]
    f += h.secure_boot(raw["sb_state"], nvidia_gpu, loaded)
    f += h.dkms(raw["dkms"], raw["kernel"], raw["modinfo_nvidia"], nvidia_gpu, loaded)
    f += h.nouveau(n["modules"], nvidia_gpu)
    f += h.container_runtime(raw["daemon_json"], raw["toolkit"], raw["docker"], nvidia_gpu)
    f += h.memlock(raw["limits"], bool(gpus))
    f += b.board(raw["board"]) + b.topology(raw["topo"]) + b.gpu_processes(raw["processes"], gpus)
    return raw


def doctor(cfg: DoctorConfig | None = None) -> DoctorReport:
    """Probe this host or container and report findings, worst level first in the exit code."""
    cfg = cfg or DoctorConfig()
    h, n, lc, nv, e = probes.host(), probes.nodes(), drv.libcuda(), drv.nvml_access(), probes.env()
    smi = (hw_gpus.gpus_nvml() if cfg.use_nvml else None) or hw_gpus.gpus_smi()
    if smi.get("source") == "nvml" and not smi.get("available"):
        smi = {**hw_gpus.gpus_smi(), "nvml_error": smi.get("error")}
    st = probes.stack(cfg.probe_timeout_s) if cfg.probe_torch else {}
    t, ort = st.get("torch", {"error": st.get("error", "not probed")}), st.get("onnxruntime", {})
    pk, adapters = probes.packages(), probes.display_adapters()
    f: list[Finding] = []
    _host(f, h)
    no_gpu = _no_gpu(f, n, lc, smi, h, e)
    driver = dcuda = None
    gpus: list[dict] = []
    if not no_gpu:
        driver, dcuda = _driver(f, n, lc, nv, smi)
        gpus = smi.get("gpus") or []
        for g in gpus:
            _gpu(f, g)
    if cfg.probe_torch:
        _torch(f, t, gpus, driver, dcuda)
    rts = probes.cuda_runtimes()
    if rts or not no_gpu:
        f.append(Finding(check="cuda-runtimes", level="ok", message="CUDA runtimes found: " + (", ".join(
            f"{r['name']} {r.get('version', '')}".strip() + f" ({r['kind']})" for r in rts)
            or "none outside the Python wheels"),
            data={"runtimes": rts}))
    _stack(f, pk, ort, t, dcuda, driver, bool(gpus))
    _visible(f, e, gpus, h)
    _hybrid(f, adapters, n, bool(gpus))
    hp = probes_before_serving(f, adapters, n, gpus)
    worst = max((x.level for x in f), key=LEVEL_RANK.__getitem__, default="ok")
    facts = {"host": h, "nodes": n, "libcuda": lc, "nvml": nv, "gpus": smi, "torch": t, "onnxruntime": ort,
             "packages": pk, "display_adapters": adapters, "env": e, "before_serving": hp}
    return DoctorReport(findings=f, worst=worst, exit_code=EXIT_CODES[worst], facts=facts)
