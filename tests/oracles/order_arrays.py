"""`array_order.order_arrays` as a plain loop over the nodes and their parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from primuspp.schedule.array_order import CODE
from primuspp.schedule.nodes import Node
from primuspp.schedule.semantics import SEMANTICS


def order_arrays(order: Sequence[Sequence[Node]]) -> dict[str, Any]:
    """`order_arrays` as a plain loop over the nodes and their parts."""
    import numpy as np

    kinds, mbs, stages, ranks, idx, parts, node_kinds = [], [], [], [], [], [], []
    parts_ok = True
    for r, seq in enumerate(order):
        for i, n in enumerate(seq):
            node_kinds.append(CODE[n.kind.text])
            spec = SEMANTICS[n.kind].parts
            if spec:
                if len(n.parts) != len(spec) or any(
                    part.kind not in allowed for part, allowed in zip(n.parts, spec, strict=False)
                ):
                    parts_ok = False
                rows = [(part, j) for j, part in enumerate(n.parts)]
            else:
                rows = [(n, 0)]
            for x, j in rows:
                kinds.append(CODE[x.kind.text])
                mbs.append(x.microbatch)
                stages.append(x.stage)
                ranks.append(r)
                idx.append(i)
                parts.append(j)
    return {
        "node_kind": np.array(node_kinds, dtype=np.int8),
        "parts_ok": parts_ok,
        "kind": np.array(kinds, dtype=np.int8),
        "mb": np.array(mbs, dtype=np.int64),
        "stage": np.array(stages, dtype=np.int64),
        "rank": np.array(ranks, dtype=np.int64),
        "index": np.array(idx, dtype=np.int64),
        "part": np.array(parts, dtype=np.int64),
    }
