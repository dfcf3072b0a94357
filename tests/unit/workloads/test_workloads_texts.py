import json

import pytest

from infertune.errors import InfertuneError
from infertune.workloads.buckets import histogram, stratified_split
from infertune.workloads.texts import load_workload, sample_path


def test_sample_workload_is_long_tailed_real_text():
    wl = load_workload(None)
    assert len(wl.items) >= 1000
    words = [len(t.split()) for t in wl.items]
    words.sort()
    assert words[len(words) // 2] < 80 < words[-1]  # a median of short-to-medium items and a long tail
    assert sample_path().exists()


def test_jsonl_text_and_blank_lines(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text('{"input": "a b"}\n\n{"text": "ünïcödé 数据"}\n{"input": ["x", "y"]}\n')
    wl = load_workload(p)
    assert wl.items == ["a b", "ünïcödé 数据", "x", "y"]
    assert wl.lines == [1, 3, 4, 4]
    t = tmp_path / "w.txt"
    t.write_text("first line\n\nsecond line\n")
    assert load_workload(t).items == ["first line", "second line"]


@pytest.mark.parametrize("content,needle", [
    ('{"input": "ok"}\n{"input": "broken"\n', ":2: invalid JSON"),
    ('{"input": "ok"}\n{"prompt_text": "x"}\n', ':2: no "input" or "text" field'),
    ('{"input": "ok"}\n{"input": 5}\n', ":2: field 'input' must be a string"),
    ('{"input": "ok"}\n["a"]\n', ":2: expected a JSON object"),
    ('{"input": "ok"}\n{"input": "   "}\n', ":2: empty text"),
])
def test_malformed_jsonl_names_file_and_line(tmp_path, content, needle):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(InfertuneError) as e:
        load_workload(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_binary_and_empty_files(tmp_path):
    b = tmp_path / "bin.jsonl"
    b.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(InfertuneError, match="not UTF-8"):
        load_workload(b)
    e = tmp_path / "empty.txt"
    e.write_text("\n\n")
    with pytest.raises(InfertuneError, match="no items"):
        load_workload(e)


def test_stratified_split_keeps_bucket_shares_and_is_deterministic():
    lengths = [10] * 100 + [100] * 50 + [400] * 10
    calib, evals = stratified_split(lengths, 0.7, seed=1)
    assert sorted(calib + evals) == list(range(160))
    assert stratified_split(lengths, 0.7, seed=1) == (calib, evals)
    assert sum(1 for i in evals if lengths[i] == 400) == 7
    assert sum(1 for i in evals if lengths[i] == 10) == 70
    h = histogram(lengths)
    assert sum(b["count"] for b in h) == 160 and h[-2]["count"] == 10 and h[-2]["bucket"] == "257-512"
    json.dumps(h)
