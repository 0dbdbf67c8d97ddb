"""The DuckDB adapter on its own: identifiers, bad paths, partial-week swaps, rollback."""

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backfill_assets.errors import InvalidInput, WarehouseError
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.lib.gates import evaluate_gates
from backfill_assets.lib.spec import Column, TableSpec
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.lib.warehouse.identifiers import quote_ident
from backfill_assets.lib.warehouse.postgres.gates import _same_by_day
from backfill_assets.lib.warehouse.predicates import (
    _VALIDATED,
    mark_validated,
    render_predicate,
    validate_predicate,
)

SPEC = ORDERS.spec
D = dt.date


@pytest.fixture
def seeded(tmp_path: Path) -> DuckDBWarehouse:
    """Source for 2026-01-01..2026-01-31 and v1 history of orders_daily (no Dagster)."""
    wh = DuckDBWarehouse(tmp_path / "wh.duckdb", lock_timeout_s=2)
    wh.replace_reference_table(
        o.FX_RATES, [("currency", "VARCHAR"), ("rate_to_usd", "DOUBLE")], o.RATES_TO_USD
    )
    wh.replace_reference_table(
        o.COUNTRY_CURRENCY, [("country", "VARCHAR"), ("currency", "VARCHAR")], o.COUNTRIES
    )
    wh.replace_plain_partitions(
        o.RAW_ORDERS,
        o.RAW_ORDER_COLUMNS,
        "order_date",
        o.RAW_ORDERS_SQL,
        D(2026, 1, 1),
        D(2026, 2, 1),
        {"n": 100},
    )
    wh.replace_partitions(SPEC, D(2026, 1, 1), D(2026, 2, 1), build=o.ORDERS_DAILY_SQL_V1)
    return wh


def shadow(wh: DuckDBWarehouse, plan_id: str, start: dt.date, end: dt.date) -> None:
    """What an approved plan's batches leave: the plan holds the table, its shadow is built."""
    assert wh.claim_plan(SPEC.name, plan_id) == plan_id
    wh.replace_partitions(SPEC, start, end, build=ORDERS_SQL, shadow=True, plan_id=plan_id)


@pytest.mark.parametrize(
    "name", ['orders"; drop table x; --', "1abc", "a b", "", "x" * 64, "naïve"]
)
def test_unsafe_identifiers_are_refused_with_a_fix(name):
    with pytest.raises(InvalidInput, match="not a safe identifier"):
        quote_ident(name)


def test_a_table_spec_with_an_unsafe_column_name_is_refused_before_any_sql():
    with pytest.raises(InvalidInput, match="not a safe identifier"):
        TableSpec("t", (Column("ok", "BIGINT"), Column("bad name", "BIGINT")), "ok", ("ok",))
    with pytest.raises(InvalidInput, match="plain SQL type"):
        Column("x", "BIGINT); DROP TABLE y; --")


@pytest.mark.parametrize(
    "predicate",
    [
        "net_amount >= 0; drop table orders_daily",
        "net_amount >= 0 -- comment",
        "(select count(*) from raw_orders) > 0",
        "raw_orders.amount > 0",
        "read_csv('x') is not null",
        '"net_amount" > 0',
        "'a'';drop table x;' = status",
    ],
)
def test_predicates_are_a_read_only_expression_over_the_row(predicate):
    with pytest.raises(InvalidInput):
        validate_predicate(predicate, SPEC.column_names)


def test_predicates_over_the_row_are_accepted():
    for ok in (
        "net_amount >= 0",
        "status in ('placed', 'shipped')",
        "net_revenue_usd = round(net_amount * fx_rate, 2)",
        "order_id is not null",
    ):
        assert validate_predicate(ok, SPEC.column_names) == ok


