"""Simulation configs: our YAML schema and Primus' pp_simulation.yaml."""
