"""The zero-bubble family on a linear placement: ZB-H1, ZB-H2, the heuristic, the MILP optimum."""
