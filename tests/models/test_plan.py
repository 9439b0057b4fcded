"""`primuspp plan`: the sweep, its JSON schema, drop reasons, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from primuspp.commands.app import main
from primuspp.models import PRESETS
from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel
from primuspp.models.plan import NO_FIT, NOT_DIVISIBLE, REFUSED, candidates, evaluate

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
KEYS = {
    "algorithm", "tp", "pp", "vpp", "ep", "cp", "dp", "micro_batch_size", "global_batch_size", "layout",
    "step_time_ms", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "peak_memory_bytes", "fits", "per_rank",
}  # fmt: skip


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_json_schema_and_ranking(capsys):
    code, out, _ = run(
        capsys, "plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8", "--pp", "8", "--tp", "1",
        "--global-batch-size", "32", "--micro-batch-size", "1", "--json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["model"] == {"name": "llama2-7b", "parameters": 6738415616, "active_parameters": 6738415616}
    assert doc["configurations_evaluated"] == 9  # 7 algorithms, interleaved at vpp 2, 3, 4
    results = doc["results"]
    assert results and set(results[0]) >= KEYS
    assert all(r["fits"] and r["peak_memory_bytes"] <= r["hbm_bytes"] for r in results)
    _check_ranking(results)


def _check_ranking(results: list[dict]) -> None:
    """Competition ranks: a result ties with the first of its rank (the fastest left) when within TIE of
    its throughput, tied ones ordered by peak memory; the first of the next rank is slower than that."""
    from primuspp.models.plan import TIE

    def lead(r: dict) -> dict:
        return next(q for q in results if q["rank"] == r["rank"])

    for i, r in enumerate(results):
        assert r["rank"] == results.index(lead(r)) + 1
        assert r["tokens_per_s_per_gpu"] >= lead(r)["tokens_per_s_per_gpu"] * (1 - TIE)
        if r is not lead(r):
            assert r["tie"] and lead(r)["tie"]
            assert results[i - 1]["peak_memory_bytes"] <= r["peak_memory_bytes"]
        elif i:
            assert r["tokens_per_s_per_gpu"] < lead(results[i - 1])["tokens_per_s_per_gpu"] * (1 - TIE)


def test_pp1_is_one_configuration_and_ties_take_less_memory(capsys):
    # PP 1 has no pipeline schedule: it was ranked under every algorithm's name (dualpipe-v at 81 GB beside
    # 1f1b at 72 GB in the same time), and drawn as "dualpipe-v, pp1"
    args = ["plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8", "--micro-batch-size", "1"]
    args += ["--cp", "1", "--tp", "1", "--top", "100", "-a", "1f1b", "-a", "dualpipe-v", "-a", "zbv"]
    code, out, _ = run(capsys, *args, "--json")
    results = json.loads(out)["results"]
    pp1 = [r for r in results if r["pp"] == 1]
    assert code == 0 and len(pp1) == 1 and pp1[0]["algorithm"] == "none (pp1)" and pp1[0]["vpp"] == 1
    configs = [(r["algorithm"], r["tp"], r["cp"], r["pp"], r["vpp"], r["micro_batch_size"]) for r in results]
    assert len(configs) == len(set(configs))
    _check_ranking(results)
    assert any(r["tie"] for r in results)
    code, out, _ = run(capsys, *args, "--top", "3")
    assert code == 0 and "none (pp1)" in out and "dualpipe-v" not in out.split("none (pp1)")[0]
    assert "peak GiB / HBM" in out.replace("\n", "") or "peak GiB /" in out
    assert "GiB: weights" in out and "GB" not in out


def test_plan_table_and_drop_reasons(capsys):
    code, out, _ = run(
        capsys, "plan", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "16", "--tp", "3", "--tp", "8",
        "--pp", "2", "--global-batch-size", "16", "--micro-batch-size", "1", "-a", "1f1b", "-a", "dualpipe-v",
    )  # fmt: skip
    assert code == 0
    assert "configurations" in out and "dropped:" in out and NOT_DIVISIBLE in out


def test_evaluate_counts_every_reason():
    spec, hw = PRESETS["llama3-70b"], load_hardware("h100")
    base = Parallel(global_batch_size=16, seq_len=4096)
    items = candidates(spec, hw, 16, base, ["1f1b", "dualpipe-v"], [1, 3, 8], [2], None, None, [1], [1])
    result = evaluate(spec, hw, items)
    assert result.evaluated == len(items) == 6
    # tp 1: 70B does not fit on 2 stages; tp 3: does not divide; dualpipe-v needs m >= 2 pp with dp 1, m 16
    assert set(result.dropped) <= {NO_FIT, NOT_DIVISIBLE, REFUSED}
    assert result.dropped[NOT_DIVISIBLE] == 2
    assert result.dropped[NO_FIT] >= 2
    assert sum(result.dropped.values()) + len(result.fits) == 6


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--model", "llama3-7b"], "error: --model llama3-7b: unknown model (did you mean"),
        (["--model", str(CONFIGS / "missing.json")], "no such file"),
        (["--gpu", "a100"], "error: --gpu a100: unknown GPU profile"),
        (["--gpus", "0"], "error: --gpus 0: expected an integer from 1 to 1,048,576"),
        (["--gpus", "10000000"], "error: --gpus 10000000: expected an integer from 1 to 1,048,576"),
        (
            ["--seq-len", "100000000000"],
            "error: --seq-len 100000000000: expected an integer from 1 to 16,777,216",
        ),
        (["--micro-batch-size", "8192"], "--micro-batch-size 8192: expected an integer from 1 to 4,096 (16,"),
        (["--recompute", "half"], "error: --recompute half: expected one of none, selective, full"),
        (["-a", "nope"], "unknown algorithm 'nope'"),
    ],
)
def test_bad_input_one_line(capsys, args, match):
    base = {"--model": "llama2-7b", "--gpu": "mi300x", "--gpus": "8"}
    argv = ["plan"]
    for key, value in base.items():
        if key not in args:
            argv += [key, value]
    code, out, err = run(capsys, *argv, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and match in err


def test_unsupported_architecture(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["FalconForCausalLM"]}))
    code, _, err = run(capsys, "plan", "--model", str(path), "--gpu", "h100", "--gpus", "8")
    assert code == 2 and "FalconForCausalLM" in err and "unsupported architecture" in err


def test_planner_path_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys; import primuspp.models.plan, primuspp.models.hf, primuspp.commands.plan; "
        "bad = [m for m in ('torch', 'megatron') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_sweep_reuses_cost_free_tables():
    # cost-free algorithms generate each (pp, vpp, m) once: the projections are the same as one by one
    from primuspp.models.project import project

    spec, hw = PRESETS["llama2-7b"], load_hardware("mi300x")
    base = Parallel(global_batch_size=32, seq_len=2048)
    items = candidates(spec, hw, 8, base, ["1f1b", "zero-bubble"], [1, 2], [4], None, None, [1, 2], [1])
    swept = evaluate(spec, hw, items).fits
    alone = [project(spec, hw, p.par, p.algorithm) for p in swept]
    assert [p.step_time_ms for p in swept] == [p.step_time_ms for p in alone]
    assert [p.peak_memory_bytes for p in swept] == [p.peak_memory_bytes for p in alone]


def test_all_ranks_what_does_not_fit(capsys):
    args = ["plan", "--model", "qwen3-235b-a22b", "--gpu", "mi300x", "--gpus", "32", "--pp", "4", "--tp", "1"]
    args += ["--ep", "8", "--cp", "1", "--global-batch-size", "64", "--micro-batch-size", "1"]
    args += ["--seq-len", "4096", "-a", "1f1b", "-a", "v-half", "--json"]
    code, out, _ = run(capsys, *args)
    doc = json.loads(out)
    assert code == 0 and doc["results"] == [] and doc["dropped"] == {NO_FIT: 2}
    code, out, _ = run(capsys, *args, "--all")
    results = json.loads(out)["results"]
    assert code == 0 and len(results) == 2 and not any(r["fits"] for r in results)
    assert all(r["peak_memory_bytes"] > r["hbm_bytes"] for r in results)


def test_decoder_first_last_layers(capsys):
    args = ["plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8", "--tp", "1", "--pp", "4"]
    args += ["--micro-batch-size", "1", "--global-batch-size", "16", "--json", "-a", "1f1b", "-a", "zbv"]
    args += ["--cp", "1"]
    code, out, _ = run(capsys, *args, "--decoder-first-pipeline-num-layers", "5")
    doc = json.loads(out)
    assert code == 0 and [r["layout"] for r in doc["results"]] == ["Et*5|t*9|t*9|t*9L"]
    # the V placement does not take them: counted, with the reason
    assert doc["dropped"] == {NOT_DIVISIBLE: 1} and "use --layout" in doc["dropped_examples"][NOT_DIVISIBLE]
    code, _, err = run(capsys, *args, "--decoder-first-pipeline-num-layers", "0")
    assert code == 2 and err.startswith("error: --decoder-first-pipeline-num-layers 0: expected an integer")


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--tp", "3"], "no configuration can run (not divisible): 1f1b tp3 pp2 vpp1 ep1 dp0 mbs1: --tp 3 x"),
        (["--tp", "1", "--ep", "2"], "--ep 2: the model has no experts"),
        (
            ["--tp", "1", "--pp", "4", "--cp", "1", "--global-batch-size", "7"],
            "--global-batch-size 7: not divisible by micro",
        ),
        (["--tp", "1", "--pp", "8", "--layout", "Et*4|t*4L"], "names 2 stages, the schedule has 8"),
    ],
)
def test_inconsistent_options_exit_2(capsys, args, match):
    argv = ["plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8", "-a", "1f1b", *args]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and match in err


def test_recompute_swept(capsys):
    args = ["plan", "--model", "qwen3-235b-a22b", "--gpu", "mi300x", "--gpus", "32", "--pp", "4", "--tp", "1"]
    args += ["--ep", "8", "--cp", "1", "--global-batch-size", "64", "--micro-batch-size", "1"]
    args += ["--seq-len", "4096", "-a", "1f1b", "-a", "v-half"]
    args += ["--recompute", "none", "--recompute", "full", "--json"]
    code, out, _ = run(capsys, *args)
    doc = json.loads(out)
    assert code == 0 and doc["configurations_evaluated"] == 4
    # at 4096 tokens only full recompute fits (experiment 2 of docs/plan.md)
    assert doc["results"] and all(r["recompute"] == "full" for r in doc["results"])


@pytest.mark.parametrize("algorithm", ["1f1b", "1f1b-interleaved", "zbv", "v-half", "v-min", "dualpipe-v"])
def test_one_microbatch_bound_is_below_every_projected_peak(algorithm):
    # the sweep drops a candidate whose bound exceeds HBM without building its schedule: the bound must
    # never pass the projected peak (same memory model, any schedule of the placement)
    from primuspp.models.project import one_microbatch_peak, project, stage_plan

    spec, hw = PRESETS["llama3-8b"], load_hardware("h100")
    vpp = 1 if algorithm == "1f1b" else 2
    for mbs, pp, recompute in ((1, 4, "none"), (2, 2, "full"), (1, 8, "selective")):
        par = Parallel(pp=pp, vpp=vpp, micro_batch_size=mbs, global_batch_size=16 * mbs, seq_len=4096)
        par = replace(par, recompute=recompute)
        plan = stage_plan(spec, hw, par, algorithm)
        bound = one_microbatch_peak(spec, hw, par, plan)
        peak = project(spec, hw, par, algorithm, plan=plan).peak_memory_bytes
        assert 0 < bound <= peak, (mbs, pp, recompute, bound, peak)


def test_plan_all_projects_what_the_bound_would_drop(capsys):
    args = ["plan", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "64", "--tp", "8", "--pp", "8"]
    args += ["--cp", "1", "--micro-batch-size", "8", "--seq-len", "32768", "-a", "1f1b", "--json"]
    code, out, _ = run(capsys, *args)
    doc = json.loads(out)
    assert code == 0 and doc["dropped"] == {NO_FIT: 1} and "one microbatch" in doc["dropped_examples"][NO_FIT]
    code, out, _ = run(capsys, *args, "--all")
    results = json.loads(out)["results"]
    assert code == 0 and len(results) == 1 and not results[0]["fits"]


def test_parallel_sweep_equals_one_process():
    from primuspp.models.plan import MIN_PARALLEL

    spec, hw = PRESETS["llama2-7b"], load_hardware("mi300x")
    base = Parallel(global_batch_size=64, seq_len=2048)
    algorithms = ["1f1b", "1f1b-interleaved", "zbv"]
    items = candidates(spec, hw, 16, base, algorithms, [1, 2], None, None, None, [1, 2])
    assert len(items) >= MIN_PARALLEL
    seen: list = []
    one, two = evaluate(spec, hw, items), evaluate(spec, hw, items, on_each=seen.append, jobs=2)
    assert sorted(map(str, seen)) == sorted(map(str, items)) and two.evaluated == one.evaluated == len(items)
    assert two.dropped == one.dropped and two.examples == one.examples
    assert [(p.algorithm, p.par, p.step_time_ms, p.peak_memory_bytes) for p in two.ranked(True)] == [
        (p.algorithm, p.par, p.step_time_ms, p.peak_memory_bytes) for p in one.ranked(True)
    ]


@pytest.mark.parametrize(("flag", "jobs"), [("--pp", "2"), ("--tp", "2"), ("--cp", "2"), ("--pp", "1")])
def test_nothing_divides_is_one_line_in_either_mode(capsys, flag, jobs):
    # the parallel sweep grouped candidates by their microbatch count before the ones whose TP x CP x PP
    # does not divide the GPUs (DP 0) were set aside: ZeroDivisionError, exit 1
    args = ["plan", "--model", "llama3-70b", "--gpu", "mi300x", "--gpus", "64", flag, "3", "-j", jobs]
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert (
        err.startswith("error: no configuration can run (not divisible)") and "does not divide 64 GPUs" in err
    )


def test_offload_ranks_a_v_schedule_that_fits_only_with_it(capsys):
    # llama3-8b PP4 at 8192 tokens on H100: zbv needs 78.5 GiB of 74.5; offloading its chunk-0 activations
    # brings it to 74.2, slower by the host transfers, and it is ranked as zbv+offload
    args = ["plan", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "4", "--tp", "1", "--pp", "4"]
    args += ["--cp", "1", "--seq-len", "8192", "--global-batch-size", "16", "--micro-batch-size", "1"]
    args += ["--json"]
    from primuspp.models.project import project

    par = Parallel(pp=4, vpp=2, micro_batch_size=1, global_batch_size=16, seq_len=8192)
    plain = project(PRESETS["llama3-8b"], load_hardware("h100"), par, "zbv").record()
    assert not plain["fits"]
    code, out, _ = run(capsys, *args, "-a", "zbv")
    doc = json.loads(out)
    (off,) = doc["results"]
    assert code == 0 and doc["fitting"] == 1 and NO_FIT not in doc["dropped"]
    assert off["algorithm"] == "zbv+offload" and off["fits"]
    assert off["peak_memory_bytes"] < off["hbm_bytes"] < plain["peak_memory_bytes"]
    assert off["step_time_ms"] > plain["step_time_ms"]
    # a schedule that fits without it is not offloaded
    code, out, _ = run(capsys, *args, "-a", "v-half")
    assert code == 0 and json.loads(out)["results"][0]["algorithm"] == "v-half"
