"""`--dimensions auto`: a Matryoshka model gets the smallest prefix that stays within budget, with what it saves;
a model not trained for truncation keeps its full vector and is told what truncation would cost."""

import json
from types import SimpleNamespace

import numpy as np

from infertune.config import AccuracyBudget, TuneConfig
from infertune.tasks.embedding import dimensions as dims


def _overlap_at_least(x):
    return lambda v: v >= x


def test_matryoshka_model_gets_the_smallest_prefix_within_budget_and_its_saving():
    got = dims.decide(384, True, "config.json lists matryoshka_dimensions", {64: 0.71, 128: 0.93, 192: 0.96},
                      _overlap_at_least(0.9), "top-10 overlap", "budget 0.9")
    assert got["chosen"] == 128
    s = got["saving"]
    assert s["index_gb_per_million"] == round(4 * 128 * 1e6 / 1e9, 3) and s["scan_share"] == round(128 / 384, 4)
    assert "128 of 384 dims" in got["why"] and f"{s['index_gb_per_million']:g} GB per million" in got["why"]
    assert [t["ok"] for t in got["tried"]] == [False, True, True]


def test_a_small_prefix_that_passes_under_a_failing_larger_one_is_not_chosen():
    got = dims.decide(384, True, "card", {64: 0.95, 128: 0.85, 192: 0.93}, _overlap_at_least(0.9),
                      "top-10 overlap", "budget 0.9")
    assert got["chosen"] == 192


def test_a_model_not_trained_for_truncation_keeps_its_vector_and_is_told_the_cost():
    got = dims.decide(384, False, "neither its config nor its model card says so", {96: 0.41, 192: 0.62},
                      _overlap_at_least(0.9), "top-10 overlap", "budget 0.9", model="minilm")
    assert got["chosen"] == 384 and got["saving"]["scan_share"] == 1.0
    assert "truncation costs too much" in got["why"] and "192 of 384 dims give top-10 overlap 0.620" in got["why"]
    # a prefix that happens to pass on this workload is still not taken, but the user is told the flag
    ok = dims.decide(384, False, "not said", {192: 0.95}, _overlap_at_least(0.9), "top-10 overlap", "budget 0.9")
    assert ok["chosen"] == 384 and "--dimensions 192" in ok["why"]


def test_no_prefix_within_budget_keeps_the_full_vector():
    got = dims.decide(1024, True, "card", {256: 0.5, 512: 0.8}, _overlap_at_least(0.9), "top-10 overlap", "b")
    assert got["chosen"] == 1024 and "no prefix" in got["why"] and "512 dims give" in got["why"]


def test_what_the_model_files_say(tmp_path):
    listed = tmp_path / "jina"
    listed.mkdir()
    (listed / "config.json").write_text(json.dumps({"matryoshka_dimensions": [1024, 32, 64, 128, 256, 512, 768]}))
    assert dims.declared(listed)[:2] == (True, [32, 64, 128, 256, 512, 768, 1024])
    card = tmp_path / "st"
    card.mkdir()
    (card / "config.json").write_text("{}")
    (card / "README.md").write_text("---\ntags:\n- sentence-transformers\n- loss:MatryoshkaLoss\n---\n")
    assert dims.declared(card)[:2] == (True, [])
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    (plain / "README.md").write_text("a sentence embedding model\n")
    assert dims.declared(plain)[0] is False


def test_the_embedded_minilm_does_not_say_it_is_matryoshka():
    from infertune.models.resolve import resolve_model

    mrl, _, why = dims.declared(resolve_model("minilm").path)
    assert mrl is False and "Matryoshka" in why


def test_prefixes_follow_the_listed_dims_or_halvings():
    assert dims.prefixes(384) == [48, 64, 96, 128, 192, 256]
    assert dims.prefixes(1024, [32, 256, 1024]) == [32, 256]


