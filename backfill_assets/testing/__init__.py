"""Test support: servers and helpers for the tests, the demo and the bench.

`throwaway_postgres` starts a PostgreSQL server from the machine's binaries for the length of a
block; `waiting.poll` waits for a condition. None of this is part of the framework: `cli`,
`defs`, `service` and `lib` must not import it (an import-linter contract in pyproject.toml
checks it). It ships in the wheel only because the example's demo (`backfill-assets-example
demo`) uses it.
"""
