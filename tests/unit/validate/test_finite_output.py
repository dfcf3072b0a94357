"""The finite-output drill's judgement (validate/health.py): what each answer means for its inputs, and the
verdict: NaN or Inf in an answer fails, so does the server's own non-finite 500, a 4xx is listed only."""

from __future__ import annotations

import json

from infertune.validate.health import _verdict, judge, probes, workload_texts
from infertune.workloads.bodies import Requests


def _ok(*rows):
    return {"data": [{"index": i, "embedding": r} for i, r in enumerate(rows)]}


def test_an_answer_holding_nan_or_inf_is_caught_per_input():
    body = json.loads('{"data": [{"index": 0, "embedding": [0.1, NaN]}, {"index": 1, "embedding": [0.5, 0.5]},'
                      ' {"index": 2, "embedding": [Infinity, 0]}]}')
    assert judge(200, body, ["a", "b", "c"]) == {"a": "nonfinite_returned", "b": "ok", "c": "nonfinite_returned"}
    assert judge(200, _ok([0.1, 0.2]), ["a"]) == {"a": "ok"}
    assert judge(200, _ok([0.1]), ["a", "b"]) == {"a": "error", "b": "error"}  # a row missing is not an answer


def test_the_servers_nonfinite_500_names_only_the_inputs_it_reports():
    err = {"error": {"message": "non-finite values in the embedding of inputs 0 (Inf), 2 (NaN); a fp16 ...",
                     "code": "nonfinite_embedding"}}
    assert judge(500, err, ["a", "b", "c"]) == {"a": "nonfinite_reported", "b": "ok_unanswered",
                                                "c": "nonfinite_reported"}
    assert judge(400, {"error": {"message": "too long"}}, ["a"]) == {"a": "refused_4xx"}
    assert judge(500, {"error": {"message": "the batch failed"}}, ["a"]) == {"a": "error"}
    assert judge(None, None, ["a"]) == {"a": "error"}


def test_verdict_fails_on_nonfinite_and_passes_on_finite_answers():
    inputs = [("workload[0]", "x"), ("repeated_word", "the " * 10), ("single_letter", "a")]
    good = _verdict(inputs, dict.fromkeys(["workload[0]", "repeated_word", "single_letter"], "ok"),
                    dict.fromkeys(["workload[0]", "repeated_word", "single_letter"], "ok"), {}, 0.1)
    assert good.passed is True and good.evidence["answered_finite"] == 3
    bad = _verdict(inputs, {"workload[0]": "ok", "repeated_word": "nonfinite_reported", "single_letter": "ok"},
                   {"workload[0]": "ok_unanswered", "repeated_word": "nonfinite_reported",
                    "single_letter": "ok_unanswered"}, {}, 0.1)
    assert bad.passed is False and bad.evidence["nonfinite_reported"] == ["repeated_word"]
    assert "repeated_word" in bad.reason
    leaked = _verdict(inputs, {"workload[0]": "nonfinite_returned", "repeated_word": "ok", "single_letter": "ok"},
                      dict.fromkeys(["workload[0]", "repeated_word", "single_letter"], "ok"), {}, 0.1)
    assert leaked.passed is False and leaked.evidence["nonfinite_returned"] == ["workload[0]"]
    refused = _verdict(inputs, {"workload[0]": "ok", "repeated_word": "refused_4xx", "single_letter": "ok"},
                       {"workload[0]": "ok", "repeated_word": "refused_4xx", "single_letter": "ok"}, {}, 0.1)
    assert refused.passed is True and refused.evidence["refused_4xx"] == ["repeated_word"]


def test_probes_stay_within_the_token_limit_and_workload_texts_are_distinct():
    got = dict(probes(128, ["q"]))
    assert got["workload[0]"] == "q" and len(got["repeated_word"].split()) <= 128 - 16
    assert len(got["repeated_punctuation"]) <= 112 and 4 * len(got["repeated_emoji"]) <= 112
    assert got["whitespace_only"].strip() == ""
    bodies = [json.dumps({"model": "m", "input": x}).encode() for x in ("a", ["b", "a"], "c")]
    assert workload_texts(Requests(bodies, [1, 1, 1], [None] * 3, "t"), limit=2) == ["a", "b"]
