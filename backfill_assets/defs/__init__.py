"""Dagster wiring: assets, checks, jobs, sensors, resources. Decorated functions gather their
inputs from the context and call service/; they hold no logic of their own."""
