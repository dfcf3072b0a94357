"""doctor's checks before serving, each against recorded command output and files (recorded/): it finds
its fault with a one-line fix, and says nothing above `ok` on a clean host."""

from pathlib import Path

import pytest

from infertune.doctor import board_checks as b
from infertune.doctor import host_checks as h

REC = Path(__file__).parent / "recorded"


def rec(name: str) -> str:
    return (REC / name).read_text()


def bad(findings):
    return [f for f in findings if f.level != "ok"]


def modules(name):
    return [ln.split()[0] for ln in rec(name).splitlines()]


def test_secure_boot():
    (f,) = h.secure_boot(rec("mokutil_enabled.txt"), nvidia_gpu=True, nvidia_loaded=False)
    assert f.level == "error" and "Secure Boot is enabled" in f.message and "mokutil --import" in f.fix
    assert h.secure_boot(rec("mokutil_enabled.txt"), True, nvidia_loaded=True) == []  # signed: it loaded
    for clean in ("mokutil_disabled.txt", "mokutil_no_efi.txt"):
        assert h.secure_boot(rec(clean), True, False) == []
    assert h.secure_boot(rec("mokutil_enabled.txt"), nvidia_gpu=False, nvidia_loaded=False) == []


def test_dkms_module_missing_for_the_running_kernel():
    (f,) = h.dkms(rec("dkms_other_kernel.txt"), "6.8.0-49-generic", None, True, False)
    assert f.level == "error" and "550.120 for 6.8.0-45-generic" in f.message and "6.8.0-49-generic" in f.message
    assert "linux-headers-6.8.0-49-generic" in f.fix and "dkms autoinstall" in f.fix
    (f,) = h.dkms(rec("dkms_added_only.txt"), "6.8.0-49-generic", None, True, False)
    assert "(added)" in f.message
    (f,) = h.dkms("", "6.8.0-49-generic", rec("modinfo_not_found.txt"), True, False)
    assert "no nvidia kernel module for the running kernel" in f.message
    assert h.dkms(rec("dkms_clean.txt"), "6.8.0-49-generic", "550.120\n", True, False) == []
    assert h.dkms(rec("dkms_old_format.txt"), "5.15.0-83-generic", "535.104.05\n", True, False) == []
    assert h.dkms(rec("dkms_other_kernel.txt"), "6.8.0-49-generic", None, True, nvidia_loaded=True) == []


def test_parse_dkms_reads_both_formats():
    assert h.parse_dkms(rec("dkms_old_format.txt")) == [
        {"module": "nvidia", "version": "535.104.05", "kernel": "5.15.0-83-generic", "state": "installed"}]
    assert h.parse_dkms(rec("dkms_added_only.txt")) == [
        {"module": "nvidia", "version": "550.120", "kernel": "", "state": "added"}]


def test_nouveau():
    (f,) = h.nouveau(modules("proc_modules_nouveau.txt"), nvidia_gpu=True)
    assert f.level == "error" and "nouveau" in f.message and "blacklist nouveau" in f.fix
    assert h.nouveau(modules("proc_modules_nvidia.txt"), True) == []
    assert h.nouveau(modules("proc_modules_nouveau.txt"), nvidia_gpu=False) == []  # no NVIDIA GPU: not our business


def test_container_toolkit_and_daemon_json():
    (f,) = h.container_runtime(rec("daemon_json_clean.json"), [], docker=True, nvidia_gpu=True)
    assert f.check == "container-toolkit" and f.level == "error" and "could not select device driver" in f.message
    tk = ["nvidia-ctk", "nvidia-container-runtime"]
    fs = h.container_runtime(rec("daemon_json_no_runtime.json"), tk, True, True)
    assert [x.check for x in fs] == ["daemon-json-runtime", "daemon-json-ulimits"]
    assert "registers no 'nvidia' runtime" in fs[0].message and "nvidia-ctk runtime configure" in fs[0].fix
    assert "memlock Docker default" in fs[1].message and "--ulimit memlock=-1" in fs[1].fix
    fs = h.container_runtime(rec("daemon_json_runtime_not_default.json"), tk, True, True)
    assert "default runtime is runc" in fs[0].message
    assert h.container_runtime("{not json", tk, True, True)[0].check == "daemon-json"
    assert h.container_runtime(rec("daemon_json_clean.json"), tk, True, True) == []
    assert h.container_runtime(None, [], docker=False, nvidia_gpu=True) == []  # no docker: nothing to configure


def test_memlock():
    (f,) = h.memlock(rec("limits_docker_default.txt"), has_gpu=True)
    assert f.level == "warning" and "8192 KiB" in f.message and "--ulimit memlock=-1" in f.fix
    assert h.memlock(rec("limits_clean.txt"), True) == []
    assert h.memlock(rec("limits_docker_default.txt"), has_gpu=False) == []


