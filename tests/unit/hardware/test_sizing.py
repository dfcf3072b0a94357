from infertune.hardware.sizing import default_frontends, tokenizer_processes


def test_tune_tokenizes_in_as_many_processes_as_serve_starts_frontends_per_gpu(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert tokenizer_processes() == default_frontends("cuda", 1) == 12
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert tokenizer_processes() == 1  # a small host: threads of the worker
