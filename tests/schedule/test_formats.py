import csv
import dataclasses
import io
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import ALGORITHMS, build_schedule, load_table, refusal
from primuspp.errors import ScheduleError, ValidationError
from primuspp.schedule.formats import (
    from_json,
    from_text,
    to_csv,
    to_json,
    to_json_dict,
    to_json_text,
    to_text,
)
from primuspp.schedule.nodes import format_node


@pytest.mark.parametrize(
    "algo,vpp", [("1f1b", None), ("zero-bubble", None), ("1f1b-interleaved", 3), ("gpipe", None)]
)
def test_json_and_text_round_trip_exactly(algo, vpp):
    table = build_schedule(algo, 4, vpp, 7)
    assert from_json(to_json(table)) == table
    again = from_text(to_text(table))
    assert again.ranks == table.ranks and again.placement == table.placement


def test_json_rejects_foreign_documents():
    with pytest.raises(ValidationError, match="not a primuspp schedule"):
        from_json('{"ranks": []}', "x.json")
    with pytest.raises(ValidationError, match="invalid JSON"):
        from_json("{", "x.json")


def test_csv_uses_torch_action_names():
    table = build_schedule("zero-bubble", 2, None, 2)
    rows = list(csv.reader(io.StringIO(to_csv(table))))
    assert rows[0] == ["0F0", "0F1", "0I0", "0W0", "0I1", "0W1"]
    rows = list(csv.reader(io.StringIO(to_csv(build_schedule("1f1b", 2, None, 2)))))
    assert rows[0] == ["0F0", "0F1", "0B0", "0B1"]


@pytest.mark.parametrize("algo,vpp", [("zero-bubble", None), ("1f1b-interleaved", 2)])
def test_csv_loads_in_torch_pipelining(tmp_path, algo, vpp):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    table = build_schedule(algo, 4, vpp, 8)
    path = tmp_path / "table.csv"
    path.write_text(to_csv(table))
    # _load_csv on a schedule object built without stages: it parses every action and infers the
    # stage-to-rank mapping, raising on anything it does not accept.
    sched = object.__new__(schedules.PipelineScheduleMulti)
    sched.pipeline_order = {}
    sched._num_stages = table.num_stages
    sched.pp_group_size = table.pp
    sched.rank = 0
    sched._n_microbatches = table.num_microbatches
    sched.stage_index_to_group_rank = {}
    sched._stages = []  # no local stages: only the parsing and torch's _validate_schedule run
    schedules.PipelineScheduleMulti._load_csv(sched, str(path))
    assert len(sched.pipeline_order) == table.pp
    assert sched.stage_index_to_group_rank == {
        s: table.placement.stage_rank[s] for s in range(table.num_stages)
    }
    computed = sum(len(v) for v in sched.pipeline_order.values())
    assert computed == sum(1 for _ in table.compute_nodes())


# -- compute-only tables (torch's compute_only CSV, sail-sg and Primus exports): read, lowered, validated --

ALGOS = sorted(a for a in ALGORITHMS if a != "zb-optimal")  # the MILP: seconds per table


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(ALGOS), st.integers(1, 5), st.integers(1, 8), st.sampled_from(["csv", "text", "json"]))
def test_a_compute_only_order_loads_as_the_table_it_came_from(tmp_path_factory, algo, p, m, fmt):
    assume(not refusal(algo, p, None, m, {}))
    table = build_schedule(algo, p, None, m)
    assume(not any(n.kind.is_memory for nodes in table.ranks for n in nodes))  # CSV holds compute only
    order = table.compute_order()
    if fmt == "csv":
        text = to_csv(table)
    elif fmt == "text":
        text = to_text(dataclasses.replace(table, ranks=order))
    else:
        text = json.dumps(to_json_dict(dataclasses.replace(table, ranks=order)))
    path = tmp_path_factory.mktemp("t") / f"t.{fmt}"
    path.write_text(text)
    loaded = load_table(path)
    assert loaded.num_microbatches == m
    # at p=1 a V and a loop of two chunks are one placement: a CSV reads as the first kind that fits
    assert loaded.placement == table.placement or p == 1
    assert tuple(map(tuple, loaded.ranks)) == tuple(map(tuple, table.ranks))  # the same p2p nodes inserted


