import re

import pytest

from infertune.doctor.explain import catalogue, explain

SIGS = catalogue()


def test_catalogue_has_46_sourced_entries():
    assert len(SIGS) == 46 and len({s.id for s in SIGS}) == 46
    for s in SIGS:
        assert s.sources and all(re.match(r"https://", u) for u in s.sources), s.id
        assert s.cause and s.fix


@pytest.mark.parametrize("sig", SIGS, ids=[s.id for s in SIGS])
def test_example_line_is_explained_by_its_entry(sig):
    log = f"INFO starting up\n{sig.example}\nINFO shutting down\n"
    res = explain(log)
    assert res.matches, sig.id
    top = res.matches[0]
    assert top.id == sig.id
    assert top.line == sig.example.strip()[:500] and top.line_no == 2
    assert top.source == sig.sources[0] and top.cause == sig.cause and top.fix == sig.fix


@pytest.mark.parametrize("log", [
    "Traceback (most recent call last):\n  File \"x.py\", line 3\nKeyError: 'foo'\n",
    "INFO: Uvicorn running on http://127.0.0.1:8000\nINFO: 200 OK\n",
    "",
])
def test_unrelated_logs_match_nothing(log):
    res = explain(log)
    assert res.matches == []
    assert "no known signature" in res.message


def test_more_specific_match_ranks_first_and_both_are_listed():
    log = ("[E:onnxruntime] Failed to load library libonnxruntime_providers_cuda.so with error: "
           "libcudart.so.12: cannot open shared object file: No such file or directory")
    ids = [m.id for m in explain(log).matches]
    assert ids[:2] == ["ort-cuda-provider-load", "libcudart-missing"]


def test_weak_pattern_alone_is_low_confidence_and_ranks_after_strong():
    log = "host:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\nTorch not compiled with CUDA enabled"
    ms = explain(log).matches
    assert [m.id for m in ms] == ["torch-cpu-only", "nccl-p2p-hang"]
    assert ms[1].confidence == "low"


def test_named_groups_are_reported():
    m = explain("ValueError: Total number of attention heads (28) must be divisible by "
                "tensor parallel size (8).").matches[0]
    assert m.details == {"heads": "28", "tp": "8"}


# ---- error strings users reported that `doctor explain` missed, each explained by the right cause first ------

REPORTED_ERRORS = {
    "secure-boot-module-rejected": [
        "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
        "[    3.214] Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7",
    ],
    "trt-dynamic-shape": [
        'In node 788 (importInstanceNormalization): UNSUPPORTED_NODE: Assertion failed: '
        '!isDynamic(tensor_ptr->getDimensions()) && "InstanceNormalization does not support dynamic inputs!"',
        "[02/22/2022-03:35:30] [TRT] [E] 4: [network.cpp::validate::2948] Error Code 4: Internal Error "
        "(inputs:0: dynamic input is missing dimensions in profile 0.)",
        "[09/07/2021-15:54:19] [E] [TRT] Network has dynamic or shape inputs, "
        "but no optimization profile has been defined.",
    ],
    "trt-uint8-input": [
        "Unsupported ONNX data type: UINT8 (2)",
        "Unsupported ONNX data type: UINT8 (2)\nERROR: image_tensor:0:190 In function importInput:\n"
        "[8] Assertion failed: convertDtype(onnxDtype.elem_type(), &trtDtype)",
    ],
    "cuda-invalid-device-ordinal": [
        "RuntimeError: CUDA error: invalid device ordinal",
        "RuntimeError: cuda runtime error (101) : invalid device ordinal at /pytorch/torch/csrc/cuda/Module.cpp:59",
    ],
    "cuda-error-803": [
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
        "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / "
        "cuda driver combination",
        "CUDA: Check failed: e == cudaSuccess (803 vs. 0) : system has unsupported display driver / "
        "cuda driver combination",
    ],
    "xid-119-gsp-timeout": [
        "NVRM: Xid (PCI:0000:3b:00): 119, pid=2431, name=python3, Timeout after 6s of waiting for RPC response from "
        "GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
    ],
    "vllm-undefined-symbol": [
        "/usr/local/lib/python3.9/site-packages/vllm/quantization_ops.cpython-39-x86_64-linux-gnu.so: undefined "
        "symbol: _ZN3c104cuda9SetDeviceEi",
        "ImportError: /usr/local/lib/python3.10/dist-packages/vllm/_C.cpython-310-x86_64-linux-gnu.so: undefined "
        "symbol: _ZN2at4_ops15to_dtype_layout4callERKNS_6TensorE",
        "ImportError: /opt/venv/lib/python3.12/site-packages/vllm/_moe_C.abi3.so: undefined symbol: "
        "_ZN3c106detail14torchCheckFailEPKc",
    ],
}


@pytest.mark.parametrize("sig_id,log", [(k, v) for k, vs in REPORTED_ERRORS.items() for v in vs])
def test_reported_errors_rank_the_right_cause_first(sig_id, log):
    res = explain(f"INFO starting\n{log}\nINFO exiting\n")
    assert res.matches and res.matches[0].id == sig_id, [m.id for m in res.matches]
    assert res.matches[0].confidence == "high"


