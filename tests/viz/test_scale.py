"""A 64x512 timeline (~200k boxes) renders to one HTML page under 20 MB (its render time is
bench/viz_scale.py's figure: timings are not asserted in tests)."""

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.sim import simulate
from primuspp.viz.html import timeline_page
from primuspp.viz.sources import Source


# zbv: 2 chunks x 512 microbatches x (F, B, W) = 3072 boxes a rank; interleaved 1F1B at v=3 has as many
@pytest.mark.parametrize("algo,vpp", [("zbv", None), ("1f1b-interleaved", 3)])
def test_64x512_renders_small(algo, vpp):
    timeline = simulate(build_schedule(algo, 64, vpp, 512)).timeline
    assert sum(len(rt.intervals) for rt in timeline.ranks) == 64 * 3072
    html = timeline_page([Source(algo, "test", (timeline,))])
    size_mb = len(html.encode()) / 1e6
    assert 1.0 < size_mb < 20.0, size_mb  # every box is in the page, compactly
