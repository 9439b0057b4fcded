"""primuspp: pipeline-parallel schedules as data.

An algorithm emits a schedule table; the same table is validated, simulated, drawn, dumped, compared and
executed. See DESIGN.md for the architecture.
"""

__version__ = "0.1.0"
