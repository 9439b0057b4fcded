"""A 64x512 timeline (~200k boxes) renders to HTML in under 5 s and the page stays under 20 MB."""

import time

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.sim import simulate
from primuspp.viz.html import timeline_page
from primuspp.viz.sources import Source


# zbv: 2 chunks x 512 microbatches x (F, B, W) = 3072 boxes a rank; interleaved 1F1B at v=3 has as many
@pytest.mark.parametrize("algo,vpp", [("zbv", None), ("1f1b-interleaved", 3)])
def test_64x512_renders_fast_and_small(algo, vpp):
    if algo not in ALGORITHMS:
        pytest.skip(f"{algo} not in this build")
    timeline = simulate(build_schedule(algo, 64, vpp, 512)).timeline
    assert sum(len(rt.intervals) for rt in timeline.ranks) == 64 * 3072
    start = time.perf_counter()
    html = timeline_page([Source(algo, "test", (timeline,))])
    seconds = time.perf_counter() - start
    size_mb = len(html.encode()) / 1e6
    print(f"{algo} 64x512: {seconds:.2f} s, {size_mb:.1f} MB")
    assert seconds < 5.0 and size_mb < 20.0
