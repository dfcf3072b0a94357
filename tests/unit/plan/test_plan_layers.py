"""plan/layers.py: the per-layer count inspect falls back to adds up to plan's whole-model count, so a
table and its headline never disagree, and MoE layers read the experts their tokens reach. No torch."""

from pathlib import Path

import pytest

from infertune.plan.arch import arch_from_config, load_config
from infertune.plan.layers import (
    experts_reached,
    flops_by_layer,
    linear_shapes,
    params_by_part,
    step_bytes,
    weight_bytes_by_layer,
)

CONFIGS = Path(__file__).parents[1] / "configs"


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-0.6b", "deepseek-v2-lite"])
@pytest.mark.parametrize("phase, context", [("prefill", 512), ("decode", 513)])
def test_layers_sum_to_the_whole_model(name, phase, context):
    a = arch_from_config(load_config(CONFIGS / f"{name}.json"))
    per = flops_by_layer(a, context, phase)
    assert len([k for k in per if k.startswith("layer")]) == a.layers
    assert sum(per.values()) == pytest.approx(a.flops_per_token(context, phase)["total"], rel=1e-12)
    assert sum(params_by_part(a).values()) == a.params()


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-0.6b", "deepseek-v2-lite"])
def test_linear_shapes_hold_every_linear_weight_a_token_runs(name):
    """The GEMM ladder times these shapes: K x N x count over them is the Linear weights a token multiplies through
    (dense, GQA, MoE with its router, MLA)."""
    a = arch_from_config(load_config(CONFIGS / f"{name}.json"))
    shapes = linear_shapes(a)
    assert sum(k * n * c for (k, n), c in shapes.items()) == a.linear_params(active=True)
    assert all(k > 0 and n > 0 and c > 0 for (k, n), c in shapes.items())


def test_linear_shapes_of_qwen3_06b_are_the_h100_ladders():
    a = arch_from_config(load_config(CONFIGS / "qwen3-0.6b.json"))
    assert linear_shapes(a) == {(1024, 2048): 28, (1024, 1024): 56, (2048, 1024): 28, (1024, 3072): 56,
                                (3072, 1024): 28}


def test_moe_layers_read_the_experts_their_tokens_reach():
    a = arch_from_config(load_config(CONFIGS / "deepseek-v2-lite.json"))
    assert experts_reached(a, 1) == pytest.approx(6)  # a decode step: exactly the 6 routed experts it picked
    assert experts_reached(a, 128) == pytest.approx(64, rel=1e-5)  # 1 - (58/64)^128: all of them
    w = weight_bytes_by_layer(a, 2)
    assert w["layer00"][1] == 0 and w["layer01"][1] == 64 * 3 * 2048 * 1408 * 2  # the dense first layer has none
    one = step_bytes(a, "layer01", w["layer01"], "decode", 1, 2, 0)
    assert one - w["layer01"][0] == pytest.approx(6 / 64 * w["layer01"][1], rel=0.01)  # + one token's activations
