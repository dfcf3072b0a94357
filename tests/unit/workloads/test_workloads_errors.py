"""Every traffic reader gives the same errors for the same mistakes: an InfertuneError naming the file (and the line),
what is wrong and what to do; never a traceback from open() or json."""

import pytest

from infertune.errors import InfertuneError
from infertune.workloads.bodies import from_file
from infertune.workloads.chat import load_chat_workload
from infertune.workloads.lengths import request_lengths
from infertune.workloads.texts import load_workload

READERS = {
    "texts": load_workload,
    "chat": load_chat_workload,
    "bodies": lambda p: from_file(p, "chat", None, False),
    "lengths": request_lengths,
}


@pytest.mark.parametrize("name", READERS)
def test_missing_file_and_directory(tmp_path, name):
    read = READERS[name]
    with pytest.raises(InfertuneError, match=r"does not exist; pass a \.jsonl or \.txt file"):
        read(tmp_path / "nope.jsonl")
    with pytest.raises(InfertuneError, match="is a directory; pass a .jsonl or .txt file"):
        read(tmp_path)


@pytest.mark.parametrize("name", ["texts", "chat", "bodies"])
def test_binary_file(tmp_path, name):
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b'{"input": "ok"}\n\xff\xfe\n')
    with pytest.raises(InfertuneError, match="not UTF-8 text.*Save it as UTF-8") as e:
        READERS[name](p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("name", READERS)
def test_empty_file(tmp_path, name):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n  \n")
    with pytest.raises(InfertuneError, match="no (items|requests) found; expected one") as e:
        READERS[name](p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("name", ["texts", "chat", "lengths"])
def test_invalid_json_names_the_line_and_the_shape(tmp_path, name):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "ok", "input": "ok"}\n\n{"prompt": "broken"\n')
    with pytest.raises(InfertuneError, match=r"bad\.jsonl:3: invalid JSON .*each line must be one object like \{"):
        READERS[name](p)


@pytest.mark.parametrize("name", ["texts", "chat", "bodies"])
def test_not_an_object_names_the_line(tmp_path, name):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "ok", "input": "ok"}\n[1, 2]\n')
    with pytest.raises(InfertuneError, match=r"bad\.jsonl:2: expected a JSON object like \{.*got list"):
        READERS[name](p)


def test_bench_bodies_take_a_line_that_is_not_json_as_its_text(tmp_path):
    p = tmp_path / "w.txt"
    p.write_bytes(b'first prompt\r\n{"prompt": "second", "max_tokens": 7}\rthird\n')
    req = from_file(p, "completions", None, False)
    assert [b.decode() for b in req.bodies] == ['{"prompt": "first prompt", "max_tokens": 128}',
                                                 '{"prompt": "second", "max_tokens": 7}',
                                                 '{"prompt": "third", "max_tokens": 128}']


def test_bench_bodies_line_without_a_text(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text('{"prompt": "ok"}\n{"max_tokens": 3}\n')
    with pytest.raises(InfertuneError, match=r"w\.jsonl:2: needs 'input', 'prompt', 'text' or 'messages'; write"):
        from_file(p, "chat", None, False)


def test_plan_lengths_bad_count_names_the_line(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": "many"}\n')
    with pytest.raises(InfertuneError, match=r"w\.jsonl:2: a token count must be a whole number, got 'many'"):
        request_lengths(p)
    p.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": 12}\n')
    assert request_lengths(p) == ([10, 12], [5], "token counts from the file")
