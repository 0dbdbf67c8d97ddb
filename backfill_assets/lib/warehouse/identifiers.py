"""Identifier and predicate validation. Every SQL identifier passes through `quote_ident`."""

from __future__ import annotations

import re
from collections.abc import Iterable

from backfill_assets.errors import InvalidInput

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def validate_ident(name: object, what: str = "identifier") -> str:
    """Return `name` if it is a safe SQL identifier: letters, digits, _, not digit-first."""
    if not isinstance(name, str) or not _IDENT_RE.match(name):
        raise InvalidInput(
            f"{what} {name!r} is not a safe identifier: use 1-63 letters, digits or underscores, "
            "starting with a letter or underscore"
        )
    return name


def quote_ident(name: str, what: str = "identifier") -> str:
    """Validate and double-quote one identifier."""
    return f'"{validate_ident(name, what)}"'


def column_list(columns: Iterable[str]) -> str:
    return ", ".join(quote_ident(c, "column") for c in columns)


# Criteria predicates are SQL by design, but only a read-only expression over one row: column
# names, literals, operators and a fixed set of scalar functions. No statements, no subqueries,
# no other tables, no comments, no quoted identifiers.
_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<number>\d+(?:\.\d+)?)
      | (?P<string>'(?:[^']|'')*')
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op><=|>=|<>|!=|\|\||::|[-+*/%=<>(),])
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "not",
        "is",
        "null",
        "true",
        "false",
        "in",
        "between",
        "like",
        "ilike",
        "case",
        "when",
        "then",
        "else",
        "end",
        "as",
        "date",
        "timestamp",
        "decimal",
        "integer",
        "bigint",
        "double",
        "varchar",
        "boolean",
        "interval",
    ]
)
_FUNCTIONS = frozenset(
    [
        "abs",
        "round",
        "floor",
        "ceil",
        "coalesce",
        "nullif",
        "length",
        "lower",
        "upper",
        "trim",
        "cast",
        "least",
        "greatest",
        "date_trunc",
        "extract",
        "year",
        "month",
        "day",
        "strftime",
    ]
)


def validate_predicate(predicate: object, columns: Iterable[str]) -> str:
    """Return `predicate` if it is a read-only boolean expression over `columns`.

    Raises InvalidInput naming the first token that is not allowed.
    """
    if not isinstance(predicate, str) or not predicate.strip():
        raise InvalidInput("a criteria predicate must be a non-empty SQL expression string")
    allowed_columns = {c.lower() for c in columns}
    pos, text, depth = 0, predicate, 0
    if "--" in text or "/*" in text or ";" in text:
        raise InvalidInput(
            f"predicate {predicate!r} contains a comment or ';': a predicate is one expression "
            'over the row, e.g. "net_amount >= 0"'
        )
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise InvalidInput(
                f"predicate {predicate!r}: unexpected text at {text[pos : pos + 20]!r}; use column "
                "names, literals, comparison/arithmetic operators and simple functions"
            )
        # Parentheses must balance: the predicate is inlined as `coalesce((P), false)`, and an
        # unbalanced one such as "x >= 0), (true" was accepted and closed that wrapper, changing
        # the shape of the query it sits in instead of staying one expression over the row.
        op = m.group("op")
        depth += (op == "(") - (op == ")")
        if depth < 0:
            raise InvalidInput(
                f"predicate {predicate!r} closes a parenthesis it did not open; a predicate is "
                "one expression over the row"
            )
        word = m.group("word")
        if word is not None:
            low = word.lower()
            if low not in allowed_columns and low not in _KEYWORDS and low not in _FUNCTIONS:
                raise InvalidInput(
                    f"predicate {predicate!r}: {word!r} is neither a column of the table nor an "
                    f"allowed keyword/function; columns are {sorted(allowed_columns)}"
                )
        pos = m.end()
    if depth:
        raise InvalidInput(
            f"predicate {predicate!r} leaves {depth} parenthesis(es) open; a predicate is one "
            "expression over the row"
        )
    return predicate
