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
    # unit tests first (a broken unit fails in the first minute), then the rest; the order within each is kept
    items.sort(key=lambda item: 0 if "/tests/unit/" in str(item.fspath) else 1)
