"""verify's pure parts: which texts an artifact holds, and the environment differences it lists."""

from infertune.tasks.embedding.held import pick_held
from infertune.tasks.embedding.reverify import environment_diff
from infertune.workloads.buckets import bucket_of


def test_held_texts_take_every_length_bucket_in_turn():
    lengths = [10] * 500 + [100] * 20 + [600] * 3
    keep = pick_held(lengths, 64)
    assert len(keep) == 64 == len(set(keep))
    got = [bucket_of(lengths[i]) for i in keep]
    assert got.count(bucket_of(600)) == 3 and got.count(bucket_of(100)) == 20  # the rare buckets all held
    assert pick_held([5, 6], 64) == [0, 1]


def test_environment_diff_lists_versions_isa_flags_and_gpus():
    then = {"libraries": {"torch": "2.5.1", "onnxruntime": "1.20.0"}, "cpu_flags": ["avx2", "amx_tile"],
            "cpu_model": "Xeon", "gpu": [{"name": "NVIDIA H100"}]}
    now = {"libraries": {"torch": "2.6.0", "onnxruntime": "1.20.0", "openvino": "2025.1"}, "cpu_flags": ["avx2"],
           "cpu_model": "Xeon", "gpu": []}
    assert environment_diff(then, now) == [
        "openvino: absent (artifact) -> 2025.1 (here)", "torch: 2.5.1 (artifact) -> 2.6.0 (here)",
        "ISA flags only on the artifact's host: amx_tile", "GPUs: NVIDIA H100 (artifact) -> none (here)"]
    assert environment_diff(now, now) == []