def test_persistence_mode_and_vbios():
    fs = b.board(rec("board_faults.txt"))
    assert [(x.check, x.level) for x in fs] == [("persistence-mode", "warning"), ("vbios", "warning")]
    assert "GPU 0, 1" in fs[0].message and "nvidia-persistenced" in fs[0].fix
    assert "96.00.74.00.0B, 96.00.99.00.01" in fs[1].message
    clean = b.board(rec("board_clean.txt"))
    assert bad(clean) == [] and clean[0].message == "NVIDIA H200: VBIOS 96.00.A5.00.01"


def test_topology():
    links = b.parse_topo(rec("topo_pcie.txt"))
    assert links[("GPU0", "GPU1")] == "PIX" and links[("GPU0", "GPU2")] == "SYS" and len(links) == 6
    (f,) = b.topology(rec("topo_pcie.txt"))
    assert f.level == "warning" and "6 of 6 GPU pairs have no NVLink" in f.message and "tensor parallel" in f.fix
    nv = b.topology(rec("topo_nvlink.txt"))  # underlined header (ANSI escapes), all NV18
    assert bad(nv) == [] and nv[0].message == "6 GPU pair(s), all over NVLink"
    assert b.topology(rec("topo_single.txt")) == []


def test_gpu_processes_xorg_holding_the_gpu():
    gpus = [{"index": 0, "memory_mib": 49140}]
    (f,) = b.gpu_processes({"source": "nvidia-smi", "text": rec("smi_xorg.txt")}, gpus)
    assert f.level == "error" and "46314 MiB of 49140 MiB (94%)" in f.message
    assert f.message.index("Xorg (pid 2114, G) 46102 MiB") < f.message.index("gnome-shell")
    assert "gpu-memory-utilization" in f.message
    assert b.gpu_processes({"source": "nvidia-smi", "text": rec("smi_clean.txt")},
                           [{"index": 0, "memory_mib": 143771}]) == []
    # NVML reports the same processes as records
    nvml = {"source": "nvml", "procs": [{"gpu": 0, "pid": 7, "type": "C", "name": "python", "used_mib": 900}]}
    (f,) = b.gpu_processes(nvml, [{"index": 0, "memory_mib": 143771}])
    assert f.level == "warning" and "python (pid 7, C) 900 MiB" in f.message


@pytest.fixture
def clean_gpu_host(monkeypatch):
    """A GPU host with nothing to report: every probe answers with a clean recording."""
    from infertune.doctor import host_probes

    raw = {"sb_state": rec("mokutil_enabled.txt"), "dkms": rec("dkms_clean.txt"), "kernel": "6.8.0-49-generic",
           "modinfo_nvidia": "550.120\n", "docker": True, "daemon_json": rec("daemon_json_clean.json"),
           "toolkit": ["nvidia-ctk"], "limits": rec("limits_clean.txt"), "board": rec("board_clean.txt"),
           "topo": rec("topo_nvlink.txt"), "processes": {"source": "nvidia-smi", "text": rec("smi_clean.txt")}}
    monkeypatch.setattr(host_probes, "gather", lambda: raw)
    return raw


def test_doctor_on_a_clean_gpu_host_adds_no_warning(clean_gpu_host):
    from infertune.doctor.checks import probes_before_serving

    f = []
    gpus = [{"index": 0, "memory_mib": 143771}, {"index": 1, "memory_mib": 143771}]
    raw = probes_before_serving(f, [{"pci": "0000:19:00.0", "vendor": "NVIDIA"}], {"modules": ["nvidia"]}, gpus)
    assert raw is clean_gpu_host and f and bad(f) == []


def test_doctor_on_a_broken_gpu_host_names_every_fault(clean_gpu_host):
    from infertune.doctor.checks import probes_before_serving

    clean_gpu_host.update(daemon_json=rec("daemon_json_no_runtime.json"), limits=rec("limits_docker_default.txt"),
                          board=rec("board_faults.txt"), topo=rec("topo_pcie.txt"),
                          processes={"source": "nvidia-smi", "text": rec("smi_xorg.txt")},
                          dkms=rec("dkms_other_kernel.txt"))
    f = []
    probes_before_serving(f, [{"pci": "0000:01:00.0", "vendor": "NVIDIA"}], {"modules": ["nouveau"]},
                          [{"index": 0, "memory_mib": 49140}])
    assert {x.check for x in bad(f)} == {"secure-boot", "dkms", "nouveau", "daemon-json-runtime", "daemon-json-ulimits",
                                         "memlock", "persistence-mode", "vbios", "topology", "gpu0-processes"}
    assert all(x.fix for x in bad(f))
