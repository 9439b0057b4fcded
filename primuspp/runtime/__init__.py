"""Runtime: execute schedule tables with torch.distributed (runner, p2p, B/W split, timing).

The public pieces: `ScheduleRunner` (runner.py), the `Executor` protocol and `Cell`/`TensorSpec`
(executor.py), `P2P` (p2p.py), `WeightGradStore` (wgrad.py), `ActivationMeter` (memory.py),
`launch` (launch.py), `step_timeline` (trace.py), and what `primuspp train` asks of a backend with the
one run summary they all produce: `TrainBackend`, `RunSummary` (backend.py). See docs/runtime.md.
"""
