"""The real MiniLM's CPU engines, prepared once for the tests that read them (test_cpu_engines.py,
test_kernels_that_ran.py): an ONNX export, a quantization or an NNCF calibration (~15 s) is made once and read by
every test of that engine. Embedding, profiling and saving leave a prepared engine as it was."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infertune.config import Candidate


@dataclass
class MiniLMEngines:
    spec: Any  # EmbeddingSpec of the real MiniLM
    items: list[str]  # the built-in sample workload
    evals: list[str]  # 64 texts, shortest to longest, evenly
    calib: list[str]  # 32 other texts to calibrate on
    work: Path  # the work folder the ONNX engines share (one export)
    prepared: dict[str, Any] = field(default_factory=dict)

    def prepare(self, cand: Candidate) -> Any:
        """`cand` prepared on the CPU, once per candidate id."""
        if cand.id not in self.prepared:
            self.prepared[cand.id] = self.prepare_anew(cand)
        return self.prepared[cand.id]

    def prepare_anew(self, cand: Candidate) -> Any:
        """`cand` prepared on the CPU again, not the session's: for a test that patches the preparation."""
        from infertune.registry import load_backend

        backend = load_backend(cand.backend)
        assert backend.available(cand, "cpu") is None
        return backend.prepare(self.spec, cand, "cpu", self.work, self.calib)


def minilm_engines(work: Path) -> MiniLMEngines:
    from infertune.models.embedding import embedding_spec
    from infertune.workloads.texts import load_workload

    items = load_workload(None).items
    by_len = sorted(items, key=len)
    evals = by_len[:: len(by_len) // 64][:64]
    used = set(evals)
    calib = [t for t in items if t not in used][::7][:32]
    return MiniLMEngines(embedding_spec("minilm"), items, evals, calib, work)
