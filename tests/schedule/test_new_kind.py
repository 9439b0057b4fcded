"""Adding a node kind touches `schedule/nodes.py` (the member) and `schedule/semantics.py` (its row), nothing
else, for the offline core: proven on a copy of the package.

The trial is activation recomputation as two kinds: DISCARD drops a (mb, stage)'s saved activation after its
F (a memory node), RECOMPUTE rebuilds it before its backward (a compute node costing one forward). The test
copies `primuspp/` into a temporary directory, makes exactly those two edits there and runs, in a fresh
interpreter on the copy: parsing, lowering (fast and reference), validation (a valid table and the messages
of three broken ones), timing (fast and reference), the simulator (the intervals and the memory peak the
recomputation saves), the text and JSON forms, a Chrome trace and the terminal view (which draw an unknown
kind in grey). The repository's own package is left as it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "primuspp"

#: the edits a new kind needs: file (in the package) -> (text to find, text to put after it)
EDITS = {
    "schedule/nodes.py": [
        ('    RELOAD = "RELOAD"\n', '    DISCARD = "DISCARD"\n    RECOMPUTE = "RECOMPUTE"\n')
    ],
    "schedule/semantics.py": [
        ('TO_HOST, FROM_HOST = "to_host", "from_host"\n', 'DROP, REMAKE = "drop", "remake"\n'),
        (
            '    _K.RELOAD: KindSemantics(_K.RELOAD, "memory", at_start=(FROM_HOST,), cost=("offload",)),\n',
            '    _K.DISCARD: KindSemantics(_K.DISCARD, "memory", (SAVED,), at_start=(DROP,)),\n'
            "    _K.RECOMPUTE: KindSemantics("
            '_K.RECOMPUTE, "compute", at_start=(REMAKE,), cost=("forward",)),\n',
        ),
        ("STASHES = {TO_HOST: FROM_HOST", ", DROP: REMAKE"),
    ],
}

SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import io

import primuspp
assert primuspp.__file__.startswith(sys.argv[1]), primuspp.__file__

from rich.console import Console

from primuspp.errors import ValidationError
from primuspp.schedule.formats import from_json, from_text, to_json, to_text
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from tests.oracles.lowering import lower_comms_reference
from primuspp.schedule.nodes import NodeKind, parse_node
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.timing import node_times
from tests.oracles.timing import node_times_reference
from primuspp.schedule.validation import validate
from primuspp.sim import simulate
from primuspp.trace.chrome import chrome_trace
from primuspp.viz.terminal import render_timeline

assert NodeKind.RECOMPUTE.is_compute and NodeKind.DISCARD.is_memory
pl = make_placement("linear", 2, 1)
RECOMPUTED = [
    "F0.0 DISCARD0.0 F1.0 DISCARD1.0 RECOMPUTE0.0 B0.0 W0.0 RECOMPUTE1.0 B1.0 W1.0".split(),
    "F0.1 B0.1 W0.1 F1.1 B1.1 W1.1".split(),
]
PLAIN = [[t for t in seq if not t.startswith(("DISCARD", "RECOMPUTE"))] for seq in RECOMPUTED]


def table(texts):
    order = [[parse_node(t) for t in seq] for seq in texts]
    ranks = lower_comms(pl, 2, order)
    assert tuple(map(tuple, ranks)) == lower_comms_reference(pl, 2, order)
    return ScheduleTable(pl, 2, ranks, "trial")


def refused(texts):
    try:
        validate(table(texts))
    except ValidationError as err:
        return str(err)
    raise AssertionError(f"accepted {texts}")


trial = table(RECOMPUTED)
validate(trial)
costs = CostModel(forward=1.0, backward=2.0, wgrad=1.0, comm=0.5)
stage_costs = costs.for_placement(pl)
order = trial.compute_order()
fast, ref = node_times(pl, 2, order, stage_costs), node_times_reference(pl, 2, order, stage_costs)
assert (fast.starts, fast.ends) == (ref.starts, ref.ends)
i = [str(n) for n in order[0]].index("RECOMPUTE1.0")
assert fast.ends[0][i] - fast.starts[0][i] == 1.0  # one forward

result = simulate(trial, costs)
kinds = [iv.kind for iv in result.timeline.ranks[0].intervals]
assert kinds.count("RECOMPUTE") == 2 and "DISCARD" not in kinds, kinds
rank0 = result.timeline.ranks[0]
assert [iv.end - iv.start for iv in rank0.intervals if iv.kind == "RECOMPUTE"] == [1.0, 1.0]
assert result.timeline.ranks[0].peak_memory == 1.0  # one microbatch's activations at a time
assert simulate(table(PLAIN), costs).timeline.ranks[0].peak_memory == 2.0

# the table's text and JSON forms carry the kinds; a trace and the terminal view draw them (in grey)
assert from_text(to_text(trial)).ranks == tuple(map(tuple, trial.ranks))
assert from_json(to_json(trial)).ranks == tuple(map(tuple, trial.ranks))
names = {e.get("name", "") for e in chrome_trace(result.timeline)["traceEvents"]}
assert any(name.startswith("RECOMPUTE") for name in names), names
Console(file=io.StringIO(), width=120).print(render_timeline(result.timeline, 100))

no_discard = [RECOMPUTED[0][:1] + RECOMPUTED[0][2:], RECOMPUTED[1]]
print(refused(no_discard))
no_recompute = [[t for t in RECOMPUTED[0] if t != "RECOMPUTE0.0"], RECOMPUTED[1]]
print(refused(no_recompute))
dangling = [["F0.0", "B0.0", "W0.0", "F1.0", "DISCARD1.0"], RECOMPUTED[1]]
print(refused(dangling))
"""


def test_a_new_kind_needs_nodes_and_semantics_only(tmp_path):
    copy = tmp_path / "primuspp"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, edits in EDITS.items():
        path = copy / name
        text = path.read_text()
        for anchor, added in edits:
            assert text.count(anchor) == 1, (name, anchor)
            text = text.replace(anchor, anchor + added)
        path.write_text(text)
    changed = {
        str(p.relative_to(copy))
        for p in copy.rglob("*.py")
        if p.read_bytes() != (PACKAGE / p.relative_to(copy)).read_bytes()
    }
    assert changed == set(EDITS)

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "rank 0: RECOMPUTE0.0 (position 5) without an earlier DISCARD0.0",
        "rank 0: B0.0 (position 7) runs while 0.0 is discarded (no RECOMPUTE yet)",
        "rank 0: DISCARD1.0 is never recomputed",
    ]
