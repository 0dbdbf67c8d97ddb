"""SQL written once, run on either warehouse.

Builds, source SELECTs and ad-hoc queries are written in DuckDB's dialect (the embedded default)
with `$name` parameters. On PostgreSQL they are transpiled with sqlglot, once per text: `$name`
becomes psycopg's `%(name)s`, DuckDB-only syntax its PostgreSQL equivalent. What sqlglot cannot
express raises here, with the statement, rather than half-way through a write.

A table whose SQL transpiles but still cannot run (a DuckDB-only function such as `hash`) is
refused when the definitions load (`check_build_runs`), or declares its SQL per dialect:
`build={"duckdb": "...", "postgres": "..."}`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from backfill_assets.errors import InvalidInput

# sqlglot is imported where SQL is transpiled (about 0.1 s): the commands that only read plans
# and the instance (`status`, `list`) never need it.

DIALECTS = ("duckdb", "postgres")
# A literal % in PostgreSQL SQL sent with parameters must be doubled for psycopg.
_LONE_PERCENT = re.compile(r"%(?!\(\w+\)s)")
_DOLLAR_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_STRING = re.compile(r"('(?:[^']|'')*')")

SQL = str | Mapping[str, str]  # DuckDB-dialect SQL, or SQL per dialect {"duckdb": ..., ...}


@functools.lru_cache(maxsize=512)
def transpile(sql: str, to: str, source: str = "duckdb") -> str:
    """`sql` (one statement in `source`'s dialect) in dialect `to`; parameters in the style the
    target's driver expects (`$name` for DuckDB, `%(name)s` for psycopg)."""
    if to not in DIALECTS or source not in DIALECTS:
        raise InvalidInput(f"unknown SQL dialect {to if to not in DIALECTS else source!r}")
    if to == source:
        return sql
    import sqlglot
    from sqlglot.errors import ErrorLevel, SqlglotError

    try:
        out = sqlglot.transpile(
            sql, read=source, write=to, unsupported_level=ErrorLevel.RAISE, pretty=False
        )
    except SqlglotError as e:
        first = " ".join(sql.split())[:200]
        raise InvalidInput(
            f"this SQL cannot be written for {to}: {e}. Declare it per dialect "
            f"(build={{'{source}': ..., '{to}': ...}}). SQL: {first}"
        ) from None
    if len(out) != 1:
        raise InvalidInput(f"expected one SQL statement, got {len(out)}")
    text = out[0]
    if to == "postgres":
        text = _LONE_PERCENT.sub("%%", text)
    return text


def sql_for(sql: SQL, dialect: str) -> str:
    """`sql` ready to run on `dialect`: a string is DuckDB's dialect (transpiled when needed); a
    mapping gives SQL per dialect (`$name` parameters in each), and the missing dialect is
    transpiled from the DuckDB one."""
    if isinstance(sql, str):
        return transpile(sql, dialect)
    unknown = sorted(set(sql) - set(DIALECTS))
    if unknown:
        raise InvalidInput(f"SQL for unknown dialects {unknown}: use {list(DIALECTS)}")
    if dialect in sql:
        native = sql[dialect]
        return _psycopg_params(native) if dialect == "postgres" else native
    if "duckdb" in sql:
        return transpile(sql["duckdb"], dialect)
    raise InvalidInput(f"no SQL for {dialect}, and no DuckDB SQL to write it from: add {dialect!r}")


def _psycopg_params(sql: str) -> str:
    """Native PostgreSQL SQL with `$name` parameters, in psycopg's style (`%(name)s`, a literal
    % doubled); string literals are left as they are."""
    parts = _STRING.split(sql)
    for i in range(0, len(parts), 2):  # outside string literals
        parts[i] = _DOLLAR_PARAM.sub(r"%(\1)s", _LONE_PERCENT.sub("%%", parts[i]))
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("%", "%%")
    return "".join(parts)


@functools.lru_cache(maxsize=256)
def column_type(sql_type: str, to: str) -> str:
    """A column type written for DuckDB (BIGINT, DOUBLE, VARCHAR, DECIMAL(12,2)...) in `to`."""
    if to == "duckdb":
        return sql_type
    from sqlglot import expressions as exp
    from sqlglot.errors import SqlglotError

    try:
        return exp.DataType.build(sql_type, dialect="duckdb").sql(to)
    except SqlglotError as e:
        raise InvalidInput(f"column type {sql_type!r} has no {to} equivalent: {e}") from None
