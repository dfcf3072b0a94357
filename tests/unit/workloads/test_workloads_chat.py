import json

import pytest

from infertune.errors import InfertuneError
from infertune.workloads.chat import Request, load_chat_workload, sample_chat_path


def test_sample_has_both_shapes_and_a_length_spread():
    reqs, src = load_chat_workload()
    assert src == str(sample_chat_path())
    assert len(reqs) >= 200
    chat = [r for r in reqs if r.messages]
    comp = [r for r in reqs if r.prompt]
    assert chat and comp
    chars = sorted(len(r.prompt or r.messages[-1][1]) for r in reqs)
    # long-tailed: the longest prompts are over 20x the median one
    assert chars[-1] > 20 * chars[len(chars) // 2] / 2
    assert {r.max_tokens for r in reqs} >= {32, 64, 128, 256}


def test_reads_chat_completions_and_text(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}) + "\n\n"
                 + json.dumps({"prompt": "Once upon"}) + "\n")
    reqs, _ = load_chat_workload(p)
    assert reqs[0] == Request(messages=(("user", "hi"),), max_tokens=5)
    assert reqs[1].prompt == "Once upon" and reqs[1].max_tokens == 128
    assert reqs[0].to_openai() == {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    t = tmp_path / "w.txt"
    t.write_text("first prompt\nsecond prompt\n")
    assert [r.prompt for r in load_chat_workload(t)[0]] == ["first prompt", "second prompt"]


@pytest.mark.parametrize("line, msg", [
    ('{"messages": []}', "non-empty list"),
    ('{"prompt": "x", "max_tokens": 0}', "max_tokens"),
    ('{"foo": 1}', "no \"messages\" or \"prompt\""),
    ('{"messages": [{"role": "user"}]}', "content"),
    ('not json', "invalid JSON"),
])
def test_errors_name_file_and_line(tmp_path, line, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(InfertuneError, match=msg) as e:
        load_chat_workload(p)
    assert "bad.jsonl:2" in str(e.value)


def test_render_uses_chat_template():
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
            return "<" + msgs[0]["content"] + ">"

    assert Request(messages=(("user", "q"),)).render(Tok()) == "<q>"
    assert Request(prompt="p").render(Tok()) == "p"
