"""The user's own task metrics: recall@10 and MRR over labelled pairs (--eval-pairs) and a user's function
(--eval module:function), computed with the reference and each candidate, gated on the drop; bad input is one
clear line."""

import json
import sys
import textwrap

import numpy as np
import pytest
from accuracy_helpers import TableWorker, fake, hard_pairs, verifying_task

from infertune.config import AccuracyBudget, TuneConfig
from infertune.errors import InfertuneError
from infertune.tasks.embedding.task_eval import load_callable, load_pairs, parse_metrics, retrieval


def test_retrieval_counts_ranks():
    angles = 0.1 * np.arange(15)  # document j is the (j+1)-th nearest to a query along the x axis
    docs = np.stack([np.cos(angles), np.sin(angles)], 1)
    q = np.tile([1.0, 0.0], (3, 1))
    got = retrieval(q, docs, [0, 4, 12])  # ranks 1, 5 and 13
    assert got["recall@10"] == pytest.approx(2 / 3)
    assert got["mrr"] == pytest.approx((1 + 1 / 5 + 1 / 13) / 3)
    assert retrieval(q, docs, [0, 4, 12], k=5)["recall@5"] == pytest.approx(2 / 3)
    assert retrieval(q, np.vstack([docs[:1], docs]), [1, 1, 1])["mrr"] == 1.0  # a tie does not push it down


def _pairs_setup(tmp_path, **budget):
    rows, table = hard_pairs()
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rng = np.random.default_rng(5)
    evals = [f"e{i}" for i in range(120)]
    table.update({t: rng.normal(size=64) for t in evals})
    cfg = TuneConfig(eval_pairs=path, accuracy=AccuracyBudget(**budget))
    return cfg, table, evals, len(rows)


def test_a_candidate_is_rejected_on_recall_drop_while_its_cosine_passes(tmp_path):
    cfg, table, evals, n = _pairs_setup(tmp_path)
    task = verifying_task(cfg, evals)
    acc, ok, why = task.verify(TableWorker(table, evals), fake())
    assert ok, why
    ref = {m.name: m for m in acc.task}
    assert set(ref) == {"recall@10", "mrr"} and ref["recall@10"].n == n
    assert ref["recall@10"].value == ref["recall@10"].reference  # the reference is compared with itself
    # a nudge of 5% of each vector's norm: cosine ~0.999, but the positives sit a hair above their negatives
    acc, ok, why = task.verify(TableWorker(table, evals, rel=0.05), fake(tag="nudged"))
    budget = cfg.accuracy
    assert acc.cosine_mean >= budget.min_cosine_mean and acc.cosine_min >= budget.min_cosine_min, acc
    assert all(b.cosine_mean >= budget.min_cosine_mean for b in acc.by_bucket)
    m = {x.name: x for x in acc.task}
    assert m["recall@10"].drop > budget.max_recall_drop and m["mrr"].value < m["mrr"].reference
    assert not ok and why.startswith("recall@10 ") and f"eval-pairs, n={n} queries" in why
    assert f"> budget {budget.max_recall_drop:g}" in why
    # the gate is --max-recall-drop: in a run that allows the drop the same candidate passes
    loose = verifying_task(cfg.model_copy(update={"accuracy": budget.model_copy(
        update={"max_recall_drop": m["recall@10"].drop})}), evals)
    assert loose.verify(TableWorker(table, evals), fake())[1]
    assert loose.verify(TableWorker(table, evals, rel=0.05), fake(tag="nudged"))[1:] == (True, "")


USER_EVAL = '''
import numpy as np

N = 40


def top1(embed):
    """Each query's own document must be its nearest among all positives and negatives."""
    docs = [f"p{i}" for i in range(N)] + [f"n{i}_{j}" for i in range(N) for j in range(12)]
    own = [docs.index(f"p{i}") for i in range(N)]
    q, d = embed([f"q{i}" for i in range(N)]), embed(docs)
    sims = q @ d.T
    ranks = 1 + (sims > sims[np.arange(N), own][:, None]).sum(1)
    return {"top1": float(np.mean(ranks == 1)), "mean_rank": (float(ranks.mean()), "lower")}


def broken(embed):
    embed(["q0"])
    raise ValueError("no labels for this split")


def picky(embed):
    got = top1(embed)
    if got["top1"] < 1:
        raise RuntimeError("expected every query's own document first")
    return got
'''


def _user_module(tmp_path, name):
    f = tmp_path / f"{name}.py"
    f.write_text(textwrap.dedent(USER_EVAL))
    return f


def test_a_user_function_is_called_with_embed_and_gated(tmp_path, monkeypatch):
    _user_module(tmp_path, "user_eval_h28")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    cfg, table, evals, _ = _pairs_setup(tmp_path)
    cfg = cfg.model_copy(update={"eval_pairs": None, "eval_fn": "user_eval_h28:top1"})
    task = verifying_task(cfg, evals)
    acc, ok, why = task.verify(TableWorker(table, evals), fake())
    assert ok, why
    ref = {m.name: m for m in acc.task}
    assert ref["top1"].value == 1.0 and ref["top1"].higher_is_better  # the reference ranks every own document first
    assert ref["mean_rank"].value == 1.0 and not ref["mean_rank"].higher_is_better
    assert {m.source for m in acc.task} == {"user_eval_h28:top1"}
    acc, ok, why = task.verify(TableWorker(table, evals, rel=0.05), fake(tag="nudged"))
    m = {x.name: x for x in acc.task}
    assert acc.cosine_mean >= cfg.accuracy.min_cosine_mean
    assert m["top1"].value < 1.0 and m["mean_rank"].value > 1.0
    assert not ok and why.startswith("top1 ") and "(user_eval_h28:top1)" in why and "drop" in why
    # a lower-is-better metric is gated on its rise: with room for top1's drop, mean_rank's rise rejects it
    assert m["mean_rank"].drop > m["top1"].drop
    loose = verifying_task(cfg.model_copy(update={"accuracy": cfg.accuracy.model_copy(
        update={"max_eval_drop": m["top1"].drop})}), evals)
    assert loose.verify(TableWorker(table, evals), fake())[1]
    ok, why = loose.verify(TableWorker(table, evals, rel=0.05), fake(tag="nudged"))[1:]
    assert not ok and why.startswith("mean_rank ") and "rise" in why