@pytest.mark.parametrize("sig", [s for s in SIGS if s.more_examples], ids=lambda s: s.id)
def test_more_examples_are_explained_by_their_entry(sig):
    for line in sig.more_examples:
        assert explain(line).matches[0].id == sig.id, line


def test_secure_boot_outranks_the_generic_no_driver_symptom():
    """nvidia-smi's failure is the symptom; a rejected module key in the same log is the cause."""
    log = ("$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
           "that the latest NVIDIA driver is installed and running.\n$ sudo modprobe nvidia\n"
           "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n")
    ms = explain(log).matches
    assert [m.id for m in ms[:2]] == ["secure-boot-module-rejected", "nvidia-smi-no-driver"]
    assert ms[0].details == {"module": "nvidia"}
    # alone, the symptom still names the generic entry first (Secure Boot is one of its causes)
    alone = explain(log.splitlines()[1]).matches
    assert alone[0].id == "nvidia-smi-no-driver" and alone[1].confidence == "low"


@pytest.mark.parametrize("log", [
    "modprobe: ERROR: could not insert 'r8126': Key was rejected by service",  # Secure Boot, but not the GPU
    "$ mokutil --sb-state\nSecureBoot enabled\n$ nvidia-smi -L\nGPU 0: NVIDIA H100 PCIe (UUID: GPU-1a2b)",
    "[TRT] [I] Dynamic dimensions required for input: input_ids, using profile 0 (1x1 .. 32x512)",
    "Loaded image uint8 tensor of shape (1, 3, 224, 224)",
    "INFO using device ordinal 0 of 2 visible devices",
    "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python3, Graphics SM Warp Exception",
    "ERROR 803 rows inserted",
    "ImportError: /usr/lib/python3/dist-packages/foo/_C.cpython-310-x86_64-linux-gnu.so: undefined symbol: bar",
])
def test_near_misses_of_the_new_signatures_stay_silent(log):
    assert explain(log).matches == []


# ---- GPU host errors, alone and in the logs they come with, each explained by the right cause first ----

GPU_HOST_ERRORS = [
    # alone, the module-load failure names its causes (Secure Boot first) and points at doctor's probes
    ("nvidia-module-load-failed", "Unable to load the nvidia kernel module"),
    ("nvidia-module-load-failed", "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently "
                                  "when this kernel module was built against the wrong or improperly configured "
                                  "kernel sources"),
    # with the installer's or dmesg's reason beside it, that reason's entry ranks first
    ("secure-boot-module-rejected", "ERROR: Unable to load the kernel module 'nvidia.ko'.\n"
                                    "-> Kernel module load error: Key was rejected by service"),
    ("secure-boot-module-rejected", "ERROR: The kernel module failed to load. Secure boot is enabled on this system, "
                                    "so this is likely because it was not signed by a key that is trusted by the "
                                    "kernel.\n"
                                    "ERROR: Unable to load the kernel module 'nvidia.ko'."),
    ("nvidia-module-missing-for-kernel", "Unable to load the nvidia kernel module\n"
                                         "modprobe: FATAL: Module nvidia not found in directory "
                                         "/lib/modules/6.8.0-49-generic"),
    ("nouveau-owns-gpu", "ERROR: Unable to load the kernel module 'nvidia.ko'.\n"
                         "[   10.74] NVRM: The NVIDIA probe routine was not called for 1 device(s).\n"
                         "[   10.74] NVRM: This can occur when a driver such as: nouveau, "
                         "rivafb, nvidiafb or rivatv was loaded and obtained ownership of the NVIDIA device(s)."),
    ("trt-dynamic-shape", "[TRT] [E] 2: [shapeCompiler.cpp::evaluateShapeChecks::1180] Error Code 2: Internal Error "
                          "(Assertion !isDynamic(mOutputDimension) failed. )"),
    ("trt-dynamic-shape", "Assertion failed: !isDynamic(mOutputDimension)"),
    ("container-memlock-limit", "OSError: [Errno 12] Cannot allocate memory"),
    ("container-memlock-limit", "$ docker run --gpus all --ulimit memlock=8192 infertune:0.1.0-cuda-torch "
                                "serve /models/m\n"
                                "  File \"/usr/lib/python3.11/multiprocessing/popen_fork.py\", line 66, in _launch\n"
                                "OSError: [Errno 12] Cannot allocate memory"),
]


@pytest.mark.parametrize("sig_id,log", GPU_HOST_ERRORS)
def test_gpu_host_errors_rank_the_right_cause_first(sig_id, log):
    res = explain(f"INFO starting\n{log}\nINFO exiting\n")
    assert res.matches and res.matches[0].id == sig_id, [m.id for m in res.matches]
    assert res.matches[0].confidence == "high"


def test_the_module_load_cause_names_secure_boot_first_and_the_doctor_probes():
    m = explain("Unable to load the nvidia kernel module").matches[0]
    causes = m.cause.split(": ", 1)[1]
    assert causes.index("Secure Boot") < causes.index("kernel") < causes.index("nouveau")
    assert "infertune doctor" in m.fix and "DKMS" in m.fix


def test_the_memlock_cause_is_the_container_limit_first():
    m = explain("OSError: [Errno 12] Cannot allocate memory").matches[0]
    assert m.cause.index("locked-memory limit") < m.cause.index("out of memory")
    assert "--ulimit memlock=-1" in m.fix
