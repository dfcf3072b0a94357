import random

import pytest

from infertune.batching import padded_tokens, plan_batches
from infertune.config import Batching


@pytest.mark.parametrize("budget", [64, 512, 1024, 4096])
def test_token_budget_batches_cover_all_items_once_and_respect_budget(budget):
    rng = random.Random(budget)
    lengths = [rng.randint(1, 300) for _ in range(500)]
    batches = plan_batches(lengths, Batching(kind="tokens", size=budget, max_items=64))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert len(b) <= 64
        assert len(b) == 1 or len(b) * longest <= budget


def test_token_batches_are_length_sorted_so_padding_is_small():
    rng = random.Random(0)
    lengths = [rng.randint(1, 256) for _ in range(1000)]
    sorted_pad = padded_tokens(lengths, plan_batches(lengths, Batching(kind="tokens", size=2048)))
    fixed_pad = padded_tokens(lengths, plan_batches(lengths, Batching(kind="fixed", size=16)))
    assert sorted_pad < 0.7 * fixed_pad
    assert sorted_pad >= sum(lengths)


@pytest.mark.parametrize("cap", [1.0, 1.1, 1.25, 2.0])
def test_padding_cap_closes_batches_before_padded_over_real_passes_it(cap):
    rng = random.Random(7)
    lengths = [8 * rng.randint(1, 32) for _ in range(300)]  # multiples of 8, as the server collates
    batches = plan_batches(lengths, Batching(kind="tokens", size=4096, max_items=64), max_padding=cap)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        real = sum(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= cap * real
    uncapped = plan_batches(lengths, Batching(kind="tokens", size=4096, max_items=64))
    assert padded_tokens(lengths, batches) <= padded_tokens(lengths, uncapped)
    if cap == 1.0:  # no padding at all: only equal lengths share a batch
        assert all(len({lengths[i] for i in b}) == 1 for b in batches)


def test_padding_cap_keeps_a_long_item_from_padding_short_ones():
    # one 256-token item and fifteen 40-token items fit one 4096 budget (16 x 256) at padding 5.5x
    lengths = [256] + [40] * 15
    assert len(plan_batches(lengths, Batching(kind="tokens", size=4096))) == 1
    capped = plan_batches(lengths, Batching(kind="tokens", size=4096), max_padding=1.25)
    assert capped == [[0], list(range(1, 16))]


def test_fixed_batches_keep_order():
    batches = plan_batches([5] * 10, Batching(kind="fixed", size=4))
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_candidate_ids_are_stable_and_hashable():
    from infertune.config import Candidate

    c = Candidate(backend="torch-compile", precision="bf16", batching=Batching(kind="tokens", size=8192))
    assert c.id == "torch-compile/bf16/tokens-8192"
    assert hash(c) == hash(Candidate(backend="torch-compile", precision="bf16", batching=Batching(size=8192)))


def _cost(plan, lengths, a, b):
    return sum(a + b * len(x) * max(lengths[i] for i in x) for x in plan)


def test_plan_by_cost_covers_every_item_once_and_respects_budget_and_cap():
    import random

    from infertune.batching import plan_by_cost
    from infertune.config import Batching

    rng = random.Random(0)
    for _ in range(50):
        lengths = [8 * rng.randint(1, 32) for _ in range(rng.randint(1, 300))]
        policy = Batching(kind="tokens", size=rng.choice([512, 4096, 65536]), max_items=rng.choice([4, 64, 8192]))
        plan = plan_by_cost(lengths, policy, rng.choice([0.0, 1e-3, 1e-2]), rng.choice([1e-9, 1e-7, 1e-5]))
        assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
        for b in plan:
            assert len(b) <= policy.max_items
            assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= policy.size


def test_plan_by_cost_never_predicts_slower_than_budget_packing():
    import random

    from infertune.batching import plan_batches, plan_by_cost
    from infertune.config import Batching

    rng = random.Random(1)
    policy = Batching(kind="tokens", size=65536, max_items=8192)
    for _ in range(50):
        lengths = [8 * rng.randint(1, 32) for _ in range(rng.randint(2, 300))]
        a, b = rng.choice([1e-4, 3e-3]), rng.choice([1e-8, 1e-6])
        assert _cost(plan_by_cost(lengths, policy, a, b), lengths, a, b) <= \
            _cost(plan_batches(lengths, policy), lengths, a, b) * (1 + 1e-9)


def test_plan_by_cost_splits_only_when_padding_costs_more_than_a_batch():
    from infertune.batching import plan_by_cost
    from infertune.config import Batching

    lengths = [256] * 3 + [32] * 120
    policy = Batching(kind="tokens", size=1 << 20, max_items=8192)
    # padding 120 rows from 32 to 256 tokens = 26,880 extra tokens: worth a batch at 1 us/token, not at 1 ns
    assert [len(b) for b in plan_by_cost(lengths, policy, 3e-3, 1e-6)] == [3, 120]
    assert [len(b) for b in plan_by_cost(lengths, policy, 3e-3, 1e-9)] == [123]


def test_fit_line_recovers_a_line_despite_an_outlier():
    from infertune.batching import fit_line

    pairs = [(x, 0.002 + 1e-7 * x) for x in (100, 1000, 5000, 20000, 60000)] + [(3000, 0.5)]
    a, b = fit_line(pairs)
    assert abs(a - 0.002) < 1e-4 and abs(b - 1e-7) < 1e-9


def test_plan_by_cost_costs_the_rows_an_engine_really_runs():
    """With rows rounded up (CUDA graph buckets), the plan is still a partition of every item, and under that
    cost model it is no worse than the plan made without knowing the rounding."""
    import random

    from infertune.batching import plan_by_cost
    from infertune.config import Batching
    from infertune.engines.cuda_graphs import graph_rows

    rng = random.Random(3)
    policy = Batching(kind="tokens", size=1 << 20, max_items=1 << 20)
    a, b = 2e-3, 5e-6
    better = 0
    for _ in range(20):
        lengths = [-(-rng.randint(1, 400) // 8) * 8 for _ in range(rng.randint(5, 70))]

        def cost(plan, lengths=lengths):
            return sum(a + b * max(lengths[i] for i in p) * graph_rows(len(p)) for p in plan)

        aware = plan_by_cost(lengths, policy, a, b, rows=graph_rows)
        blind = plan_by_cost(lengths, policy, a, b)
        assert sorted(i for p in aware for i in p) == list(range(len(lengths)))
        assert cost(aware) <= cost(blind) + 1e-12
        better += cost(aware) < cost(blind) - 1e-12
    assert better >= 3  # knowing the rounding changes the plan, for the better
