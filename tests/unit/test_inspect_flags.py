"""inspect prints both FLOP figures; a gap over 10% between them is flagged (DeepSeek-V2-Lite:
prefill 1.82 vs 4.52, decode 16.73 vs 4.94 GFLOP/token), and agreement stays quiet. No torch needed."""

from infertune.inspect import flop_notes


def test_deepseek_v2_lite_gap_is_flagged_per_phase_with_the_moe_reason():
    notes = flop_notes({"prefill": 1.82e9, "decode": 16.73e9}, {"prefill": 4.52e9, "decode": 4.94e9}, 64, 6)
    assert len(notes) == 2
    assert notes[0].startswith("prefill: FLOP counter 1.82 vs analytic 4.52 GFLOP/token (-60%)")
    assert notes[1].startswith("decode: FLOP counter 16.73 vs analytic 4.94 GFLOP/token (+239%)")
    assert all("6 of 64 experts" in n for n in notes)


def test_agreement_within_ten_percent_is_quiet():
    assert flop_notes({"prefill": 1.05e9, "decode": 0.95e9}, {"prefill": 1.0e9, "decode": 1.0e9}) == []
    assert len(flop_notes({"prefill": 1.2e9}, {"prefill": 1.0e9})) == 1  # dense models are flagged too
