from infertune.hardware.sizing import default_frontends, tokenizer_processes


def test_tune_tokenizes_in_as_many_processes_as_serve_starts_frontends_per_gpu(monkeypatch):
    monkeypatch.delenv("INFERTUNE_TUNE_TOKENIZERS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert tokenizer_processes() == default_frontends("cuda", 1) == 12
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert tokenizer_processes() == 1  # a small host: threads of the worker


def test_the_environment_sets_tunes_tokenizer_processes_for_a_side_by_side_check(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.setenv("INFERTUNE_TUNE_TOKENIZERS", "6")
    assert tokenizer_processes() == 6
    for ignored in ("0", "many", ""):
        monkeypatch.setenv("INFERTUNE_TUNE_TOKENIZERS", ignored)
        assert tokenizer_processes() == 12