def test_a_predicate_the_snapshot_validated_is_not_parsed_again_until_it_is_rendered():
    """`mark_validated` (the snapshot's predicates, validated when it was written) spares the
    parse for that predicate over those columns alone; rendering it as SQL parses it again."""
    bad = "net_amount >= 0; select 'marked'"
    cols = SPEC.column_names
    with pytest.raises(InvalidInput, match="comment or ';'"):
        validate_predicate(bad, cols)
    mark_validated(bad, cols)
    try:
        assert validate_predicate(bad, cols) == bad
        with pytest.raises(InvalidInput, match="comment or ';'"):
            validate_predicate(bad, (*cols, "other"))
        with pytest.raises(InvalidInput, match="comment or ';'"):
            render_predicate(bad, cols, "postgres")
    finally:
        _VALIDATED.discard((bad, frozenset(c.lower() for c in cols)))


def test_an_unreadable_warehouse_path_gives_a_clear_error_and_creates_nothing(tmp_path):
    missing_dir = tmp_path / "nope" / "wh.duckdb"
    with pytest.raises(WarehouseError, match="does not exist; create it"):
        DuckDBWarehouse(missing_dir).ensure_table(SPEC)
    assert not missing_dir.parent.exists()
    with pytest.raises(WarehouseError, match="is a directory"):
        DuckDBWarehouse(tmp_path).ensure_table(SPEC)
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"this is not a duckdb file" * 100)
    with pytest.raises(WarehouseError, match="cannot open warehouse"):
        DuckDBWarehouse(garbage).ensure_table(SPEC)
    assert garbage.read_bytes() == b"this is not a duckdb file" * 100
    with pytest.raises(WarehouseError, match="does not exist yet"):
        DuckDBWarehouse(tmp_path / "absent.duckdb").partition_stats(
            SPEC, D(2026, 1, 1), D(2026, 1, 2)
        )
    assert not (tmp_path / "absent.duckdb").exists()


def test_a_swap_of_partial_weeks_keeps_the_days_outside_the_plan(seeded):
    before = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    days = [D(2026, 1, 7) + dt.timedelta(days=i) for i in range(9)]  # Wed W02 .. Thu W03
    shadow(seeded, "pa", days[0], days[-1] + dt.timedelta(days=1))
    result = seeded.swap(SPEC, "pa", days)
    assert result.weeks == 2
    after = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    assert {d for d in before if before[d] != after[d]} == set(days)
    assert seeded.query("select count(*) from orders_daily") == [(31 * 100,)]


def test_rollback_restores_the_plan_days_and_keeps_later_writes_to_other_days(seeded):
    start, end = D(2026, 1, 7), D(2026, 1, 16)
    days = [start + dt.timedelta(days=i) for i in range((end - start).days)]
    before = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    shadow(seeded, "pb", start, end)
    seeded.swap(SPEC, "pb", days)
    # After the swap the daily job rewrites a day of the same (partial) week, outside the plan.
    later = D(2026, 1, 17)
    seeded.replace_partitions(SPEC, later, later + dt.timedelta(days=1), build=ORDERS_SQL)
    rewritten = seeded.checksums(SPEC, later, later + dt.timedelta(days=1))
    seeded.rollback(SPEC, "pb")
    now = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    assert {d: now[d] for d in days} == {d: before[d] for d in days}
    assert now[later] == rewritten[later]
    assert seeded.query("select count(*) from orders_daily") == [(31 * 100,)]


def _kinds(wh: DuckDBWarehouse) -> dict[str, str]:
    """The target's relations by name: "table" or "view"."""
    return dict(
        wh.query(
            "select table_name, 'table' from duckdb_tables() where table_name like 'orders_daily%' "
            "and table_name not like 'orders_daily__shadow%' and table_name <> "
            "'orders_daily__template' union all select view_name, 'view' from duckdb_views() "
            "where view_name = 'orders_daily'"
        )
    )


def test_the_target_is_one_table_a_swap_overlays_until_release_or_rollback(seeded):
    assert _kinds(seeded) == {"orders_daily": "table"}
    before = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    days = [D(2026, 1, 7) + dt.timedelta(days=i) for i in range(9)]  # Wed W02 .. Thu W03
    for plan_id, end in (("pr", "rollback"), ("ps", "release")):
        shadow(seeded, plan_id, days[0], days[-1] + dt.timedelta(days=1))
        seeded.swap(SPEC, plan_id, days)
        assert _kinds(seeded) == {
            "orders_daily": "view",
            "orders_daily__base": "table",
            "orders_daily__w2026w02": "table",
            "orders_daily__w2026w03": "table",
        }
        swapped = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
        if end == "rollback":
            seeded.rollback(SPEC, plan_id)
            assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == before
            seeded.drop_shadow(SPEC)
        else:
            assert seeded.release_backup(SPEC, plan_id) == 2
            assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == swapped
        assert _kinds(seeded) == {"orders_daily": "table"}
    assert seeded.query("select count(*) from orders_daily") == [(31 * 100,)]


