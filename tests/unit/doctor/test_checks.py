import json

from typer.testing import CliRunner

from infertune.cli.main import app
from infertune.doctor import checks, probes
from infertune.doctor.compat import arch_covers, max_cuda_for_driver, min_driver, runtime_vs_driver
from infertune.doctor.schema import DoctorConfig, Finding
from infertune.hardware import gpus as hw_gpus


def test_arch_coverage_rules():
    h200_wheel = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert arch_covers(h200_wheel, "9.0")[0]
    assert arch_covers(["sm_80"], "8.6") == (True, "sm_80")  # SASS runs on newer minors of the same major
    assert not arch_covers(["sm_80", "sm_86", "sm_90"], "12.0")[0]  # the RTX 50xx "no kernel image" case
    assert not arch_covers(["sm_90a"], "10.0")[0]  # arch-specific targets are not forward compatible
    assert arch_covers(["sm_80", "compute_90"], "12.0")[0]  # PTX JIT
    assert not arch_covers(["sm_75", "sm_80"], "7.0")[0]  # Volta dropped from cu128+ wheels


def test_driver_tables():
    assert min_driver("13.0") == "580.65.06" and min_driver("12.4") == "550.54.14"
    assert max_cuda_for_driver("580.159.04") == "13.0"
    assert max_cuda_for_driver("550.90.07") == "12.4"
    assert runtime_vs_driver("13.0", "12.8", "570.26")[0] == "error"
    assert runtime_vs_driver("12.8", "12.4", "550.54.14")[0] == "warning"  # minor-version compatibility
    assert runtime_vs_driver("12.4", "13.0", "580.65.06")[0] == "ok"


SMI_HEAD = ("+----+\n| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0     |\n")
SMI_ROW = ("0, NVIDIA H200, GPU-1234, 580.159.04, 9.0, 143771, Enabled, Disabled, 0x0000000000000001, 345, 1980, "
           "31, 75.12, 700.00, P0, 0, No\n")


def test_nvidia_smi_fallback_parses_the_h200(monkeypatch):
    def fake_run(cmd, timeout=15):
        return (0, SMI_HEAD, "") if cmd == ["nvidia-smi"] else (0, SMI_ROW, "")

    monkeypatch.setattr(hw_gpus, "run", fake_run)
    smi = hw_gpus.gpus_smi()
    g = smi["gpus"][0]
    assert smi["cuda_version"] == "13.0" and smi["source"] == "nvidia-smi"
    assert (g["name"], g["cc"], g["ecc"], g["mig"], g["memory_mib"], g["clock_reasons"]) == \
        ("NVIDIA H200", "9.0", "Enabled", "Disabled", 143771, 1)
    f: list[Finding] = []
    checks._gpu(f, g)
    checks._torch(f, {"installed": True, "version": "2.11.0+cu130", "cuda": "13.0", "cuda_available": True,
                      "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]}, [g], "580.159.04", "13.0")
    text = " ".join(x.message for x in f)
    assert "compute capability 9.0" in text and "ECC Enabled" in text and "sm_90" in text
    assert all(x.level == "ok" for x in f), [x for x in f if x.level != "ok"]
    f.clear()
    checks._torch(f, {"installed": True, "version": "2.4.0+cu121", "cuda": "12.1", "cuda_available": True,
                      "arch_list": ["sm_50", "sm_80", "sm_86"]}, [{**g, "cc": "12.0", "index": 0}],
                  "580.159.04", "13.0")
    assert any(x.level == "error" and x.check == "torch-arch-gpu0" for x in f)


def test_throttle_and_ecc_findings():
    f: list[Finding] = []
    checks._gpu(f, {"index": 0, "name": "X", "cc": "9.0", "clock_reasons": 0x20 | 0x4, "ecc_uncorrected_volatile": 2})
    levels = {x.check: x.level for x in f}
    assert levels["gpu0-throttle"] == "warning" and levels["gpu0-ecc"] == "error"


def test_doctor_on_this_box_reports_without_error():
    r = checks.doctor(DoctorConfig(probe_torch=False))
    assert r.findings and r.worst in ("ok", "warning", "error")
    assert {f.check for f in r.findings} >= {"os", "cpu", "ram"}
    if not probes.nodes()["dev"]:  # the 2-core CI box: no GPU is a fact, not an error
        gpu = next(f for f in r.findings if f.check == "gpu")
        assert gpu.level == "ok" and "no NVIDIA GPU" in gpu.message
        assert r.worst != "error"


def test_doctor_json_cli_contract():
    res = CliRunner().invoke(app, ["doctor", "--json", "--no-torch"])
    assert res.exit_code in (0, 1), res.output
    data = json.loads(res.stdout)
    assert data["findings"] and set(data["findings"][0]) >= {"check", "level", "message", "fix"}
