"""Findings from host_probes.py's raw facts: each check reads recorded text (a command's output or a file) and
says the fault and its fix in one line, or nothing on a clean host. Pure functions, so every check is tested
against outputs recorded on real hosts (tests/unit/doctor/recorded/)."""

from __future__ import annotations

import json
import re
from typing import Any

from infertune.doctor.schema import Finding

STACK_BYTES = 67108864  # the stack ulimit NVIDIA's framework containers are run with (64 MiB)


def secure_boot(sb: str | None, nvidia_gpu: bool, nvidia_loaded: bool) -> list[Finding]:
    """`mokutil --sb-state`: with Secure Boot on, an unsigned (or not enrolled) nvidia module is refused."""
    if not sb or not nvidia_gpu or nvidia_loaded or not re.search(r"SecureBoot enabled", sb):
        return []
    return [Finding(check="secure-boot", level="error", message="Secure Boot is enabled and the nvidia kernel module "
                    "is not loaded: the kernel refuses a module not signed by an enrolled key",
                    fix="sudo mokutil --import /var/lib/dkms/mok.pub (Ubuntu: /var/lib/shim-signed/mok/MOK.der), "
                    "reboot and enroll it in the MOK manager; or install the distribution's signed driver; "
                    "or turn Secure Boot off")]


def parse_dkms(text: str) -> list[dict[str, str]]:
    """`dkms status` lines, old ("nvidia, 535.104.05, 5.15.0-83-generic, x86_64: installed") and new format
    ("nvidia/550.90.07, 6.8.0-45-generic, x86_64: installed", "nvidia/550.90.07: added")."""
    rows = []
    for ln in text.splitlines():
        m = re.match(r"\s*([\w.-]+)[/,]\s*([\w.~+-]+)(?:,\s*([^,:]+))?(?:,\s*[^:]+)?:\s*(\w+)", ln)
        if m:
            rows.append({"module": m.group(1), "version": m.group(2), "kernel": (m.group(3) or "").strip(),
                         "state": m.group(4)})
    return rows


def dkms(text: str | None, kernel: str, modinfo: str | None, nvidia_gpu: bool, nvidia_loaded: bool) -> list[Finding]:
    """The nvidia module must exist for the running kernel: after a kernel update DKMS builds it only if the
    headers are installed, and nothing loads until it does."""
    if not nvidia_gpu or nvidia_loaded:
        return []
    rows = [r for r in parse_dkms(text or "") if r["module"].startswith("nvidia")]
    here = [r for r in rows if r["kernel"] == kernel and r["state"] == "installed"]
    if rows and not here:
        built = ", ".join(f"{r['version']} for {r['kernel'] or '(no kernel)'} ({r['state']})" for r in rows)
        return [Finding(check="dkms", level="error", message=f"DKMS has the nvidia module built {built}, not for the "
                        f"running kernel {kernel}: the driver cannot load",
                        fix=f"sudo apt install linux-headers-{kernel} (dnf: kernel-devel-{kernel}) "
                        f"&& sudo dkms autoinstall -k {kernel}, then sudo modprobe nvidia")]
    if not rows and modinfo is not None and "not found" in modinfo:
        return [Finding(check="dkms", level="error", message=f"no nvidia kernel module for the running kernel {kernel} "
                        "(modinfo nvidia: not found)", fix="install the driver's kernel module for this kernel (the "
                        "distribution's linux-modules-nvidia package, or nvidia-dkms with the kernel headers)")]
    return []


def nouveau(modules: list[str], nvidia_gpu: bool) -> list[Finding]:
    if not nvidia_gpu or "nouveau" not in modules:
        return []
    return [Finding(check="nouveau", level="error", message="the open-source nouveau driver is loaded and owns the "
                    "NVIDIA GPU: the nvidia module cannot bind to it and CUDA sees no device",
                    fix="printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee /etc/modprobe.d/"
                    "blacklist-nouveau.conf && sudo update-initramfs -u (dracut -f), then reboot")]


