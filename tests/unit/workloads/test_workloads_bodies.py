import json

from infertune.workloads.bodies import from_file, synthetic, to_file


def test_to_file_reads_back_the_same_requests_without_the_model(tmp_path):
    req = synthetic("prompt=uniform(3,9),output=5,n=6", "chat", "m", False, seed=2)
    back = from_file(to_file(req, tmp_path / "sub" / "w.jsonl"), "chat", None, False)
    assert [json.loads(b) for b in back.bodies] == [{k: v for k, v in json.loads(b).items() if k != "model"}
                                                     for b in req.bodies]
    assert "model" not in (tmp_path / "sub" / "w.jsonl").read_text()