def test_a_hand_written_compute_only_text(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text(
        "# primuspp schedule algorithm=custom placement=linear pp=2 vpp=1 micro_batches=1\n"
        "F0.0 B0.0 W0.0\nF0.1 B0.1 W0.1\n"
    )
    assert [format_node(n) for n in load_table(path).ranks[0]] == [
        "F0.0", "SEND_F0.0>1", "RECV_B0.0<1", "B0.0", "W0.0"
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["interleaved", "loop", "looped", "1f1b-interleaved"])
def test_the_interleaved_placement_under_the_names_users_type(tmp_path, name):
    order = build_schedule("1f1b-interleaved", 2, 2, 4).compute_order()
    path = tmp_path / "t.txt"
    path.write_text(
        f"# primuspp schedule placement={name} pp=2 vpp=2 micro_batches=4\n"
        + "\n".join(" ".join(map(format_node, nodes)) for nodes in order)
    )
    assert load_table(path).placement.kind == "loop"


@pytest.mark.parametrize(
    ("csv_text", "message"),
    [
        ("0F0,0SEND_F0\n1F0\n", "'0SEND_F0': expected a compute action"),
        ("0F0,0B0\n2F0,2B0\n", "match no placement"),
        ("0F" + "9" * 5000 + "\n", "expected a compute action"),
        ("0F999999999\n", "micro_batches (largest microbatch + 1)=1000000000: expected an integer"),
        ("", "no rows"),
        ("0B0,0F0\n", "dependency cycle: rank 0 at BW0.0 waits for F0.0"),
        ("0F0,0B0\n1B0\n", "waits for F0.1 on rank 1"),
    ],
)
def test_bad_csv_tables_are_refused_in_one_line(tmp_path, csv_text, message):
    path = tmp_path / "t.csv"
    path.write_text(csv_text)
    with pytest.raises((ValidationError, ScheduleError)) as err:
        load_table(path)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("algorithm", "params"), [("zbv", {"offload": True}), ("dualpipe-v", {})])
def test_composite_and_memory_nodes_round_trip(algorithm, params):
    table = build_schedule(algorithm, 4, None, 8, **params)
    assert from_json(to_json_text(table)).ranks == table.ranks


def test_a_hand_written_json_names_its_placement_by_kind(tmp_path):
    order = build_schedule("1f1b-interleaved", 2, 2, 4).compute_order()
    doc = {
        "format": "primuspp.schedule/1",
        "micro_batches": 4,
        "placement": {"kind": "interleaved", "pp": 2, "vpp": 2},
        "ranks": [[format_node(n) for n in nodes] for nodes in order],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    table = load_table(path)
    assert table.placement == build_schedule("1f1b-interleaved", 2, 2, 4).placement
    assert table.ranks == build_schedule("1f1b-interleaved", 2, 2, 4).ranks


@pytest.mark.parametrize(
    ("algorithm", "params"), [("zbv", {"offload": True}), ("dualpipe-v", {}), ("1f1b", {})]
)
def test_the_json_text_written_a_rank_at_a_time_is_json_dumps(algorithm, params):
    """Result directories write schedule.json piece by piece (`to_json_pieces`): the same text."""
    from primuspp.schedule.formats import to_json_pieces

    table = build_schedule(algorithm, 4, None, 8, **params)
    assert "".join(to_json_pieces(table)) == json.dumps(to_json_dict(table))
    objects = dataclasses.replace(table, ranks=tuple(table.ranks))  # Node objects: format_node's texts
    assert "".join(to_json_pieces(objects)) == json.dumps(to_json_dict(objects))
    assert to_json_text(objects) == to_json_text(table) and to_text(objects) == to_text(table)