def _vectors(decay: float, n: int = 300, d: int = 384, seed: int = 0) -> np.ndarray:
    """Rows whose variance falls along the dims (decay > 0: what Matryoshka training does) or is flat (0)."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) * np.exp(-decay * np.arange(d))[None, :]).astype(np.float32)


def _task(tmp_path, mrl: bool, budget=AccuracyBudget()):
    d = tmp_path / ("mrl" if mrl else "plain")
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"matryoshka_dimensions": [64, 128, 192]} if mrl else {}))
    lines = []
    con = SimpleNamespace(print=lambda s, **_: lines.append(s))
    cfg = TuneConfig(dimensions="auto", accuracy=budget)
    return SimpleNamespace(cfg=cfg, ref=SimpleNamespace(path=d), spec=SimpleNamespace(name="m"), console=con,
                           result=SimpleNamespace(dimensions={}), lines=lines)


def test_auto_decides_once_on_the_reference_vectors_and_judges_candidates_on_the_choice(tmp_path):
    task = _task(tmp_path, mrl=True)
    ref = _vectors(decay=0.05)  # nearly all of the variance in the first 64 dims
    chosen = dims.judged_dims(task, ref, embed=None)
    assert chosen < 384 and task.result.dimensions["chosen"] == chosen and task.lines
    fig = {t["dims"]: t["top-10 overlap"] for t in task.result.dimensions["tried"]}
    assert fig[chosen] >= dims.NEIGHBOURS
    # later calls (candidates) reuse the choice, whatever their vectors
    assert dims.judged_dims(task, _vectors(decay=0.0, seed=1), embed=None) == chosen


def test_auto_on_flat_vectors_of_an_unlabelled_model_keeps_everything(tmp_path):
    task = _task(tmp_path, mrl=False)
    assert dims.judged_dims(task, _vectors(decay=0.0), embed=None) == 384
    d = task.result.dimensions
    assert d["matryoshka"] is False and "truncation costs too much" in d["why"]


def test_auto_on_pairs_gates_the_recall_drop(tmp_path):
    from infertune.tasks.embedding.task_eval import Pairs

    rng = np.random.default_rng(3)
    docs = rng.normal(size=(60, 384)) * np.exp(-0.002 * np.arange(384))  # flat enough that prefixes hurt
    queries = docs + rng.normal(scale=0.9, size=docs.shape)
    texts = {f"q{i}": queries[i] for i in range(60)} | {f"d{i}": docs[i] for i in range(60)}
    pairs = Pairs(queries=[f"q{i}" for i in range(60)], corpus=[f"d{i}" for i in range(60)],
                  positive=list(range(60)), source="p.jsonl")
    task = _task(tmp_path, mrl=True, budget=AccuracyBudget(max_recall_drop=0.02))
    task.task_eval = SimpleNamespace(pairs=pairs)
    chosen = dims.judged_dims(task, docs.astype(np.float32), embed=lambda ts: np.stack([texts[t] for t in ts]))
    d = task.result.dimensions
    assert d["metric"] == "recall@10 drop"
    by = {t["dims"]: t for t in d["tried"]}
    assert all(by[x]["ok"] == (by[x]["recall@10 drop"] <= 0.02) for x in by)
    assert chosen == min((x for x in by if all(by[y]["ok"] for y in by if y >= x)), default=384)


def test_the_dimensions_option_takes_a_whole_number_or_auto():
    import pytest

    from infertune.errors import InfertuneError

    assert TuneConfig(dimensions="256").dimensions == 256 and TuneConfig(dimensions="auto").dimensions == "auto"
    for bad in ("abc", "0", -3, 2.5, True):
        with pytest.raises(InfertuneError, match="positive whole number or auto"):
            TuneConfig(dimensions=bad)


def test_the_artifact_records_the_dims_accuracy_was_judged_on():
    from infertune.tasks.embedding.artifact import _judged_dims

    def res(want, chosen=None):
        return SimpleNamespace(config={"dimensions": want},
                               dimensions={"chosen": chosen, "full": 384} if chosen else {})

    assert _judged_dims(res(None)) is None and _judged_dims(res(256)) == 256
    assert _judged_dims(res("auto", 128)) == 128 and _judged_dims(res("auto", 384)) is None