def test_a_file_from_before_the_base_table_keeps_its_rows_and_swaps_and_releases(seeded):
    """The layout of earlier versions: a view over the template and one table per ISO week."""
    before = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    weeks = {"w2025w01": D(2025, 12, 29), "w2026w02": D(2026, 1, 5), "w2026w03": D(2026, 1, 12),
             "w2026w04": D(2026, 1, 19), "w2026w05": D(2026, 1, 26)}  # fmt: skip
    for week, monday in weeks.items():
        seeded.execute(
            f"create table orders_daily__{week} as select * from orders_daily "
            "where order_date >= $m and order_date < $m + 7",
            {"m": monday},
        )
    seeded.execute("drop table orders_daily")
    seeded.execute(
        "create view orders_daily as select * from orders_daily__template union all "
        + " union all ".join(f"select * from orders_daily__{w}" for w in weeks)
    )
    seeded.ensure_table(SPEC)  # what any write does first
    assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == before
    assert _kinds(seeded)["orders_daily__base"] == "table"
    # A daily write lands in its week's table; a swap renames that week to backup.
    day = D(2026, 1, 20)
    seeded.replace_partitions(SPEC, day, day + dt.timedelta(days=1), build=ORDERS_SQL)
    assert seeded.query("select count(*) from orders_daily__base") == [(0,)]
    written = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    days = [D(2026, 1, 7) + dt.timedelta(days=i) for i in range(9)]
    shadow(seeded, "pl", days[0], days[-1] + dt.timedelta(days=1))
    shadow_sums = seeded.checksums(SPEC, days[0], days[-1] + dt.timedelta(days=1), shadow=True)
    seeded.swap(SPEC, "pl", days)
    assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == {**written, **shadow_sums}
    assert seeded.release_backup(SPEC, "pl") == 2
    assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == {**written, **shadow_sums}
    assert seeded.live_week_count(SPEC) == 3  # the weeks no plan swapped keep their tables


def test_a_swap_into_days_the_target_never_had_and_its_rollback(tmp_path):
    wh = DuckDBWarehouse(tmp_path / "wh.duckdb")
    wh.replace_reference_table(
        o.FX_RATES, [("currency", "VARCHAR"), ("rate_to_usd", "DOUBLE")], o.RATES_TO_USD
    )
    wh.replace_plain_partitions(
        o.RAW_ORDERS,
        o.RAW_ORDER_COLUMNS,
        "order_date",
        o.RAW_ORDERS_SQL,
        D(2026, 3, 2),
        D(2026, 3, 9),
        {"n": 50},
    )
    days = [D(2026, 3, 2) + dt.timedelta(days=i) for i in range(7)]  # a missed load
    shadow(wh, "pc", days[0], D(2026, 3, 9))
    wh.swap(SPEC, "pc", days)
    assert wh.query("select count(*) from orders_daily") == [(350,)]
    wh.rollback(SPEC, "pc")
    assert wh.query("select count(*) from orders_daily") == [(0,)]


def test_a_failure_inside_the_swap_transaction_leaves_the_target_untouched(seeded):
    days = [D(2026, 1, 5) + dt.timedelta(days=i) for i in range(14)]
    shadow(seeded, "pd", days[0], days[-1] + dt.timedelta(days=1))
    before = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    # The second week's shadow is missing: the swap fails after renaming the first week.
    seeded.execute('drop table "orders_daily__shadow__w2026w03"')
    with pytest.raises(Exception, match="shadow week 2026w03"):
        seeded.swap(SPEC, "pd", days)
    assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == before
    assert seeded.query(
        "select count(*) from duckdb_tables() where table_name like '%backup%'"
    ) == [(0,)]


