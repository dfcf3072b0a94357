import os
import shutil
import sys
from pathlib import Path

import pytest

try:  # setuptools first, in each test process, single-threaded: inductor imports it (torch.utils.cpp_extension) on a
    # first compile, and once, late in a worker that had run other tests, setuptools' distutils shim resolved to the
    # stdlib's and asserted (test_compile_cache.py: "AssertionError: .../lib/python3.11/distutils/core.py")
    import setuptools  # noqa: F401
except ImportError:  # not installed: then nothing imports it later either
    pass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every vLLM server the suite starts (tune's, serve's, the bench tests') inherits this: the model runs in the engine
# core's process instead of a worker process of its own. vLLM's CPU platform spawns its processes and each imports
# vLLM, so a start is one import shorter (30.6 s -> 22.5 s to /health on a quiet 2-core host; the same greedy text:
# docs/measurements/2026-12-07-epyc-suite-bytecode). How vLLM lays out its processes is not what the tests check.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _share_the_cores() -> None:
    """Under pytest-xdist each worker, and the tunes and servers it starts (they inherit the environment), computes
    with its share of the cores. Two workers' 2-thread torch on a 2-core box wait on each other at every OpenMP
    barrier: beside the other worker, the quick MiniLM tune's speed passes over 64 texts ran at 1-4 items/s and its
    artifact step alone took 5 minutes. A thread count set by the user is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, share)


_share_the_cores()


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> str:
    """A 2-layer BERT encoder of width 32 with saved weights (tests/fixtures/tiny_models.py), once per worker: for
    tests of logic that MiniLM's compute would only slow down."""
    sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
    from tiny_models import tiny_bert_dir

    return str(tiny_bert_dir(tmp_path_factory.mktemp("tiny-bert")))


# Fixtures that cost minutes to build (a tune, a server with a model loaded, MiniLM's CPU engines), longest first.
# `make test` runs the suite on pytest-xdist workers (`-n 2 --dist loadgroup`): every test using one of these, or a
# module-scoped fixture of its module, is put in one xdist group with the others that use it, so the fixture is built
# once, on one worker. The groups holding a `slow` test start first, these in this order (the longest start first, so
# they overlap the rest of the suite instead of running last, alone), then the other slow ones in collection order.
SHARED = ("served_tune", "quick_run", "tuned_artifact", "smollm2_artifact", "minilm_server", "cpu_engines")


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def _shared_keys(item) -> set[str]:
    """What `item` shares with other tests: the SHARED session fixtures and the module-scoped fixtures it uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    keys = set()
    for name, defs in info.name2fixturedefs.items():
        if not defs:
            continue
        scope = defs[-1].scope
        if name in SHARED:
            keys.add(name)
        elif scope == "module":
            keys.add(f"{item.path.stem}:{name}")  # test file names are unique (rootdir-relative imports)
    return keys


def _xdist_groups(items) -> None:
    """An xdist_group mark on every test that shares an expensive fixture, one group per connected set of them."""
    parent: dict[str, str] = {}

    def find(k: str) -> str:
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def weight(k: str) -> int:  # a set is named for its costliest SHARED fixture
        return SHARED.index(k) if k in SHARED else len(SHARED)

    keyed = [(item, sorted(_shared_keys(item))) for item in items]
    for _, keys in keyed:
        for k in keys[1:]:
            a, b = sorted((find(k), find(keys[0])), key=weight)
            parent[b] = a
    for item, keys in keyed:
        if keys and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(find(keys[0])))


def _name_groups_in_nodeids(config, items) -> None:
    """xdist's loadgroup scheduler reads an item's group from its nodeid ("path::test@group"), which xdist 3.8 sets
    through item._nodeid; pytest 9.2 builds nodeid from item._id instead, so the suffix never showed and the groups
    were split over the workers (each building the shared fixture). Set it where pytest 9.2 reads it."""
    if not config.getoption("loadgroup", default=False):  # an xdist worker under --dist loadgroup only
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest before 9.2: xdist's own hook names the group
        return
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark and mark.args and "@" not in item.nodeid.rpartition("]")[2] and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{mark.args[0]}")


def _group(item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark and mark.args else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible here)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    _xdist_groups(items)
    _name_groups_in_nodeids(config, items)
    # `slow` tests (and the groups holding one) first, SHARED's in its order; then the unit tests (a broken unit fails
    # in the first minutes), then the rest. The order within each is kept (`make test` passes --no-loadscope-reorder,
    # which keeps it for xdist's scheduler too).
    slow = {_group(item) for item in items if item.get_closest_marker("slow")}

    def rank(item) -> tuple[int, int]:
        g = _group(item)
        if g in slow:
            return 0, SHARED.index(g) if g in SHARED else len(SHARED)
        return (1 if "/tests/unit/" in str(item.fspath) else 2), 0

    items.sort(key=rank)
