"""The column writer of pp_data (trace/pp_data_fast.py) against the readable one (pp_data.rank_record +
json.dumps): the same bytes for every registered algorithm, and `json_numbers` equal to json.dumps."""

import json

import numpy as np
import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule, refusal
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.output import write_result
from primuspp.trace.pp_data import rank_record, write_pp_data
from primuspp.trace.pp_data_fast import Vocab, file_text, file_texts, json_numbers, rank_text

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
def test_every_rank_is_written_from_columns_as_the_reference_writes_it(algorithm):
    for result in _results(algorithm):
        shared = file_texts([result.timeline])  # through the timeline's shared vocabularies
        for rt in result.timeline.ranks:
            ref = json.dumps(rank_record(rt))
            fast = rank_text(rt)  # column by column
            assert fast is not None  # a simulated rank is held as columns: the fast path is taken
            assert fast == ref
            assert shared[rt.rank] == json.dumps({"0": rank_record(rt)})


@pytest.mark.parametrize("algorithm", ["zbv", "dualpipe-v", "1f1b-interleaved"])
def test_result_directories_are_byte_identical(algorithm, tmp_path):
    for i, result in enumerate(_results(algorithm)):
        fast, ref = (
            write_result(result, tmp_path / f"fast{i}"),
            write_result(result, tmp_path / f"ref{i}", fast=False),
        )
        names = sorted(p.name for p in ref.iterdir())
        assert names == sorted(p.name for p in fast.iterdir())
        for name in names:
            assert (fast / name).read_bytes() == (ref / name).read_bytes(), name


def test_offloading_schedule_and_several_iterations(tmp_path):
    table = build_schedule("zbv", 2, 2, 4, CostModel(1.5, 1, 0.25, 0.1), offload=True)
    result = simulate(table, CostModel(1.5, 1, 0.25, 0.1))
    timelines = [result.timeline]
    for rank in range(result.timeline.pp):
        assert file_text(timelines, rank) == json.dumps({"0": rank_record(result.timeline.ranks[rank])})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_pp_data(timelines, tmp_path / "a")
    write_pp_data(timelines, tmp_path / "b", fast=False)
    for path in (tmp_path / "b").iterdir():
        assert (tmp_path / "a" / path.name).read_bytes() == path.read_bytes()


def test_measured_ranks_take_the_readable_path():
    result = simulate(build_schedule("1f1b", 2, None, 2))
    rt = result.timeline.ranks[0]
    rt.intervals = list(rt.intervals)  # as read back from a dump: Interval objects, no columns
    assert rank_text(rt) is None


VALUES = [0.0, 1.0, 0.5, 1e-4, 1e-5, 0.1 + 0.2, 1 / 3, 2.0**53, 2.0**53 - 1, 1e16, 1e300, -2.5, 123456.789]


@pytest.mark.parametrize(
    "column",
    [
        np.array(VALUES),
        np.array(VALUES * 40),  # few distinct values: each one's repr once
        np.arange(1000) * 500.0,  # integral floats: their integers with ".0"
        -np.arange(1000) * 0.5,
        np.array([0.0, -0.0, 1.0] * 50),
        np.array([-0.0]),
        np.arange(-5, 300, dtype=np.int64),
        np.array([0, 1, 1, 0] * 100, dtype=np.int32),
        np.array([], dtype=np.float64),
        np.array([], dtype=np.int64),
        np.random.default_rng(0).normal(size=500) * 1e3,
    ],
)
def test_json_numbers_is_json_dumps(column):
    assert json_numbers(column) == json.dumps(column.tolist())


def test_vocab_writes_only_the_values_it_holds():
    vocab = Vocab.of([np.array([0.5, 1.0, 1.0, 2.5] * 10)])
    assert vocab is not None
    assert vocab.text(np.array([2.5, 0.5])) == "[2.5, 0.5]"
    assert vocab.text(np.array([], dtype=np.float64)) == "[]"
    assert vocab.text(np.array([0.75])) is None  # not among its values
    assert vocab.text(np.array([3.0])) is None
    assert vocab.text(np.array([1, 2])) is None  # another dtype
    assert Vocab.of([np.arange(100.0)]) is None  # every value distinct: no gain
    assert Vocab.of([np.array([0.0, -0.0] * 10)]) is None  # -0.0 reads "-0.0", equal to 0.0
    assert Vocab.of([np.array([np.nan] * 10)]) is None


@pytest.mark.parametrize("column", [np.array([1.0, np.nan]), np.array([np.inf] * 100), np.array(["a"])])
def test_json_numbers_leaves_what_it_cannot_write(column):
    assert json_numbers(column) is None
