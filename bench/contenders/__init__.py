"""The contenders of the backfill measures, one module each (the `_pg` ones beside their DuckDB
kin), each run in a fresh interpreter by bench.harness.contenders, which names them.

Imports nothing: every contender would pay for it in its timed imports.
"""
