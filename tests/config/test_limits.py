"""Limits on what a config, a table or a run may ask for: bounded YAML, safe run names, node estimates."""

from __future__ import annotations

import os

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.config.loader import Overrides, load_config, parse_config, run_specs
from primuspp.config.schema import run_name_problem
from primuspp.errors import ConfigError
from primuspp.inputs import MAX_NESTING, parse_json, parse_yaml
from primuspp.schedule.costs import CostModel
from primuspp.schedule.limits import DEFAULT_MAX_NODES, estimate_nodes

VPP = {"1f1b-interleaved": 3}


@pytest.mark.parametrize("name", sorted(set(ALGORITHMS) - {"zb-optimal"}))
def test_estimate_bounds_the_real_node_count(name):
    """The estimate is an upper bound, and a close one (within 1.6x), so --max-nodes means what it says."""
    algo = ALGORITHMS[name]
    vpp = VPP.get(name, algo.vpp_default)
    for pp, m in ((4, 8), (8, 32), (6, 24)):
        actual = build_schedule(name, pp, vpp, m).num_nodes()
        estimate = estimate_nodes(algo.placement, pp, vpp, m)
        assert actual <= estimate <= 1.6 * actual, (pp, m, actual, estimate)


def test_default_limit_refuses_the_issue_case_and_admits_large_real_runs():
    assert estimate_nodes("linear", 4096, 1, 65536) > 100 * DEFAULT_MAX_NODES
    assert estimate_nodes("loop", 64, 4, 1024) < DEFAULT_MAX_NODES  # a big interleaved run still fits


def test_run_specs_refuse_over_max_nodes_before_building():
    cfg = load_config(None)
    with pytest.raises(ConfigError, match=r"needs an estimated 1,664 nodes .* over --max-nodes=1,000") as err:
        run_specs(cfg, Overrides(algorithms=("1f1b",), max_nodes=1000))
    assert err.value.key == "max-nodes"
    with pytest.raises(ConfigError, match=r"the 12 runs together need an estimated"):
        run_specs(cfg, Overrides(pp=64, micro_batches=4096))
    (spec,) = run_specs(cfg, Overrides(algorithms=("1f1b",), max_nodes=2000))
    assert spec.max_nodes == 2000


def test_build_schedule_checks_bounds_and_nodes():
    with pytest.raises(ConfigError, match="over --max-nodes=10"):
        build_schedule("1f1b", 4, None, 8, max_nodes=10)
    with pytest.raises(Exception, match=r"pp=100000: expected an integer from 1 to 65,536"):
        build_schedule("1f1b", 100_000, None, 8)


@pytest.mark.parametrize(
    "name,ok",
    [
        ("1f1b", True),
        ("zb-v_2.run+x", True),
        ("..", False),
        (".", False),
        ("", False),
        ("../victim", False),
        ("/abs", False),
        ("a/b", False),
        ("a b", False),
        ("x" * 129, False),
        ("naïve", False),
    ],
)
def test_run_names(name, ok):
    assert (run_name_problem(name) is None) is ok


def test_file_table_names_are_made_safe(tmp_path):
    from primuspp.schedule.formats import to_json

    path = tmp_path / "my table (v2).json"
    path.write_text(to_json(build_schedule("1f1b", 2, None, 2)))
    (spec,) = run_specs(load_config(None), Overrides(algorithms=(f"file:{path}",)))
    assert spec.name == "my_table__v2_" and run_name_problem(spec.name) is None


def test_primus_keys_are_named_as_written():
    text = "schedulers: [{name: ok, class: x.Schedule1F1B, pp_size: 4, vpp_size: 0, micro_batches: 8}]\n"
    with pytest.raises(ConfigError, match=r"schedulers\[0\]\.vpp_size=0: expected an integer from 1") as err:
        parse_config(text, "p.yaml")
    assert err.value.key == "schedulers[0].vpp_size"


def test_yaml_limits():
    assert parse_yaml("a: &x {b: 1}\nc: *x\n", "c.yaml") == {"a": {"b": 1}, "c": {"b": 1}}
    deep = "a:\n" + "".join("  " * i + "  b:\n" for i in range(MAX_NESTING + 5))
    with pytest.raises(ConfigError, match="nested deeper than 64 levels"):
        parse_yaml(deep, "c.yaml")
    with pytest.raises(ConfigError, match="alias contains itself"):
        parse_yaml("a: &a [*a]\n", "c.yaml")
    with pytest.raises(ConfigError, match="a value cannot be read"):
        parse_yaml("pp: " + "9" * 5000 + "\n", "c.yaml")
    with pytest.raises(ConfigError, match="malformed YAML"):
        parse_yaml("a: [1\n", "c.yaml")


def test_json_names_the_key_of_a_non_finite_number():
    with pytest.raises(ConfigError, match=r"t\.json: a\[1\]\.b=inf: expected a finite number"):
        parse_json('{"a": [0, {"b": 1e999}]}', "t.json")
    with pytest.raises(ConfigError, match=r"x=nan"):
        parse_json('{"x": NaN}', "t.json")


def test_cost_model_refuses_non_finite_values():
    for value in (float("inf"), float("nan"), 1e300):
        with pytest.raises(ConfigError, match=r"costs\.forward: must be a finite number"):
            CostModel(forward=value)


def test_fifo_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(fifo)
