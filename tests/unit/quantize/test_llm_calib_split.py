"""The calibration file llm-compressor's oneshot reads is the workload's length-stratified calibration
split, rendered with the chat template, in the JSON-lines shape the step's command names."""

import json

from infertune.quantize.llm_calibration import split_indices, write_calibration
from infertune.quantize.llm_checkpoint_rules import W4A16
from infertune.quantize.llm_checkpoint_step import llm_compressor_step
from infertune.workloads.buckets import bucket_of


class WordTokenizer:
    """One token per whitespace-separated word; a chat template that marks the turns, as SmolLM2's does."""

    chat_template = "marks"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(range(len(text.split())))}

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs) + "<|im_start|>assistant\n"


def workload(tmp_path, lengths):
    p = tmp_path / "chats.jsonl"
    p.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i} " + "w " * (n - 1)}]}) + "\n"
                         for i, n in enumerate(lengths)))
    return p


def test_split_keeps_each_length_bucket_and_renders_the_template(tmp_path):
    # 40 short prompts and 10 long ones: a random 30% could miss the long tail; the stratified split cannot
    lengths = [10] * 40 + [900] * 10
    got = write_calibration(tmp_path / "cal", WordTokenizer(), workload(tmp_path, lengths))
    rows = [json.loads(x) for x in (tmp_path / "cal" / "train.json").read_text().splitlines()]
    assert got.n == len(rows) == 15 and got.n_workload == 50  # 30% of 40 + 30% of 10
    assert all(set(r) == {"text"} for r in rows)
    assert all(r["text"].startswith("<|im_start|>user\nq") and r["text"].endswith("<|im_start|>assistant\n")
               for r in rows)
    words = [len(r["text"].split()) for r in rows]
    long = sum(n > 512 for n in words)
    assert long == 3 and len(rows) - long == 12  # the long bucket's share is the workload's: 10 of 50
    assert got.tokens["max"] > 512 and got.tokens["min"] < 16
    assert {h["bucket"]: h["count"] for h in got.histogram if h["count"]} == {"1-16": 12, ">512": 3}


def test_split_is_tunes_calibration_side_deterministic_and_disjoint_from_eval(tmp_path):
    from infertune.workloads.buckets import stratified_split

    lengths = [5 + (i * 37) % 700 for i in range(120)]
    seen = [n + 3 for n in lengths]  # what the tokenizer counts: the template adds 3 words to the content
    calib, evals = stratified_split(seen, 0.7, 0)
    assert split_indices(seen) == calib and not set(calib) & set(evals)
    a = write_calibration(tmp_path / "a", WordTokenizer(), workload(tmp_path, lengths))
    b = write_calibration(tmp_path / "b", WordTokenizer(), workload(tmp_path, lengths))
    assert (tmp_path / "a/train.json").read_text() == (tmp_path / "b/train.json").read_text() and a.n == b.n
    firsts = [json.loads(x)["text"].split("\n")[1].split()[0]
              for x in (tmp_path / "a/train.json").read_text().splitlines()]
    assert firsts == [f"q{i}" for i in calib] and a.n == len(calib)
    assert {bucket_of(seen[i]) for i in calib} == {bucket_of(n) for n in seen}


def test_file_is_where_the_step_reads_it(tmp_path):
    step = llm_compressor_step(W4A16, str(tmp_path / "model"), "model")
    got = write_calibration(step.oneshot["dataset_path"], WordTokenizer(), workload(tmp_path, [10] * 20))
    assert got.file == step.calibration["file"]


def test_builtin_sample_by_default(tmp_path):
    got = write_calibration(tmp_path, WordTokenizer())
    assert got.source.endswith("sample_chat.jsonl") and 0.25 < got.n / got.n_workload < 0.35


def test_one_rendering_serves_the_split_and_the_eval_sets(tmp_path):
    """tune renders and tokenizes the workload once (render_workload) and hands it to the calibration split and the
    eval sets: the same files as each doing it alone, with no tokenizer call after the rendering."""
    from infertune.quantize.llm_calibration import render_workload
    from infertune.tasks.causal_lm.served_measure import eval_sets

    class Counting(WordTokenizer):
        calls = 0

        def __call__(self, text, add_special_tokens=False):
            Counting.calls += 1
            return super().__call__(text, add_special_tokens)

    wl = workload(tmp_path, [5 + (i * 37) % 700 for i in range(60)])
    tok = Counting()
    alone_cal = write_calibration(tmp_path / "a", tok, wl)
    alone_ev = eval_sets(tok, tmp_path / "ea", wl, n_seqs=6, n_prompts=4)
    rendered = render_workload(tok, wl)
    before = Counting.calls
    cal = write_calibration(tmp_path / "b", tok, wl, rendered=rendered)
    ev = eval_sets(tok, tmp_path / "eb", wl, n_seqs=6, n_prompts=4, rendered=rendered)
    assert Counting.calls == before and before == 3 * 60  # each alone tokenized all 60; with `rendered`, none
    assert (tmp_path / "a/train.json").read_text() == (tmp_path / "b/train.json").read_text() and cal.n == alone_cal.n
    assert ev.seqs == alone_ev.seqs and ev.prompts == alone_ev.prompts
    assert (tmp_path / "ea/load.jsonl").read_text() == (tmp_path / "eb/load.jsonl").read_text()


def test_a_capped_split_spans_the_lengths_and_says_what_it_was_cut_from(tmp_path):
    lengths = [5 + (i * 37) % 700 for i in range(120)]
    full = write_calibration(tmp_path / "a", WordTokenizer(), workload(tmp_path, lengths))
    cut = write_calibration(tmp_path / "b", WordTokenizer(), workload(tmp_path, lengths), max_n=8)
    assert full.n == 36 and full.n_split is None
    assert cut.n == 8 and cut.n_split == 36
    rows = (tmp_path / "b/train.json").read_text().splitlines()
    assert len(rows) == 8 and set(rows) <= set((tmp_path / "a/train.json").read_text().splitlines())
    # the shortest and the longest of the split are kept: the cap thins every length, it does not drop the tail
    assert cut.tokens["min"] == full.tokens["min"] and cut.tokens["max"] == full.tokens["max"]
    assert write_calibration(tmp_path / "c", WordTokenizer(), workload(tmp_path, lengths), max_n=100).n == 36
