"""Runtime: execute schedule tables with torch.distributed (runner, p2p, B/W split, timing)."""
