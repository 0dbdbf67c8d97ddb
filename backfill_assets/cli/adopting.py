"""`adopt`: bring a table that already exists under the framework, with its history."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from backfill_assets.cli.common import EXIT_OK, EXIT_REFUSED, _say_waiting
from backfill_assets.cli.context import _context

if TYPE_CHECKING:
    import argparse

    from backfill_assets.cli.context import Context
    from backfill_assets.lib.table import BackfillableTable
    from backfill_assets.service.adopt import Chunk


def cmd_adopt(a: argparse.Namespace) -> int:
    from backfill_assets.service.adopt import adopt_table, check_adoption
    from backfill_assets.service.tables import table_for

    c = _context(a)
    table = table_for(c.tables, a.table)
    if a.rollback or a.release:
        return _undo(c, table, rollback=a.rollback)
    check = check_adoption(c.instance, c.wh, table, allow_duplicates=a.allow_duplicates)
    text = a.format != "json"
    if text:
        # The check is what adopt prints before it starts; with --check it is all it does.
        print("\n".join(check.lines()), flush=True)
    if a.check or check.refusals:
        if not text:
            print(json.dumps({"check": check.as_dict()}, indent=2))
        if check.refusals:
            print(
                f"refused: {table.key} cannot be adopted as it is (the check names "
                f"{len(check.refusals)} problems and what to do); nothing was written",
                file=sys.stderr,
            )
            return EXIT_REFUSED
        return EXIT_OK

    def progress(chunk: Chunk) -> None:
        print(f"  {chunk.describe()}", file=sys.stderr, flush=True)

    result = adopt_table(
        c.instance,
        c.wh,
        table,
        check=check,
        code_version=a.code_version,
        allow_duplicates=a.allow_duplicates,
        chunk_days=a.chunk_days,
        wait_s=c.wait_s,
        on_wait=_say_waiting(),
        on_chunk=progress,
    )
    if not text:
        print(json.dumps({"check": check.as_dict(), "adopted": result.as_dict()}, indent=2))
        return EXIT_OK
    print(result.describe())
    return EXIT_OK


def _undo(c: Context, table: BackfillableTable, *, rollback: bool) -> int:
    from backfill_assets.service.adopt import release_adoption, rollback_adoption

    if rollback:
        n = rollback_adoption(c.instance, c.wh, table, wait_s=c.wait_s, on_wait=_say_waiting())
        print(
            f"rolled back the adoption of {table.key}: its old table is back under its name, with "
            f"{n} days written since the switch copied into it"
        )
    else:
        release_adoption(c.instance, c.wh, table, wait_s=c.wait_s, on_wait=_say_waiting())
        print(f"released the old table of {table.key}; its adoption can no longer be rolled back")
    return EXIT_OK