def test_a_file_written_before_checksums_were_recorded_swaps_and_rolls_back_exactly(seeded):
    # Files from before the checksums were recorded at write time: the swap computes the
    # missing ones once, and reports the same as a swap of a file that has them.
    days = [D(2026, 1, 7) + dt.timedelta(days=i) for i in range(9)]
    before = seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1))
    shadow(seeded, "pl", days[0], days[-1] + dt.timedelta(days=1))
    built = seeded.checksums(SPEC, days[0], days[-1] + dt.timedelta(days=1), shadow=True)
    seeded.execute("update backfill_meta.partition_versions set checksum = null, row_count = null")
    seeded.execute("update backfill_meta.shadow_log set checksum = null")
    result = seeded.swap(SPEC, "pl", days)
    assert {d: m.checksum_in for d, m in result.partitions.items()} == built
    assert {d: m.checksum_out for d, m in result.partitions.items()} == {d: before[d] for d in days}
    seeded.execute("update backfill_meta.swap_days set checksum_out = null")
    back = seeded.rollback(SPEC, "pl")
    assert {d: m.checksum_in for d, m in back.partitions.items()} == {d: before[d] for d in days}
    assert seeded.checksums(SPEC, D(2026, 1, 1), D(2026, 2, 1)) == before


# The metadata as the first versions wrote it: before the checksums, the rows per version, the
# swap's companions and the plan claims.
_OLD_METADATA = (
    "CREATE SCHEMA backfill_meta",
    "CREATE TABLE backfill_meta.partition_versions (table_name VARCHAR, partition_date DATE, "
    "version BIGINT, written_at TIMESTAMP)",
    "CREATE TABLE backfill_meta.shadow_log (table_name VARCHAR, partition_date DATE, "
    "plan_id VARCHAR, base_version BIGINT, row_count BIGINT, written_at TIMESTAMP)",
    "INSERT INTO backfill_meta.partition_versions VALUES ('orders_daily', DATE '2026-01-05', 1, "
    "TIMESTAMP '2026-01-06 02:00:00')",
)


def _metadata_columns(wh: DuckDBWarehouse) -> list[tuple]:
    return wh.query(
        "SELECT table_name, column_index, column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'backfill_meta' ORDER BY ALL"
    ) + wh.query("SELECT sequence_name FROM duckdb_sequences()")


def test_metadata_from_an_older_file_or_dropped_by_hand_is_completed_as_a_new_file_has_it(
    tmp_path: Path,
):
    """The metadata check costs one catalog query when nothing is missing; what is missing, a
    table, a column or the version sequence, is created as a new file has it, in its order (the
    metadata inserts fill their columns by position), and what is there is kept."""
    new = DuckDBWarehouse(tmp_path / "new.duckdb")
    new.ensure_table(SPEC)
    expected = _metadata_columns(new)
    assert len(expected) > 30  # eight tables and the version sequence
    old = DuckDBWarehouse(tmp_path / "old.duckdb")
    for statement in _OLD_METADATA:
        old.execute(statement)
    old.ensure_table(SPEC)
    assert _metadata_columns(old) == expected
    assert old.query(
        "SELECT version, checksum, row_count FROM backfill_meta.partition_versions"
    ) == [(1, None, None)]
    old.execute("DROP TABLE backfill_meta.swap_companions")
    old.execute("DROP SEQUENCE backfill_meta.version_seq")
    old.execute("ALTER TABLE backfill_meta.swap_days DROP COLUMN checksum_out")
    old.ensure_table(SPEC)
    assert _metadata_columns(old) == expected
    # The claims a lease or a plan takes before any table exists: the coordination tables alone.
    lone = DuckDBWarehouse(tmp_path / "lone.duckdb")
    assert lone.claim_plan(SPEC.name, "p1") == "p1"
    assert {t for t, *_ in _metadata_columns(lone)} == {"plan_claims", "plans", "writer_lease"}


