"""The pp_data writer (`pp_data.rank_record`, from columns) against the readable reference
(tests/oracles/pp_data_reference.py, from Interval objects): the same record for every registered
algorithm, for ranks held as columns and as Interval objects, for several iterations and an offloading
table (a memory curve held as a list)."""

import copy
import json

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule, refusal
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.trace.columns import IntervalColumns
from primuspp.trace.pp_data import rank_record, read_pp_data, write_pp_data
from primuspp.trace.timeline import Interval, RankTimeline
from tests.oracles.pp_data_reference import rank_record as reference

SIZES = [(2, 4), (4, 8), (4, 12)]
COSTS = [
    CostModel(),
    CostModel(1.1, 2.3, 0.7, 0.05),
    CostModel(3, 2, 1, 1, activation=1.5, b_free_fraction=0.3),
]


def _results(algorithm):
    for (p, m), costs in zip(SIZES, COSTS, strict=True):
        if refusal(algorithm, p, None, m, {}):
            continue
        try:
            table = build_schedule(algorithm, p, None, m, costs)
        except ScheduleError as err:  # zb-optimal without highspy
            pytest.skip(str(err))
        yield simulate(table, costs)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_rank_is_written_as_the_reference_writes_it(algorithm, tmp_path):
    for i, result in enumerate(_results(algorithm)):
        tl = result.timeline
        objects = copy.copy(tl)
        objects.ranks = [
            RankTimeline(r.rank, list(r.intervals), list(r.memory), r.peak_memory) for r in tl.ranks
        ]
        for name, timeline in (("columns", tl), ("objects", objects)):  # with and without a vocabulary
            (tmp_path / f"{name}{i}").mkdir()
            write_pp_data([timeline], tmp_path / f"{name}{i}")
            for rt in tl.ranks:
                text = (tmp_path / f"{name}{i}" / f"pp_rank_{rt.rank}.json").read_text()
                assert text == json.dumps({"0": reference(rt)}) + "\n"
        for rt in tl.ranks:
            assert isinstance(rt.intervals, IntervalColumns)  # a simulated rank: its columns are read
            want = json.dumps(reference(rt))
            assert json.dumps(rank_record(rt)) == want
            # as read back from a dump: Interval objects, a memory curve as a list
            objects = RankTimeline(rt.rank, list(rt.intervals), list(rt.memory), rt.peak_memory)
            assert json.dumps(rank_record(objects)) == want


def test_offloading_schedule_and_several_iterations(tmp_path):
    costs = CostModel(1.5, 1, 0.25, 0.1)
    result = simulate(build_schedule("zbv", 2, 2, 4, costs, offload=True), costs)
    second = simulate(build_schedule("zbv", 2, 2, 4, costs, offload=True), costs).timeline
    second.iteration = "1"
    write_pp_data([result.timeline, second], tmp_path)
    for rt in result.timeline.ranks:
        text = (tmp_path / f"pp_rank_{rt.rank}.json").read_text()
        assert text == json.dumps({"0": reference(rt), "1": reference(second.ranks[rt.rank])}) + "\n"
    assert [tl.iteration for tl in read_pp_data(tmp_path)] == ["0", "1"]


def test_fb_intervals_and_their_backward_parts_from_objects():
    ivs = [
        Interval("F", 0, 0, 0, 0.0, 1.0),
        Interval("FB", 1, 0, 0, 1.0, 3.0, ("B", 0, 1, 0)),
        Interval("FB", 2, 0, 0, 3.0, 5.0),
        Interval("W", 0, 1, 0, 5.0, 6.5),
    ]
    rt = RankTimeline(0, ivs, [(0.0, 0.0), (1.0, 1.0)], 1.0)
    assert rank_record(rt) == reference(rt)
    assert rank_record(rt)["fb_backward"] == [["B", 0, 1, 0], []]
    assert rank_record(RankTimeline(0, [])) == reference(RankTimeline(0, []))
