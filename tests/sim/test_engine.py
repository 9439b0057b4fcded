import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ConfigError, ValidationError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.formats import from_text
from primuspp.schedule.validation import validate
from primuspp.sim import simulate
from tests.oracles.formulas import step_time

EQUAL = CostModel(forward=1000, backward=1000, wgrad=1000)


def test_acceptance_figures_p8_m32():
    r = simulate(build_schedule("1f1b", 8, None, 32), EQUAL).metrics
    assert r.step_time == 117000 and round(r.bubble_rate, 4) == 0.1795
    assert [x.peak_memory for x in r.per_rank] == [8 - rank for rank in range(8)]
    assert simulate(build_schedule("zero-bubble", 8, None, 32), EQUAL).metrics.step_time == 103000
    inter = simulate(build_schedule("1f1b-interleaved", 8, 2, 32), EQUAL).metrics
    assert inter.step_time <= 106500 and inter.peak_memory == 11.5


@pytest.mark.parametrize(
    "algo,vpp",
    [("1f1b", 1), ("gpipe", 1), ("1f1b-interleaved", 2), ("1f1b-interleaved", 4), ("zero-bubble", 1)],
)
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 32), (6, 12)])
@pytest.mark.parametrize("f,b,w", [(1000, 1000, 1000), (1.0, 2.0, 1.0), (3, 4, 2)])
def test_closed_forms_agree(algo, vpp, p, m, f, b, w):
    expected = step_time(algo, p, vpp, m, f, b, w)
    got = simulate(build_schedule(algo, p, vpp, m), CostModel(f, b, w)).metrics.step_time
    assert got == pytest.approx(expected)


def test_comm_latency_adds_per_hop():
    one = simulate(build_schedule("1f1b", 2, None, 1), CostModel(1, 1, 1, comm=0.5)).metrics
    assert one.step_time == pytest.approx(1 + 0.5 + 1 + 2 + 0.5 + 2)  # F, hop, F, BW, hop, BW
    base = simulate(build_schedule("1f1b", 4, None, 8), CostModel(1, 1, 1)).metrics.step_time
    slow = simulate(build_schedule("1f1b", 4, None, 8), CostModel(1, 1, 1, comm=0.5)).metrics.step_time
    assert slow >= base + 2 * 3 * 0.5


def test_per_stage_costs_and_tiny_values():
    costs = CostModel(forward=(0.1, 0.2, 0.1, 0.1), backward=0.2, wgrad=0.1)
    r = simulate(build_schedule("zero-bubble", 4, None, 8), costs)
    busy = [x.busy for x in r.metrics.per_rank]
    assert busy[1] == pytest.approx(8 * 0.5) and busy[0] == pytest.approx(8 * 0.4)
    assert all(iv.end > iv.start for rt in r.timeline.ranks for iv in rt.intervals)


def test_b_free_fraction_lowers_zero_bubble_peak():
    table = build_schedule("zero-bubble", 4, None, 8)
    full = simulate(table, CostModel(b_free_fraction=0.0)).metrics.per_rank
    half = simulate(table, CostModel(b_free_fraction=0.5)).metrics.per_rank
    assert full[3].peak_memory == 4 and half[3].peak_memory < 4


def test_b_free_fraction_per_stage_and_negative():
    """Per-stage fractions act on their own stages only; a negative one makes B leave more than F saved."""
    table = build_schedule("zero-bubble", 2, None, 1)  # F0.0 F0.1 B0.1 W0.1 B0.0 W0.0 on two ranks
    r = simulate(table, CostModel(activation=(4.0, 2.0), b_free_fraction=(-0.5, 0.5))).timeline.ranks
    assert [level for _, level in r[0].memory] == [0.0, 4.0, 6.0, 0.0]  # B adds half of F's 4, W frees 6
    assert [level for _, level in r[1].memory] == [0.0, 2.0, 1.0, 0.0]
    per_rank = CostModel(b_free_fraction=(0.0, 1.0)).for_placement(build_schedule("zbv", 2, 2, 4).placement)
    assert per_rank.b_free == (0.0, 1.0, 1.0, 0.0)  # stages 0, 3 on rank 0; 1, 2 on rank 1
    assert per_rank.b_free_fraction == 0.5  # the average (zb-optimal plans with it; the others per stage)
    with pytest.raises(ConfigError, match=r"costs\.b_free_fraction: must be <= 1"):
        CostModel(b_free_fraction=1.5)


def test_offload_and_fb_memory():
    text = """# primuspp schedule algorithm=custom placement=linear pp=1 vpp=1 micro_batches=2
F0.0 OFFLOAD0.0 F1.0+BW0.0 BW1.0
"""
    with pytest.raises(ValidationError, match=r"BW0\.0 \(position 2\) runs while 0\.0 is offloaded"):
        validate(from_text(text))
    text = """# primuspp schedule algorithm=custom placement=linear pp=1 vpp=1 micro_batches=3
F0.0 OFFLOAD0.0 F1.0 OFFLOAD1.0 F2.0 BW2.0 RELOAD1.0 BW1.0 RELOAD0.0 BW0.0
"""
    table = from_text(text)
    validate(table)
    r = simulate(table, CostModel(forward=1, backward=1, wgrad=1))
    assert r.metrics.peak_memory == 1  # without the offloads: 3
    fb = from_text("""# primuspp schedule algorithm=custom placement=linear pp=1 vpp=1 micro_batches=2
F0.0 F1.0+BW0.0 BW1.0
""")
    validate(fb)
    r = simulate(fb, CostModel(forward=1, backward=1, wgrad=1, fb_overlap=0.5))
    assert r.metrics.step_time == pytest.approx(1 + 0.5 * 3 + 2)
    assert r.metrics.peak_memory == 2
