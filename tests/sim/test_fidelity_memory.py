"""`compare` of a simulation against a Primus dump that holds no memory curve: no invented memory figures."""

from __future__ import annotations

import json

from primuspp.commands.app import main


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_compare_says_the_memory_is_not_in_the_dump(capsys, tmp_path, primus_data):
    dump = str(primus_data / "pp_data_example" / "pp4_vpp2")
    sim = ["simulate", "--algo", "1f1b-interleaved", "--vpp", "2", "--pp", "4", "--mb", "8"]
    assert _cli(capsys, *sim, "--costs-from", dump, "--out", str(tmp_path / "sim"))[0] == 0
    code, out, err = _cli(capsys, "compare", str(tmp_path / "sim"), dump, "--json")
    assert code == 0, err
    (pair,) = json.loads(out)["predicted_vs_measured"]
    # the dump's order was reconstructed: it pairs with the simulation of the same schedule
    assert pair["same_schedule"] and pair["algorithm"] == "1f1b-interleaved"
    assert not pair["has_memory"] and pair["per_rank_peak_memory"] == []
    assert [m["metric"] for m in pair["metrics"]] == ["step_time", "bubble_rate"]
    assert pair["memory_note"].startswith(f"not in the dump: {dump} records no activation-memory curve")
    step = pair["metrics"][0]
    assert abs(step["error"]) < 0.05  # projected from the dump's own costs
    code, out, _ = _cli(capsys, "compare", str(tmp_path / "sim"), dump)
    assert code == 0 and "memory: not in the dump" in out and "peak memory (GiB)" not in out
