"""`primuspp.heap`: the offline verbs keep freed memory for reuse (no page faults from build to build),
`train`, `algorithms`, a verb's --help and the library alone leave malloc as it is. Each case runs in its
own process: the setting is process-wide."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)

FAULTS = """
import json, resource
from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
costs = CostModel(1000.0, 1000.0, 1000.0)
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    simulate(build_schedule("1f1b", 16, None, 128, costs), costs)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""


def _run(code: str, cwd: str | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=cwd)
    return out.stdout.strip().splitlines()[-1]


@glibc
def test_kept_memory_is_reused_without_page_faults() -> None:
    """From the third build on, a build + simulation touches no page it has not touched before (glibc's
    defaults: about 50 faults a build here, 170-215 beside another program's allocations)."""
    code = f"import primuspp.heap as h\nassert h.keep_freed_memory() and h.keep_freed_memory()\n{FAULTS}"
    faults = json.loads(_run(code))
    assert max(faults[2:]) <= 4, faults


@pytest.mark.parametrize(
    ("verb", "kept"),
    [
        (["simulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", "res"], True),
        (["dump", "--algo", "1f1b", "--pp", "2", "--mb", "2"], True),
        (["algorithms"], None),
        (["simulate", "--help"], None),
    ],
)
@glibc
def test_the_offline_verbs_keep_memory(tmp_path, verb: list[str], kept: bool | None) -> None:
    code = (
        "import contextlib, io\nfrom primuspp.commands.app import main\nimport primuspp.heap as h\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    code = main({verb!r})\n"
        "print(code, h._set)"
    )
    assert _run(code, cwd=str(tmp_path)) == f"0 {kept}"


def test_every_verb_but_train_and_algorithms_keeps_memory() -> None:
    from primuspp.commands.app import VERBS, load

    keeps = {verb.name: load(verb).keeps_heap for verb in VERBS}
    assert keeps == {name: name not in ("train", "algorithms") for name in keeps}


def test_the_library_alone_leaves_malloc_as_it_is() -> None:
    code = (
        "import primuspp.heap as h\nfrom primuspp.algorithms.registry import build_schedule\n"
        "from primuspp.sim import simulate\nsimulate(build_schedule('zbv', 4, None, 8))\nprint(h._set)"
    )
    assert _run(code) == "None"
