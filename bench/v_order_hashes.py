"""Hash every V algorithm's order over a grid of (p, m, costs, memory cap): a fixture to prove a rewrite of
the V family keeps its orders (`--write` records them, the default compares with the recorded file)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.registry import get_algorithm
from primuspp.schedule.costs import CostModel

PS = (2, 3, 4, 5, 6, 8, 12, 16, 32)
COSTS = {"unit": CostModel(), "uneq": CostModel(forward=1.0, backward=2.0, wgrad=0.7, comm=0.1)}
FIXTURE = Path(__file__).with_name("v_order_hashes.json")


#: from this p on, only long m and v-auto at its default cap: its construction (`v_auto_grid`) builds its
#: whole block space for a short m under a small cap, minutes in pure Python at p >= 12
LARGE = 12


def microbatches(p: int) -> list[int]:
    ms = (5 * p + 3, 8 * p) if p >= LARGE else (1, p - 1, 2 * p - 1, 5 * p + 3, 8 * p)
    return sorted({m for m in ms if m >= 1})


def variants(p: int) -> list[tuple[str, dict]]:
    out = [("zbv", {}), ("v-half", {}), ("v-min", {}), ("v-auto", {})]
    if p >= LARGE:
        return out
    for cap in sorted({1.0, 1.5, (p + 4) // 3, (p + 2) // 2, p / 2 + 0.5}):
        out.append(("v-auto", {"max_mem": float(cap)}))
    return out


def order_hash(order) -> str:
    h = hashlib.sha256()
    for seq in order:
        h.update(repr([(n.kind.name, n.microbatch, n.stage) for n in seq]).encode())
        h.update(b"|")
    return h.hexdigest()[:16]


def run(ps) -> dict[str, str]:
    out = {}
    for p in ps:
        for m in microbatches(p):
            for cname, costs in COSTS.items():
                for algo, params in variants(p):
                    if p >= LARGE and algo == "v-auto" and m < 8 * p:
                        continue
                    a = get_algorithm(algo)
                    full = {"offload": False, "effort": "auto", **params}
                    if algo == "v-auto":
                        full.setdefault("max_mem", None)
                    req = GenerationRequest(p, 2, m, costs, full)
                    key = f"{algo} p={p} m={m} {cname} {params}"
                    t = time.process_time()
                    out[key] = order_hash(a.generate(req))
                    print(f"{key}: {out[key]} {time.process_time() - t:.2f}s", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--p", type=int, nargs="*", default=list(PS))
    args = ap.parse_args()
    got = run(args.p)
    if args.write:
        FIXTURE.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
        return
    want = json.loads(FIXTURE.read_text())
    diff = [k for k in got if want.get(k) != got[k]]
    for k in diff:
        print(f"DIFFERS: {k}: {want.get(k)} -> {got[k]}")
    print(f"{len(got) - len(diff)}/{len(got)} identical")
    sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