_READ_IN_ANOTHER_PROCESS = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(con.execute(
    "SELECT count(*), bit_xor(hash(order_id, net_revenue_usd)) FROM orders_daily "
    "WHERE order_date >= DATE '2026-01-05' AND order_date < DATE '2026-01-19'"
).fetchone())
"""


def _in_another_process(code: str, path: Path) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def _read_elsewhere(path: Path) -> str:
    """The swapped range as a new process reads it: opening the file replays its log."""
    return _in_another_process(_READ_IN_ANOTHER_PROCESS, path)


def test_a_swap_and_a_rollback_leave_their_checkpoint_to_the_next_write_and_are_durable(seeded):
    """Swap and rollback skip the checkpoint on close (it rewrites the whole catalog); their
    commits stay in the write-ahead log, which another process replays when it opens the file,
    and the next write checkpoints."""
    path, wal = Path(seeded.path), Path(seeded.path + ".wal")
    start, end = D(2026, 1, 5), D(2026, 1, 19)
    days = [start + dt.timedelta(days=i) for i in range((end - start).days)]
    before = _read_elsewhere(path)
    shadow(seeded, "pw", start, end)
    assert not wal.exists()  # a write checkpoints when it closes
    seeded.swap(SPEC, "pw", days)
    assert wal.exists() and wal.stat().st_size > 0
    swapped = _read_elsewhere(path)
    assert swapped != before
    assert swapped == _read_elsewhere(path)  # a read-only replay leaves the log as it was
    seeded.rollback(SPEC, "pw")
    assert wal.exists()
    assert _read_elsewhere(path) == before
    seeded.replace_partitions(SPEC, D(2026, 1, 25), D(2026, 1, 26), build=ORDERS_SQL)
    assert not wal.exists()  # checkpointed by the next write, the swap and rollback with it
    assert _read_elsewhere(path) == before


_OPEN_ELSEWHERE = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1], read_only=True).close()
    print("opened")
except duckdb.IOException as e:
    print("locked" if "lock" in str(e).lower() else f"error: {e}")
"""


def _open_elsewhere(path: Path) -> str:
    """Whether a new process can open the file now: "opened" or "locked"."""
    return _in_another_process(_OPEN_ELSEWHERE, path)


def _outcomes(wh: DuckDBWarehouse, start: dt.date, end: dt.date, plan_id: str) -> list[tuple]:
    gates = evaluate_gates(wh, SPEC, ORDERS.criteria, start, end, plan_id)
    return [(g.check_name, g.partition, g.passed, g.description, g.metadata) for g in gates]


def test_a_session_keeps_the_file_open_and_its_writes_commit_and_checkpoint_as_alone(seeded):
    """A batch's write and its gates share one opening of the file (`session`): another
    process waits for the file as it waits for a write; each write inside commits and
    checkpoints as it would alone; the gates find the same as outside a session."""
    path, wal = Path(seeded.path), Path(seeded.path + ".wal")
    start, end = D(2026, 1, 12), D(2026, 1, 19)
    shadow(seeded, "ps", start, end)
    # A wrong unchanged column on one day, for the gates to find.
    seeded.execute(
        'UPDATE "orders_daily__shadow__w2026w03" SET gross_amount = gross_amount + 1 '
        "WHERE order_date = DATE '2026-01-14'"
    )
    alone = _outcomes(seeded, start, end, "ps")
    assert [(c, p) for c, p, ok, _, _ in alone if not ok] == [("sample_gate", "2026-01-14")]
    assert _open_elsewhere(path) == "opened"

    with seeded.session():
        assert _open_elsewhere(path) == "locked"
        seeded.replace_partitions(SPEC, D(2026, 1, 25), D(2026, 1, 26), build=ORDERS_SQL)
        assert not wal.exists() or wal.stat().st_size == 0  # committed and checkpointed
        with seeded.session():  # nested: the same session
            assert _outcomes(seeded, start, end, "ps") == alone
        # Another adapter of the file in this process reads through the session too (DuckDB
        # would refuse it a read-only opening of a file this process holds open).
        other = DuckDBWarehouse(Path(seeded.path).parent / "." / path.name, lock_timeout_s=2)
        assert other.query("SELECT count(*) FROM orders_daily WHERE order_date = $d",
                           {"d": D(2026, 1, 25)}) == [(100,)]  # fmt: skip
        assert _open_elsewhere(path) == "locked"
    assert _open_elsewhere(path) == "opened"


