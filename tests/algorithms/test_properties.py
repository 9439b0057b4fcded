"""Every registered algorithm yields a valid table on every (p, v, m) it admits, or refuses in one line."""

from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.validation import validate


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(ALGORITHMS)),
    pp=st.integers(1, 8),
    vpp=st.integers(1, 4),
    data=st.data(),
)
def test_valid_or_refused(name, pp, vpp, data):
    m = data.draw(st.integers(1, 4 * pp), label="m")
    algo = ALGORITHMS[name]
    try:
        table = build_schedule(name, pp, vpp, m)
    except ScheduleError as err:
        message = str(err)
        assert "\n" not in message and message
        assert not algo.vpp_ok(vpp) or algo.refuse(pp, vpp, m, {}) is not None
        return
    assert algo.vpp_ok(vpp)
    validate(table)  # build_schedule validates; validating again keeps this test honest
    assert table.pp == pp and table.num_microbatches == m
    assert sum(1 for _ in table.compute_nodes()) >= m * table.num_stages


def test_exhaustive_small_grid():
    """The issue's grid: p in 2..8, v in 2..4 for interleaved, m in 1..4p."""
    for name, vpps in (("gpipe", [1]), ("1f1b", [1]), ("zero-bubble", [1]), ("1f1b-interleaved", [2, 3, 4])):
        for pp in range(2, 9):
            for vpp in vpps:
                for m in range(1, 4 * pp + 1):
                    build_schedule(name, pp, vpp, m)
