"""Criteria predicates: one read-only SQL expression over a row, parsed and allow-listed.

A predicate is parsed with sqlglot (the DuckDB dialect is the one users write), then every node
of its syntax tree must be of an allowed kind: columns of the table (unqualified, unquoted),
literals, comparison/boolean/arithmetic operators, CASE, CAST to a plain type and a fixed set of
scalar functions. Anything else (a statement, a subquery, another table, a table function, a
parameter, a setting) is refused with the node that is not allowed. Date and timestamp literals
must be real calendar values.

`render_predicate` returns the predicate as SQL for a warehouse dialect, generated from the
parsed tree, so what reaches the warehouse is exactly what was checked.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from backfill_assets.errors import InvalidInput

if TYPE_CHECKING:
    from sqlglot import exp

# sqlglot is imported when a predicate is first parsed (about 0.1 s): the commands that only read
# plans and the instance (`status`, `list`) never need it.

HINT = 'a predicate is one expression over the row, e.g. "net_amount >= 0"'


@cache
def _allowed_nodes() -> tuple[type[exp.Expr], ...]:
    from sqlglot import exp

    return (
        exp.Column,
        exp.Identifier,
        exp.Literal,
        exp.Boolean,
        exp.Null,
        exp.Paren,
        exp.And,
        exp.Or,
        exp.Not,
        exp.EQ,
        exp.NEQ,
        exp.GT,
        exp.GTE,
        exp.LT,
        exp.LTE,
        exp.NullSafeEQ,
        exp.NullSafeNEQ,
        exp.Is,
        exp.In,
        exp.Between,
        exp.Like,
        exp.ILike,
        exp.Add,
        exp.Sub,
        exp.Mul,
        exp.Div,
        exp.Mod,
        exp.Neg,
        exp.DPipe,
        exp.Cast,
        exp.DataType,
        exp.DataTypeParam,
        exp.Case,
        exp.If,
        exp.Interval,
        exp.Var,
        # scalar functions
        exp.Coalesce,
        exp.Abs,
        exp.Round,
        exp.Floor,
        exp.Ceil,
        exp.Nullif,
        exp.Length,
        exp.Lower,
        exp.Upper,
        exp.Trim,
        exp.Least,
        exp.Greatest,
        exp.TimestampTrunc,
        exp.DateTrunc,
        exp.Extract,
        exp.Year,
        exp.Month,
        exp.Day,
        exp.TimeToStr,
    )


_CAST_TYPES = frozenset(
    {
        "BIGINT",
        "INT",
        "SMALLINT",
        "DECIMAL",
        "DOUBLE",
        "FLOAT",
        "BOOLEAN",
        "VARCHAR",
        "TEXT",
        "DATE",
        "TIMESTAMP",
        "TIMESTAMPNTZ",
        "DATETIME",
    }
)
_TIMESTAMPS = frozenset({"TIMESTAMP", "TIMESTAMPNTZ", "DATETIME"})


def _refuse(predicate: str, why: str) -> InvalidInput:
    return InvalidInput(f"predicate {predicate!r}: {why}; {HINT}")


@lru_cache(maxsize=512)
def _parse(predicate: str, columns: frozenset[str]) -> exp.Expr:
    if "--" in predicate or "/*" in predicate or ";" in predicate:
        raise InvalidInput(f"predicate {predicate!r} contains a comment or ';'; {HINT}")
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        tree = sqlglot.parse_one(predicate, read="duckdb")
    except (ParseError, TokenError) as e:
        first = str(e).splitlines()[0]
        raise _refuse(predicate, f"it is not a complete SQL expression ({first})") from None
    for node in tree.walk():
        if not isinstance(node, _allowed_nodes()):
            raise _refuse(
                predicate,
                f"{node.sql('duckdb')!r} ({type(node).__name__}) is not allowed: use column names, "
                "literals, comparison/arithmetic operators, CASE, CAST and simple functions",
            )
        if isinstance(node, exp.Column):
            _check_column(predicate, node, columns)
        elif isinstance(node, exp.Cast):
            _check_cast(predicate, node)
    return tree


def _check_column(predicate: str, node: exp.Column, columns: frozenset[str]) -> None:
    from sqlglot import exp

    if node.table or node.args.get("db") or node.args.get("catalog"):
        raise _refuse(predicate, f"{node.sql('duckdb')!r} names another table")
    ident = node.this
    if not isinstance(ident, exp.Identifier) or ident.quoted:
        raise _refuse(predicate, f"{node.sql('duckdb')!r} is a quoted or unusual identifier")
    if ident.name.lower() not in columns:
        raise _refuse(
            predicate,
            f"{ident.name!r} is neither a column of the table nor an allowed keyword/function; "
            f"columns are {sorted(columns)}",
        )


def _check_cast(predicate: str, node: exp.Cast) -> None:
    from sqlglot import exp

    to = node.to
    name = to.this.name if isinstance(to, exp.DataType) else str(to)
    if name.upper() not in _CAST_TYPES:
        raise _refuse(predicate, f"cast to {to.sql('duckdb')} is not allowed")
    value = node.this
    if isinstance(value, exp.Literal) and value.is_string:
        text = value.this
        try:
            if name.upper() == "DATE":
                dt.date.fromisoformat(text)
            elif name.upper() in _TIMESTAMPS:
                dt.datetime.fromisoformat(text)
        except ValueError:
            kind = "date" if name.upper() == "DATE" else "timestamp"
            raise _refuse(
                predicate, f"{text!r} is not a real {kind} (use YYYY-MM-DD[ HH:MM:SS])"
            ) from None


# Predicates the command that wrote the code location's snapshot validated against these columns
# (location/encoding.py): not parsed again to be validated.
_VALIDATED: set[tuple[str, frozenset[str]]] = set()


def mark_validated(predicate: str, columns: Iterable[str]) -> None:
    """Record that `predicate` was validated over `columns` (by the command that wrote the
    snapshot this one reads, from the same definitions). `render_predicate` still parses and
    checks it: what reaches a warehouse is always checked."""
    _VALIDATED.add((predicate, frozenset(c.lower() for c in columns)))


def validate_predicate(predicate: object, columns: Iterable[str]) -> str:
    """Return `predicate` if it is a read-only expression over `columns`.

    Raises:
        InvalidInput: naming the first part that is not allowed, or why it does not parse.
    """
    if not isinstance(predicate, str) or not predicate.strip():
        raise InvalidInput("a criteria predicate must be a non-empty SQL expression string")
    key = (predicate, frozenset(c.lower() for c in columns))
    if key not in _VALIDATED:
        _parse(*key)
    return predicate


def render_predicate(predicate: str, columns: Iterable[str], dialect: str = "duckdb") -> str:
    """The validated predicate as SQL for `dialect` ("duckdb" or "postgres")."""
    if not isinstance(predicate, str):
        validate_predicate(predicate, columns)  # raises, saying why
    # Each batch's gates render the plan's same few predicates: parsed once per process.
    return _render(predicate, tuple(columns), dialect)


@lru_cache(maxsize=512)
def _render(predicate: str, columns: tuple[str, ...], dialect: str) -> str:
    validate_predicate(predicate, columns)
    from sqlglot import exp

    declared = {c.lower(): c for c in columns}
    tree = _parse(predicate, frozenset(declared))

    def quoted(node: exp.Expr) -> exp.Expr:
        # Columns as declared and quoted: an unquoted name would be case-folded by Postgres.
        if isinstance(node, exp.Column):
            return exp.column(declared[node.name.lower()], quoted=True)
        return node

    return tree.transform(quoted).sql(dialect=dialect)
