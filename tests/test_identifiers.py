"""Identifiers: one naming policy (`identifiers.validate_ident`); on PostgreSQL psycopg's
`sql.Identifier` does the quoting, and no PostgreSQL module quotes a name by itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backfill_assets.errors import InvalidInput
from backfill_assets.lib.warehouse.postgres import idents
from backfill_assets.lib.warehouse.postgres.idents import ident, ident_list

POSTGRES = Path(idents.__file__).parent


def test_postgres_identifiers_are_quoted_by_psycopg_under_the_naming_policy():
    assert ident("analytics", "daily_revenue") == '"analytics"."daily_revenue"'
    assert ident_list(["order", "select"]) == '"order", "select"'
    for bad in ['a"b', "drop table x", "1st", "", "x" * 64]:
        with pytest.raises(InvalidInput, match="not a safe identifier"):
            ident(bad)
    with pytest.raises(InvalidInput, match="column 'a;b'"):
        ident_list(["ok", "a;b"])


def test_no_postgres_module_quotes_an_identifier_itself():
    hand_quoted = re.compile(r"""quote_ident\(|column_list\(|f'"\{|f"\\"\{""")
    offenders = [
        f"{path.name}:{n}"
        for path in sorted(POSTGRES.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if hand_quoted.search(line)
    ]
    assert not offenders, offenders