# -- the gates' reads: the target's recorded fingerprints, duplicates, the sample ------------------

GATE_START, GATE_END = D(2026, 1, 12), D(2026, 1, 19)
# Each corrupts the shadow week after its write, as a wrong build would have written it.
SHADOW_CORRUPTIONS = {
    "clean": None,
    "unchanged column": "UPDATE {t} SET gross_amount = gross_amount + 1 "
    "WHERE order_date = DATE '2026-01-14' AND order_id % 7 = 0",
    "changed column rule": "UPDATE {t} SET net_revenue_usd = net_revenue_usd + 1 "
    "WHERE order_date = DATE '2026-01-15'",
    "missing row": "DELETE FROM {t} WHERE order_id = (SELECT min(order_id) FROM {t} "
    "WHERE order_date = DATE '2026-01-16')",
    "duplicated key": "INSERT INTO {t} SELECT * FROM {t} WHERE order_date = DATE '2026-01-17' "
    "ORDER BY order_id LIMIT 2",
    "invariant": "UPDATE {t} SET status = 'lost' WHERE order_date = DATE '2026-01-18' "
    "AND order_id % 5 = 0",
    # Not a duplicate: a key may appear on two days (a partition's key is unique in its day).
    "a key on two days": "UPDATE {t} SET order_id = (SELECT min(order_id) FROM {t} "
    "WHERE order_date = DATE '2026-01-13') WHERE order_id = (SELECT min(order_id) FROM {t} "
    "WHERE order_date = DATE '2026-01-12')",
}


def _gate_outcomes(wh: DuckDBWarehouse, corruption: str | None, criteria=ORDERS.criteria):
    if corruption:
        wh.execute(corruption.format(t=quote_ident("orders_daily__shadow__w2026w03")))
    gates = evaluate_gates(wh, SPEC, criteria, GATE_START, GATE_END, "pg1")
    return [(g.check_name, g.partition, g.passed, g.description, g.metadata) for g in gates]


def _target_written(tmp_path: Path, seeded: DuckDBWarehouse, name: str, record: bool):
    """A copy of the seeded file whose target's days were written again, with the fingerprints
    of the table's criteria recorded (as the daily job writes) or not (as before they were)."""
    import shutil

    seeded.execute("CHECKPOINT")
    wh = DuckDBWarehouse(shutil.copy(seeded.path, tmp_path / name), lock_timeout_s=2)
    fingerprint = ORDERS.criteria.fingerprint_columns if record else ()
    wh.replace_partitions(
        SPEC, D(2026, 1, 1), D(2026, 2, 1), build=o.ORDERS_DAILY_SQL_V1, fingerprint=fingerprint
    )
    shadow(wh, "pg1", GATE_START, GATE_END)
    return wh


@pytest.mark.parametrize("corruption", sorted(SHADOW_CORRUPTIONS))
def test_the_gates_find_the_same_from_the_target_s_recorded_fingerprints_as_from_a_scan(
    seeded, tmp_path, corruption
):
    """A live write records each day's fingerprint of the key and the criteria's unchanged
    columns; the gates read it instead of scanning the target, and find exactly what a scan of
    the target finds: on a clean shadow and on every kind of corruption."""
    recorded = _target_written(tmp_path, seeded, "recorded.duckdb", record=True)
    scanned = _target_written(tmp_path, seeded, "scanned.duckdb", record=False)
    rows = recorded.query(
        "SELECT fingerprint_of, count(*), count(fingerprint) FROM backfill_meta.partition_versions "
        "GROUP BY ALL"
    )
    assert rows == [(",".join(ORDERS.criteria.fingerprint_columns), 31, 31)]
    assert scanned.query("SELECT count(fingerprint_of) FROM backfill_meta.partition_versions") == [
        (0,)
    ]
    sql = SHADOW_CORRUPTIONS[corruption]
    found = _gate_outcomes(recorded, sql)
    assert found == _gate_outcomes(scanned, sql)
    failing = {(c, p) for c, p, ok, *_ in found if not ok}
    expected = {
        "clean": set(),
        "unchanged column": {("sample_gate", "2026-01-14")},
        "changed column rule": {("sample_gate", "2026-01-15")},
        "missing row": {("row_count_gate", "2026-01-16"), ("sample_gate", "2026-01-16")},
        "duplicated key": {("row_count_gate", "2026-01-17"), ("sample_gate", "2026-01-17")},
        "invariant": {("invariants_gate", "2026-01-18"), ("sample_gate", "2026-01-18")},
        # The key of the 12th changed (its fingerprint does), and neither day has a duplicate.
        "a key on two days": {("sample_gate", "2026-01-12")},
    }[corruption]
    assert failing == expected
    by = {(c, p): m for c, p, _, _, m in found}
    if corruption == "duplicated key":
        assert by[("row_count_gate", "2026-01-17")]["duplicate_key_rows"] == 2
    if corruption == "changed column rule":
        # The sampled rows that break the rule come back whole, with what is wrong.
        sample = by[("sample_gate", "2026-01-15")]
        assert sample["rule_violations"] and sample["mismatching_rows"]
        assert "net_revenue_usd" in sample["mismatching_rows"][0]
    assert all(m.get("duplicate_key_rows", 0) == 0 for (c, p), m in by.items()
               if p != "2026-01-17")  # fmt: skip


