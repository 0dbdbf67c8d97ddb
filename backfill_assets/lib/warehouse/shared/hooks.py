"""The hooks an engine's adapter gives the shared code (`WarehouseBase`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from backfill_assets.constants import METADATA_SCHEMA
from backfill_assets.lib.warehouse.base import lease_name
from backfill_assets.lib.warehouse.identifiers import validate_ident

M = METADATA_SCHEMA


class Hooks:
    """Engine hooks, with the defaults of an engine whose metadata serves one schema (DuckDB's
    file); PostgreSQL's adapter overrides what differs."""

    # What the metadata's table keys start with ("schema." where one database holds several
    # warehouses' schemas, and their metadata with them).
    _key_prefix: str = ""
    # How the schema is named in messages ("main." for DuckDB).
    _where: str = ""
    # Whether a freed lease or claim row is deleted (DuckDB) or kept with no holder
    # (PostgreSQL: a claimant locks the row, and a deleted row would leave it nothing to lock).
    _frees_by_delete: bool = True

    def _key(self, table: str) -> str:
        """A table's key in the metadata."""
        return self._key_prefix + validate_ident(table, "table name")

    def _lease_key(self, name: str) -> str:
        """A lease's key in the metadata (a table's writer, a plan's runner)."""
        return self._key_prefix + lease_name(name)

    def _sql(self, con: Any, sql: str, params: Mapping[str, Any]) -> list[tuple]:
        """Run one statement with `$name` parameters on `con`; every row it returns."""
        raise NotImplementedError

    def _sql_named(
        self, con: Any, sql: str, params: Mapping[str, Any]
    ) -> tuple[list[str], list[tuple]]:
        """`_sql`, with the names of the columns it returns."""
        raise NotImplementedError

    def _lock_clause(self, of: str = "") -> str:
        """The clause that locks the rows a SELECT reads until the transaction ends (`of`: of
        that table only); "" where a transaction holds the whole file (DuckDB)."""
        return ""

    def _meta_reader(self, table: str) -> AbstractContextManager[Any]:
        """A read-only connection, or None while the metadata table `table` does not exist."""
        raise NotImplementedError

    def _meta_transaction(self, *, every_table: bool = False) -> AbstractContextManager[Any]:
        """A transaction whose coordination tables exist (`every_table`: and the others)."""
        raise NotImplementedError

    def _relation_kind(self, con: Any, name: str) -> str | None:
        """What `name` is in the warehouse's schema: "table", "view", another kind, or None."""
        raise NotImplementedError

    def _dependent_views(self, con: Any, name: str) -> Sequence[str]:
        """Views that read the table `name` by reference (not by name): PostgreSQL's."""
        return ()
