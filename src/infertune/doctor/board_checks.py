"""Findings about the GPUs themselves, from recorded nvidia-smi / NVML output (host_probes.py gathers it): persistence
mode, VBIOS versions, the NVLink/PCIe topology between GPUs, and other processes holding GPU memory."""

from __future__ import annotations

import re
from typing import Any

from infertune.doctor.schema import Finding

# vLLM starts only if free memory >= --gpu-memory-utilization (default 0.9) x total: other processes may hold 10%
VLLM_UTIL = 0.9
PCIE_LINKS = {"SYS": "PCIe + the CPU interconnect (SMP)", "NODE": "PCIe + host bridges within a NUMA node",
              "PHB": "PCIe + a host bridge", "PXB": "several PCIe bridges", "PIX": "one PCIe bridge"}


def parse_board(text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=index,name,persistence_mode,vbios_version --format=csv,noheader` rows."""
    rows = []
    for ln in text.strip().splitlines():
        parts = [p.strip() for p in ln.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            rows.append(dict(zip(("index", "name", "persistence", "vbios"), parts, strict=True)))
    return rows


def board(text: str | None) -> list[Finding]:
    rows = parse_board(text or "")
    out = []
    off = [r["index"] for r in rows if r["persistence"].lower() == "disabled"]
    if off:
        out.append(Finding(check="persistence-mode", level="warning", message=f"persistence mode is off on GPU "
                           f"{', '.join(off)}: the driver tears the GPU state down when the last process exits, "
                           "so every start pays seconds of initialisation and clocks/ECC settings do not stick",
                           fix="sudo systemctl enable --now nvidia-persistenced (or sudo nvidia-smi -pm 1)"))
    by_name: dict[str, set[str]] = {}
    for r in rows:
        by_name.setdefault(r["name"], set()).add(r["vbios"])
    for name, versions in by_name.items():
        if len(versions) > 1:
            out.append(Finding(check="vbios", level="warning", message=f"{name} GPUs run different VBIOS versions "
                               f"({', '.join(sorted(versions))}): clocks, power limits and fixes differ between them",
                               fix="update every GPU to the same VBIOS (the server vendor's firmware bundle)"))
        elif versions:
            out.append(Finding(check="vbios", level="ok", message=f"{name}: VBIOS {next(iter(versions))}"))
    return out


def parse_topo(text: str) -> dict[tuple[str, str], str]:
    """`nvidia-smi topo -m`: the link between each pair of GPUs (NV#, SYS, NODE, PHB, PXB, PIX)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # newer nvidia-smi underlines the header row
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = next((ln.split() for ln in lines if ln.split()[0] == "GPU0" and "X" not in ln.split()), None)
    if not head:
        return {}
    cols = [c for c in head if re.fullmatch(r"GPU\d+", c)]
    links = {}
    for ln in lines:
        cells = ln.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]) or "X" not in cells:
            continue
        for col, val in zip(cols, cells[1:1 + len(cols)], strict=False):
            if col != cells[0] and val != "X":
                links[tuple(sorted((cells[0], col)))] = val
    return links


def topology(text: str | None) -> list[Finding]:
    links = parse_topo(text or "")
    slow = {pair: v for pair, v in links.items() if not v.startswith("NV")}
    if not links or not slow:
        return [Finding(check="topology", level="ok",
                        message=f"{len(links)} GPU pair(s), all over NVLink")] if links else []
    kinds = sorted(set(slow.values()))
    pairs = ", ".join(f"{a}-{b} {v}" for (a, b), v in sorted(slow.items())[:6]) + (" ..." if len(slow) > 6 else "")
    return [Finding(check="topology", level="warning", message=f"{len(slow)} of {len(links)} GPU pairs have no NVLink "
                    f"({pairs}; {', '.join(f'{k} = {PCIE_LINKS.get(k, k)}' for k in kinds)}): tensor parallel between "
                    "them is bound by PCIe", fix="keep tensor parallel inside an NVLink group (CUDA_VISIBLE_DEVICES), "
                    "pipeline parallel across groups; with no NVLink at all, prefer one GPU per replica")]


_SMI_PROC = re.compile(r"^\|\s+(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|[CGM])\s+"
                       r"(?P<name>.+?)\s+(?P<mib>\d+)MiB\s*\|", re.M)


def parse_processes(p: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not p:
        return []
    if p.get("source") == "nvml":
        return list(p.get("procs") or [])
    return [{"gpu": int(m["gpu"]), "pid": int(m["pid"]), "type": m["type"], "name": m["name"],
             "used_mib": int(m["mib"])} for m in _SMI_PROC.finditer(p.get("text") or "")]


def gpu_processes(p: dict[str, Any] | None, gpus: list[dict[str, Any]]) -> list[Finding]:
    """Other processes holding GPU memory: the seed's 'vLLM scheduler hang' was Xorg holding 95% of the GPU."""
    procs = parse_processes(p)
    out = []
    for g in gpus:
        i, total = g.get("index"), g.get("memory_mib")
        mine = [x for x in procs if x["gpu"] == i and x.get("used_mib")]
        used = sum(x["used_mib"] for x in mine)
        if not mine or not total:
            continue
        who = ", ".join(f"{x['name'].rsplit('/', 1)[-1]} (pid {x['pid']}, {x['type']}) {x['used_mib']} MiB" for x in
                        sorted(mine, key=lambda x: -x["used_mib"])[:4])
        share = used / total
        level = "error" if share > 1 - VLLM_UTIL else "warning" if used >= 512 else "ok"
        out.append(Finding(check=f"gpu{i}-processes", level=level, message=f"GPU {i}: {used} MiB of {total} MiB "
                           f"({share:.0%}) held by {who}" + (f": vLLM's --gpu-memory-utilization {VLLM_UTIL} needs "
                                                             f"{VLLM_UTIL:.0%} free" if level == "error" else ""),
                           fix="" if level == "ok" else "stop those processes or move them to another GPU (a display "
                           "server: run it on the integrated GPU, or Option \"ProbeAllGpus\" \"false\" for Xorg); "
                           "or lower --gpu-memory-utilization below the free share", data={"processes": mine}))
    return out
