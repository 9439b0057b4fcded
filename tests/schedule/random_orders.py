"""Random acyclic compute orders for any placement: a sequential execution picking ready nodes at random."""

from __future__ import annotations

import random

from primuspp.schedule.nodes import Node, NodeKind, fused
from primuspp.schedule.placement import Placement


def random_order(
    pl: Placement, m: int, rng: random.Random, split: float = 0.5, fuse: float = 0.3, offload: float = 0.2
) -> list[list[Node]]:
    order: list[list[Node]] = [[] for _ in range(pl.pp)]
    f_done, g_done = set(), set()
    pending_w: list[tuple[int, int]] = []
    offloaded: set[tuple[int, int]] = set()
    use_split = {(mb, s): rng.random() < split for mb in range(m) for s in range(pl.num_stages)}
    todo_f = {(mb, s) for mb in range(m) for s in pl.route_of(mb)}
    todo_b = set(todo_f)
    while todo_f or todo_b or pending_w:
        ready_f = [k for k in todo_f if pl.prev_stage[k[1]] < 0 or (k[0], pl.prev_stage[k[1]]) in f_done]
        ready_b = [
            k
            for k in todo_b
            if k in f_done and (pl.next_stage[k[1]] < 0 or (k[0], pl.next_stage[k[1]]) in g_done)
        ]
        choices = [("F", k) for k in ready_f] + [("B", k) for k in ready_b] + [("W", k) for k in pending_w]
        kind, key = rng.choice(sorted(choices))
        mb, s = key
        rank = pl.stage_rank[s]
        if kind == "F":
            node = Node(NodeKind.F, mb, s)
            partners = [k for k in ready_b if pl.stage_rank[k[1]] == rank and k not in offloaded]
            if partners and rng.random() < fuse:
                bk = rng.choice(sorted(partners))
                bkind = NodeKind.B if use_split[bk] else NodeKind.BW
                node = fused(node, Node(bkind, bk[0], bk[1]))
                todo_b.discard(bk)
                g_done.add(bk)
                if use_split[bk]:
                    pending_w.append(bk)
            order[rank].append(node)
            todo_f.discard(key)
            f_done.add(key)
            if rng.random() < offload:
                order[rank].append(Node(NodeKind.OFFLOAD, mb, s))
                offloaded.add(key)
        elif kind == "B":
            if key in offloaded:
                order[rank].append(Node(NodeKind.RELOAD, mb, s))
                offloaded.discard(key)
            order[rank].append(Node(NodeKind.B if use_split[key] else NodeKind.BW, mb, s))
            todo_b.discard(key)
            g_done.add(key)
            if use_split[key]:
                pending_w.append(key)
        else:
            order[rank].append(Node(NodeKind.W, mb, s))
            pending_w.remove(key)
    return order
