"""Orchestration logic that reads the Dagster instance and drives the warehouse through lib/.

Decorated Dagster functions (defs/) and the CLI call into here; nothing here is decorated.
"""