def test_a_user_function_by_file_path_and_its_failures(tmp_path):
    f = _user_module(tmp_path, "by_path_eval")
    _, table, evals, _ = _pairs_setup(tmp_path)
    assert callable(load_callable(f"{f}:top1"))
    cfg = TuneConfig(eval_fn=f"{f}:broken")
    task = verifying_task(cfg, evals)
    with pytest.raises(InfertuneError, match="raised ValueError: no labels for this split .on the reference."):
        task.verify(TableWorker(table, evals), fake())


def test_a_user_function_failing_on_a_candidate_rejects_it(tmp_path):
    f = _user_module(tmp_path, "fails_later_eval")
    _, table, evals, _ = _pairs_setup(tmp_path)
    task = verifying_task(TuneConfig(eval_fn=f"{f}:picky"), evals)
    assert task.verify(TableWorker(table, evals), fake())[1]
    acc, ok, why = task.verify(TableWorker(table, evals, rel=0.05), fake(tag="nudged"))
    assert not ok and why == (f"top1 ({f}:picky) gave no figure: RuntimeError: expected every query's own "
                              "document first")
    assert [m.value for m in acc.task] == [None, None]
    # the engine failing under the user's call is the engine's failure, not the function's
    missing = {k: v for k, v in table.items() if k != "q3"}
    with pytest.raises(KeyError, match="q3"):
        task.verify(TableWorker(missing, evals), fake(tag="broken"))


@pytest.mark.parametrize("target, msg", [
    ("no_colon", "expected module:function"),
    ("surely_not_a_module_h28:fn", "importing surely_not_a_module_h28 failed: ModuleNotFoundError"),
    ("json:no_such_function", "json has no function 'no_such_function'"),
    ("missing/file.py:fn", "is not a file"),
])
def test_bad_eval_targets_are_one_line(target, msg):
    with pytest.raises(InfertuneError, match=msg) as e:
        load_callable(target)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("got", [None, {}, {"a": "x"}, {"a": True}, {"a": (1.0, "up")}, [1.0]])
def test_bad_user_results_are_one_line(got):
    with pytest.raises(InfertuneError, match="expected a dict of name"):
        parse_metrics(got, "m:f")


def test_metric_shapes():
    got = parse_metrics({"a": 1, "b": (2.0, "lower"), "c": {"value": np.float32(0.5), "higher_is_better": False}},
                        "m:f")
    assert got == {"a": (1.0, True), "b": (2.0, False), "c": (0.5, False)}


@pytest.mark.parametrize("lines, msg", [
    (['{"query": "a", "positive": "b"}', "{oops"], r"pairs.jsonl:2: invalid JSON"),
    (['{"query": "a"}'], r"pairs.jsonl:1: 'positive' must be a non-empty string"),
    (['{"query": "a", "positive": "b", "negatives": "c"}'], r"'negatives' must be a list"),
    (['{"query": "a", "positive": "b", "negatives": ["c", "d"]}'], r"the corpus has 3 documents"),
    ([""], r"no pairs found"),
])
def test_bad_pairs_files_are_one_line(tmp_path, lines, msg):
    p = tmp_path / "pairs.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InfertuneError, match=msg) as e:
        load_pairs(p)
    assert "\n" not in str(e.value)


def test_the_corpus_is_every_document_once(tmp_path):
    p = tmp_path / "pairs.jsonl"
    rows = [{"query": f"q{i}", "positive": f"d{i}", "negatives": [f"d{(i + 1) % 12}", "shared"]} for i in range(12)]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    pairs = load_pairs(p)
    assert len(pairs.corpus) == 13 and [pairs.corpus[i] for i in pairs.positive] == [f"d{i}" for i in range(12)]


def test_a_missing_pairs_file_is_refused_before_anything_loads(tmp_path):
    with pytest.raises(InfertuneError, match="is not a file"):
        TuneConfig(eval_pairs=tmp_path / "nope.jsonl")


def _cli(*args: str):
    import subprocess

    code = f"import sys; sys.argv = ['infertune', *{list(args)!r}]; from infertune.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_cli_refuses_a_missing_pairs_file_and_a_bad_target_in_one_line(tmp_path):
    r = _cli("tune", "--eval-pairs", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "is not a file" in r.stderr, r.stderr
    r = _cli("tune", "--eval", "no_colon", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "expected module:function" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_causal_lm_refuses_the_embedding_task_flags(tmp_path):
    from pathlib import Path

    from rich.console import Console

    from infertune.tune import make_task

    llama = str(Path(__file__).parents[2] / "configs" / "llama-3-8b.json")
    with pytest.raises(InfertuneError, match="--eval-pairs and --eval score embeddings"):
        make_task(TuneConfig(model=llama, eval_fn="m:f"), Console(quiet=True))
