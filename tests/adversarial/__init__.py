"""Adversarial corpus (issue 11): hostile and careless inputs to every verb, each with its exact outcome.

Run it with pytest (`python -m pytest tests/adversarial -q`) or as a summary by issue item
(`python -m tests.adversarial.report`)."""
