"""The cost-aware search shared by the families: candidates, the capped greedy, W pass, local search."""
