"""primuspp: pipeline-parallel schedules as data.

An algorithm emits a schedule table; the same table is validated, simulated, drawn, dumped, compared and
executed. README.md and docs/ describe the architecture and each part.
"""

__version__ = "0.1.0"