def _ulimit(cfg: dict[str, Any], name: str) -> int | None:
    u = (cfg.get("default-ulimits") or {}).get(name) or {}
    soft = u.get("Soft", u.get("soft"))
    return int(soft) if isinstance(soft, int | float) else None


def container_runtime(daemon_json: str | None, toolkit: list[str], docker: bool, nvidia_gpu: bool) -> list[Finding]:
    """Docker on a GPU host: the toolkit installed, the nvidia runtime registered (and the default, for containers
    started without --gpus), and default ulimits that do not starve pinned memory (memlock) or deep stacks."""
    if not docker or not nvidia_gpu:
        return []
    fix_rt = "sudo nvidia-ctk runtime configure --runtime=docker --set-as-default && sudo systemctl restart docker"
    if not toolkit:
        return [Finding(check="container-toolkit", level="error",
                        message="Docker is installed but the NVIDIA Container "
                        "Toolkit is not (no nvidia-ctk / nvidia-container-cli): `docker run --gpus` fails with 'could "
                        "not select device driver \"\" with capabilities: [[gpu]]'",
                        fix="install nvidia-container-toolkit (NVIDIA's apt/dnf repository), then " + fix_rt)]
    try:
        cfg = json.loads(daemon_json) if daemon_json and daemon_json.strip() else {}
    except ValueError as e:
        return [Finding(check="daemon-json", level="error", message=f"/etc/docker/daemon.json is not valid JSON ({e}): "
                        "dockerd will not start", fix="fix the file (python3 -m json.tool /etc/docker/daemon.json)")]
    out = []
    if "nvidia" not in (cfg.get("runtimes") or {}):
        out.append(Finding(check="daemon-json-runtime", level="warning", message="/etc/docker/daemon.json registers no "
                           "'nvidia' runtime: --runtime=nvidia and Kubernetes through dockerd cannot reach the GPU",
                           fix=fix_rt))
    elif cfg.get("default-runtime") != "nvidia":
        out.append(Finding(check="daemon-json-runtime", level="warning", message=f"Docker's default runtime is "
                           f"{cfg.get('default-runtime') or 'runc'}, not nvidia: a container started without "
                           "--gpus (docker build, a Kubernetes node on dockerd) sees no GPU", fix=fix_rt))
    memlock, stack = _ulimit(cfg, "memlock"), _ulimit(cfg, "stack")
    if memlock != -1 or stack is None or stack < STACK_BYTES:
        out.append(Finding(
            check="daemon-json-ulimits", level="warning", message=f"Docker's default ulimits: memlock "
            f"{'unlimited' if memlock == -1 else memlock if memlock is not None else 'Docker default (8 MiB)'}, "
            f"stack {stack if stack is not None else 'default (8 MiB)'}: pinned host memory and NCCL fail with "
            "'[Errno 12] Cannot allocate memory' in containers without --ulimit",
            fix='add "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}, "stack": '
            f'{{"Name": "stack", "Soft": {STACK_BYTES}, "Hard": {STACK_BYTES}}}}} to daemon.json, or run with '
            f"--ulimit memlock=-1 --ulimit stack={STACK_BYTES} (deploy's compose.yaml has them)"))
    return out


def memlock(limits: str | None, has_gpu: bool) -> list[Finding]:
    """/proc/self/limits: this process's locked-memory limit (inside a container: what docker run gave it)."""
    m = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)\s+bytes", limits or "", re.M)
    if not has_gpu or not m or m.group(1) == "unlimited":
        return []
    soft = int(m.group(1))
    return [Finding(check="memlock", level="warning", message=f"locked-memory limit {soft // 1024} KiB (ulimit -l): "
                    "pinning host memory for GPU transfers and NCCL can fail with '[Errno 12] Cannot allocate memory'",
                    fix="docker run --ulimit memlock=-1 (compose: ulimits: memlock: -1); on a host: "
                    "LimitMEMLOCK=infinity in the service unit, or memlock unlimited in /etc/security/limits.conf")]
