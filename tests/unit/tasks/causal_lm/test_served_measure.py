"""The served candidate's scores from API logprobs (tasks/causal_lm/served_measure.py): the logic, with hand-made
logprob rows."""

from __future__ import annotations

import json
import math

import pytest

from infertune.errors import InfertuneError
from infertune.tasks.causal_lm import served_measure as served
from infertune.tasks.causal_lm.verify import accuracy


def _logsoftmax(xs: list[float]) -> list[float]:
    m = max(xs)
    z = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - z for x in xs]


def _row(logits: list[float], tok: int, k: int):
    lp = _logsoftmax(logits)
    top = dict(sorted(enumerate(lp), key=lambda t: -t[1])[:k])
    return (tok, lp[tok], top)


def test_the_reference_against_itself_is_perfect():
    rows = [[_row([3.0, 1.0, 0.5, -1.0], 0, 3), _row([0.0, 2.0, 1.0, 0.0], 2, 3)]]
    s = served.score(rows, rows)
    assert s["top1_agreement"] == 1.0 and s["kl_mean"] == pytest.approx(0.0, abs=1e-12)
    assert s["nll"] == pytest.approx(served.score(rows)["nll"]) and s["n"] == 2


def test_a_flipped_argmax_and_the_kl_of_full_lists_is_exact():
    ref_l, cand_l = [[2.0, 1.0, 0.0], [0.0, 1.5, 0.2]], [[1.0, 2.0, 0.0], [0.0, 1.4, 0.3]]
    ref = [[_row(x, 0, 3) for x in ref_l]]
    cand = [[_row(x, 0, 3) for x in cand_l]]
    s = served.score(ref, cand)
    assert s["top1_agreement"] == 0.5  # position 0 flips 0 -> 1, position 1 keeps 1
    exact = []
    for a, b in zip(ref_l, cand_l, strict=True):
        p, q = _logsoftmax(a), _logsoftmax(b)
        exact.append(sum(math.exp(x) * (x - y) for x, y in zip(p, q, strict=True)))
    assert s["kl_mean"] == pytest.approx(sum(exact) / 2, rel=1e-9)  # every token listed: no bucket, exact


def test_short_lists_give_a_lower_bound_of_the_full_kl():
    import random

    rng = random.Random(0)
    for _ in range(20):
        a = [rng.gauss(0, 2) for _ in range(50)]
        b = [x + rng.gauss(0, 0.5) for x in a]
        p, q = _logsoftmax(a), _logsoftmax(b)
        full = sum(math.exp(x) * (x - y) for x, y in zip(p, q, strict=True))
        got = served.score([[_row(a, 0, 20)]], [[_row(b, 0, 20)]])["kl_mean"]
        assert 0 < got <= full + 1e-12


def test_scores_feed_verify_accuracy_and_an_empty_set_is_refused():
    ref = [[_row([2.0, 0.0], 0, 2)]]
    cand = [[_row([0.0, 2.0], 0, 2)]]
    acc = accuracy(served.score(ref), served.score(ref, cand), [[1, 2, 3]], [[1, 2, 4]])
    assert acc.top1_agreement == 0.0 and acc.ppl_delta_rel > 0 and acc.greedy_agreement == pytest.approx(2 / 3)
    with pytest.raises(InfertuneError, match="no positions"):
        served.score([[]])


def test_the_server_command_for_both_launchers():
    from infertune.engines.causal_lm.vllm_server import server_argv

    s = served.Served("/m/ckpt", ("--max-num-seqs", "4"))
    mod = server_argv(["py", "-m", "vllm.entrypoints.openai.api_server"], s.checkpoint, s.args, dtype="bfloat16",
                      max_model_len=512, host="127.0.0.1", port=9, served_name="c")
    assert mod[3:5] == ["--model", "/m/ckpt"] and mod[-2:] == ["--max-num-seqs", "4"]
    cli = server_argv(["vllm", "serve"], s.checkpoint, s.args, dtype="bfloat16", max_model_len=512, host="127.0.0.1",
                      port=9, served_name="c")
    assert cli[2] == "/m/ckpt" and "--model" not in cli
    assert s.id == "ckpt --max-num-seqs 4" and served.Served("/m/x", name="ref").id == "ref"


class _Tok:
    """Words as tokens; the chat template is the user text."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [len(w) for w in text.split()]}

    def apply_chat_template(self, msgs, add_generation_prompt=True, tokenize=False):
        return " ".join(m["content"] for m in msgs)


def test_eval_sets_hold_the_eval_split_only_spread_over_lengths(tmp_path):
    from infertune.quantize.llm_calibration import split_indices

    lines = [{"prompt": " ".join(["w"] * (5 + 7 * i)), "max_tokens": 100} for i in range(40)]
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sets = served.eval_sets(_Tok(), tmp_path / "out", wl, n_seqs=5, n_prompts=3, max_len=50, max_tokens=16)
    calib = set(split_indices([5 + 7 * i for i in range(40)]))
    assert sets.n_eval == 40 - len(calib) and len(sets.seqs) == 5 and len(sets.prompts) == 3
    assert max(len(s) for s in sets.seqs) == 50 and len(sets.prompts[0]) < len(sets.prompts[-1])
    rows = [json.loads(x) for x in sets.load_file.read_text().splitlines()]
    assert len(rows) == sets.n_eval and {r["max_tokens"] for r in rows} == {16}
    assert all(r["ignore_eos"] for r in rows)
    eval_lengths = {5 + 7 * i for i in range(40) if i not in calib}
    assert {len(r["prompt"].split()) for r in rows} == eval_lengths


def test_a_checkpoint_without_config_is_refused_before_any_start(tmp_path):
    from infertune.engines.causal_lm.vllm_server import launch

    with pytest.raises(InfertuneError, match="no config.json"):
        launch(str(tmp_path))
