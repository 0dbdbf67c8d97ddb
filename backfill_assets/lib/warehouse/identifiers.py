"""Identifier validation. Every SQL identifier passes through `quote_ident`."""

from __future__ import annotations

import re
from collections.abc import Iterable

from backfill_assets.errors import InvalidInput

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def validate_ident(name: object, what: str = "identifier") -> str:
    """Return `name` if it is a safe SQL identifier: letters, digits, _, not digit-first."""
    if not isinstance(name, str) or not _IDENT_RE.fullmatch(name):
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
