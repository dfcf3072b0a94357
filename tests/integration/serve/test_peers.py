"""infertune.tasks.embedding.peers.compare over real sockets: two real servers (fake-backend artifacts:
deterministic, no torch) measured side by side in rotating rounds; a server that is not there is recorded, not fatal."""

from __future__ import annotations

from infertune.tasks.embedding.peers import compare, table


def test_compare_two_servers_side_by_side(fake_server):
    fast = fake_server(us_per_token=50)
    # --batch-tokens 256 (4 texts of 9 tokens at most are in flight): the start times one-text batches, not batches
    # of up to 4,000 padded tokens (8 s of this slow fake's forward)
    slow = fake_server("--batch-tokens", "256", us_per_token=2000)
    texts = [" ".join("abcdefgh"[: 1 + i % 8]) for i in range(64)]
    seen: list[str] = []
    got = compare({"fast": fast.url, "slow": slow.url, "gone": "http://127.0.0.1:9"}, texts, concurrency=4,
                  duration=0.6, warmup=0.2, rounds=2, progress=seen.append)  # 40x apart: short points tell
    print(table(got))
    by = {r.name: r for r in got}
    assert [len(by[n].rounds) for n in ("fast", "slow")] == [2, 2]
    # rotation: round 1 measures fast first, round 2 slow first
    order = [s.split(" ")[2].rstrip(":") for s in seen if s.startswith("round")]
    assert order[:2] == ["fast", "slow"] and order[2:4] == ["slow", "fast"], seen
    assert by["fast"].items_per_s > by["slow"].items_per_s > 0
    assert by["fast"].items_per_s_min <= by["fast"].items_per_s <= by["fast"].items_per_s_max
    # the same model behind both: the same answers
    assert by["fast"].cosine_vs_first_min == 1.0 and by["slow"].cosine_vs_first_min >= 0.999999
    assert by["gone"].error and not by["gone"].rounds
    assert "failed" in table(got).splitlines()[-1]
