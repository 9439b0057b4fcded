from primuspp.schedule.costs import CostModel
from primuspp.sim.compare import rank_results
from primuspp.sim.recommend import candidate_specs, simulate_candidates
from primuspp.sim.runs import summary

EQUAL = CostModel(1000, 1000, 1000)


def _rank(pp, m, limit):
    results, refused = simulate_candidates(candidate_specs(pp, m, EQUAL, limit))
    return rank_results([summary(r) for r in results], limit), refused


def test_candidates_cover_v_options():
    names = [s.name for s in candidate_specs(8, 32, EQUAL).specs]
    assert "1f1b" in names and "1f1b-interleaved" in names
    assert "1f1b-interleaved-v3" in names and "1f1b-interleaved-v4" in names


def test_limit_excludes_what_does_not_fit():
    ranking, _ = _rank(8, 32, 8)
    fitting = {r["name"] for r in ranking.rows if r["fits"]}
    assert "gpipe" not in fitting and "1f1b-interleaved" not in fitting  # peaks 32 and 11.5
    best = next(r for r in ranking.rows if r["name"] == ranking.best)
    assert best["peak_memory"] <= 8
    assert all(best["step_time"] <= r["step_time"] for r in ranking.rows if r["fits"])


def test_generous_limit_picks_the_fastest_overall():
    ranking, _ = _rank(4, 8, 100)
    assert ranking.best == min(ranking.rows, key=lambda r: r["step_time"])["name"]


def test_limit_below_zbv_memory_does_not_pick_zbv():
    ranking, _ = _rank(8, 32, 6)
    assert ranking.best not in ("zbv", None)
    best = next(r for r in ranking.rows if r["name"] == ranking.best)
    assert best["peak_memory"] <= 6
    assert best["step_time"] < next(r for r in ranking.rows if r["name"] == "v-half")["step_time"]
    assert _rank(8, 32, 8)[0].best == "zbv"  # ties with v-auto at its budget go to the fixed schedule


def test_nothing_fits():
    ranking, _ = _rank(8, 32, 0.25)
    assert ranking.best is None and "nothing fits" in ranking.reason
