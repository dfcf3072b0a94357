"""Per-key rate limits (serve/limits.py): the token bucket's arithmetic, the flag's syntax and the keys."""

from __future__ import annotations

import pytest

from infertune.errors import InfertuneError
from infertune.serve.limits import KeyLimits, TokenBucket, parse_rate, split_keys


def test_bucket_allows_one_seconds_burst_then_the_rate():
    b = TokenBucket(5.0, now=0.0)
    assert [b.take(0.0) for _ in range(5)] == [0.0] * 5
    assert b.take(0.0) == pytest.approx(0.2)  # empty: one request refills in 1/5 s
    assert b.take(0.2) == 0.0
    assert b.take(0.2) == pytest.approx(0.2)
    # over 10 s at exactly the rate, every request passes
    assert all(b.take(0.2 + 0.2 * i) == 0.0 for i in range(1, 50))


def test_a_slow_rate_still_admits_one_request():
    b = TokenBucket(0.5, now=0.0)  # 30/min
    assert b.take(0.0) == 0.0
    assert b.take(0.5) == pytest.approx(1.5)  # 0.25 refilled; 0.75 more at 0.5/s


def test_keys_have_their_own_buckets_and_retry_after_in_whole_seconds():
    lim = KeyLimits(2, 2.0, now=0.0)
    assert [lim.take(0, 0.0) for _ in range(3)] == [0, 0, 1]
    assert lim.take(1, 0.0) == 0  # the other key is unaffected


@pytest.mark.parametrize("text,per_s", [("20/s", 20.0), ("600/min", 10.0), ("5/m", 5 / 60), ("3600/h", 1.0),
                                        (" 2.5 / s ", 2.5)])
def test_rate_syntax(text, per_s):
    assert parse_rate(text) == pytest.approx(per_s)


@pytest.mark.parametrize("text", ["20", "0/s", "x/s", "5/day", "-1/s"])
def test_bad_rate_says_the_syntax(text):
    with pytest.raises(InfertuneError, match="N/s"):
        parse_rate(text)


def test_keys_from_repeats_and_commas():
    assert split_keys(None) == []
    assert split_keys("a") == ["a"]
    assert split_keys(["a,b", " c ", "a"]) == ["a", "b", "c"]