def test_a_plan_with_other_unchanged_columns_than_the_table_s_scans_the_target(seeded, tmp_path):
    """The recorded fingerprints cover the table's criteria; a plan that compares other columns
    (a criteria file) reads the target's rows instead, and still catches what is wrong in them."""
    import dataclasses

    from backfill_assets.lib.planning.criteria import SampleCriterion

    wh = _target_written(tmp_path, seeded, "recorded.duckdb", record=True)
    assert ORDERS.criteria.sample is not None
    fewer = dataclasses.replace(
        ORDERS.criteria,
        sample=SampleCriterion(
            size=ORDERS.criteria.sample.size,
            unchanged_columns=("customer_id", "gross_amount"),
            changed_columns=ORDERS.criteria.sample.changed_columns,
        ),
    )
    assert not [g for g in _gate_outcomes(wh, None, fewer) if not g[2]]
    found = _gate_outcomes(wh, SHADOW_CORRUPTIONS["unchanged column"], fewer)
    assert {(c, p) for c, p, ok, *_ in found if not ok} == {("sample_gate", "2026-01-14")}


def test_the_sample_read_from_the_shadow_alone_finds_what_the_full_sample_finds(seeded, tmp_path):
    """When every day's fingerprints agree the sample reads only the changed columns' rules
    from the shadow; one day that differs makes the gates join every sampled row to the target.
    The days that did not change come out the same either way: sampled rows, rules, metadata."""
    fast = _gate_outcomes(_target_written(tmp_path, seeded, "fast.duckdb", record=True), None)
    full = _gate_outcomes(
        _target_written(tmp_path, seeded, "full.duckdb", record=True),
        SHADOW_CORRUPTIONS["unchanged column"],  # 2026-01-14 only
    )
    samples = [(p, m) for c, p, _, _, m in fast if c == "sample_gate"]
    assert all(m["sampled_rows"] > 0 for _, m in samples)
    assert [g for g in fast if g[1] != "2026-01-14"] == [g for g in full if g[1] != "2026-01-14"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=6))
def test_a_day_the_postgres_diff_finds_the_same_has_no_duplicate_key_on_either_side(counts):
    """The PostgreSQL gates count duplicate keys only when the diff does not find every day the
    same (`_same_by_day`): a day found the same must have each key once on each side. Each pair
    is one key's rows in the shadow and in the live table; the diff's row is what the full join
    on the key counts: rows in both (s * t), shadow only and live only."""
    day = dt.date(2026, 1, 5)
    both = sum(s * t for s, t in counts)
    only_shadow = sum(s for s, t in counts if not t)
    only_live = sum(t for s, t in counts if not s)
    row = (0, day, both, only_shadow, only_live, 0)
    shadow_rows, live_rows = sum(s for s, _ in counts), sum(t for _, t in counts)
    same = _same_by_day([row], {day: shadow_rows}, {day: live_rows})[day]
    once = all(s == t == 1 for s, t in counts if s or t)
    assert same == once
