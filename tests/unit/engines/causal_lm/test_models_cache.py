"""The GGUF conversion cache is keyed by content, not by where the file lies."""

from infertune.engines.causal_lm.models import _file_digest


def test_same_bytes_at_two_paths_share_a_key(tmp_path):
    a = tmp_path / "a" / "m.gguf"
    b = tmp_path / "b" / "m.gguf"
    for f in (a, b):
        f.parent.mkdir()
        f.write_bytes(b"GGUF" + bytes(range(256)) * 4096)
    assert _file_digest(a) == _file_digest(b)
    b.write_bytes(b"GGUF" + bytes(range(256)) * 4095 + b"x")
    assert _file_digest(a) != _file_digest(b)
