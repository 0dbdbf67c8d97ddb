"""PostgreSQL identifiers: checked against the one naming policy (`identifiers.validate_ident`)
and quoted by psycopg's `sql.Identifier`, never by string formatting of our own."""

from __future__ import annotations

from collections.abc import Iterable

from psycopg import sql

from backfill_assets.lib.warehouse.identifiers import validate_ident


def ident(*parts: str, what: str = "identifier") -> str:
    """One identifier, schema-qualified when given two parts: `ident("s", "t")` is `"s"."t"`."""
    return sql.Identifier(*(validate_ident(p, what) for p in parts)).as_string()


def ident_list(names: Iterable[str]) -> str:
    """A comma-separated column list."""
    quoted = (sql.Identifier(validate_ident(n, "column")) for n in names)
    return sql.SQL(", ").join(quoted).as_string()
