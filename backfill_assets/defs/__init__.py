"""Dagster wiring: assets, checks, jobs, sensors, resources. Decorators call into lib/ and
service/ and do nothing else."""
