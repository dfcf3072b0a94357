"""The SLO-driven token-budget search on a synthetic engine: latency = a + b * padded tokens, with a
neighbour's burst on some batches. The search must land near the budget whose largest batch meets the
target, whatever the starting point, and ignore the bursts."""

import random

from infertune.tasks.embedding import batch_search as bs


def engine(a_ms, b_ms_per_tok, burst_every=7):
    rng = random.Random(0)

    def run(budget, longest=256, n=24):
        pairs = []
        for i in range(n):
            padded = max(longest, budget) if i == 0 else rng.randint(budget // 2, budget)
            ms = a_ms + b_ms_per_tok * padded
            if i % burst_every == 3:
                ms *= 3  # a neighbour's burst
            pairs.append((padded, ms))
        speed = 1000 * sum(p for p, _ in pairs) / 40 / sum(m for _, m in pairs)
        return speed, max(m for _, m in pairs), pairs

    return run


def search(run, start, slo, device="cpu", longest=256):
    speed, p99, pairs = run(start, longest)
    points = [bs.Point(start, speed, p99)]
    for _ in range(bs.MAX_STEPS):
        nxt = bs.next_budget(points, pairs, longest, slo, device)
        if nxt is None:
            break
        speed, p99, more = run(nxt, longest)
        pairs += more
        points.append(bs.Point(nxt, speed, p99))
    return bs.choose(points, pairs, longest, slo)


def test_fit_ignores_bursts():
    _, _, pairs = engine(5.0, 0.1)(1024)
    a, b = bs.fit(pairs)
    assert abs(b - 0.1) < 0.01 and abs(a - 5.0) < 3


def test_search_lands_on_the_budget_that_meets_the_target_from_either_side():
    run = engine(5.0, 0.1)  # the target 80 ms of a 100 ms SLO is met up to 750 padded tokens
    for start in (128, 512, 4096):
        best, pred = search(run, start, 100.0)
        assert 500 <= best.tokens <= 768, (start, best.tokens)
        assert pred[best.tokens] <= 80.0


def test_when_one_long_item_misses_the_target_the_search_stops_at_it():
    run = engine(20.0, 0.5)  # a 256-token item alone takes 148 ms > 80 ms target
    best, pred = search(run, 1024, 100.0)
    assert best.tokens == 256 and pred[256] > 80.0


def test_gpu_budgets_grow_fast_and_stay_in_range():
    run = engine(2.0, 0.0005)
    best, _ = search(run, 16384, 100.0, "cuda")
    assert best.tokens >= 65536 and best.tokens <= bs.LIMITS["cuda"][1]


def overlapped(a_ms, b_ms_per_tok):
    """A GPU engine with two batches in flight: each batch's latency is its own time plus the one ahead of it,
    which the per-batch line does not see (it fits a constant that hides the wait)."""
    rng = random.Random(1)

    def run(budget, longest=1277, n=30):
        # what the overlapped pass records per batch: nearly flat in padded tokens
        pairs = [(rng.randint(budget // 2, budget), a_ms * 2) for _ in range(n)]
        p99 = 2 * (a_ms + b_ms_per_tok * max(budget, longest))  # measured: the biggest batch behind another
        speed = 1000 * budget / 40 / (a_ms + b_ms_per_tok * budget)
        return speed, p99, pairs

    return run


def test_on_a_gpu_a_budget_whose_measured_p99_misses_the_slo_is_not_kept():
    run = overlapped(10.0, 0.004)  # 16384 tokens: 75.5 ms alone, ~151 ms measured behind another batch
    speed, p99, pairs = run(16384)
    points = [bs.Point(16384, speed, p99)]
    best, _ = bs.choose(points, pairs, 1277, 100.0)
    assert best.tokens == 16384  # the line alone keeps it (the H200 case)
    for _ in range(bs.MAX_STEPS):
        nxt = bs.next_budget(points, pairs, 1277, 100.0, "cuda", trust_measured=True)
        if nxt is None:
            break
        speed, p99, more = run(nxt)
        pairs += more
        points.append(bs.Point(nxt, speed, p99))
    best, _ = bs.choose(points, pairs, 1277, 100.0, trust_measured=True)
    assert best.tokens < 16384 and best.p99_ms <= 100.0, points
