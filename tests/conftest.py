"""Shared fixtures: a real DuckDB file under tmp_path, a real Dagster instance, a real dbt parse.

Each test gets its own warehouse file (BACKFILL_ASSETS_WAREHOUSE points at it) and its own
instance; the example's definitions are loaded once per session (the dbt manifest is parsed
then). The example's dbt project is found through BACKFILL_ASSETS_DBT_PROJECT, as an installed
deployment would find it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, open_warehouse
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("BACKFILL_ASSETS_DBT_PROJECT", str(REPO / "dbt_project"))

# A fixed, fully landed history window for tests that do not depend on "now".
HISTORY_START = dt.date(2026, 1, 1)
HISTORY_END = dt.date(2026, 1, 21)  # inclusive: 3 ISO weeks (2026-W01 starts Mon 2025-12-29)
ROWS_PER_DAY = 300


# Each test's files (DuckDB warehouses, SQLite instances, Dagster homes of the servers the tests
# start) go to a tmpfs when the machine has one. Every event a run stores in Dagster's SQLite
# storage is a commit, and a commit's fsync on this machine's disk costs 1.2 ms against 0.06 ms
# on tmpfs (`tests/test_execute.py -k embedded`, 4 tests: 28.5-38.6 s on disk, 21.3-25.6 s on
# tmpfs, alternated, 2026-12-07). What a test checks does not depend on where its files are:
# the crash tests kill processes, not the machine. TMPDIR goes there too, for the processes the
# tests start (the bench's scratch, the demo's, throwaway servers). `--basetemp`, or
# BACKFILL_ASSETS_TEST_TMP (a folder, or "default" for pytest's own), chooses another place.
TMPFS = Path("/dev/shm")
TMPFS_MIN_FREE = 4 << 30  # a whole suite's files take about 1.1 GiB


def _tmpfs_basetemp() -> Path | None:
    """This session's folder on the tmpfs (`<root>/run-<pid>`), after removing the folders of
    sessions whose process is gone; None where there is no tmpfs with room."""
    chosen = os.environ.get("BACKFILL_ASSETS_TEST_TMP")
    if chosen == "default":
        return None
    if chosen:
        root = Path(chosen)
    else:
        if not TMPFS.is_dir() or not os.access(TMPFS, os.W_OK):
            return None
        if shutil.disk_usage(TMPFS).free < TMPFS_MIN_FREE:
            return None
        root = TMPFS / f"backfill_assets-tests-{os.getuid()}"
    root.mkdir(parents=True, exist_ok=True)
    for old in [*root.glob("run-*"), *root.glob("tmp-*")]:
        pid = old.name.split("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    return root / f"run-{os.getpid()}"


def _tmpfs_tmpdir(basetemp: Path) -> None:
    """TMPDIR for this session and every process it starts (the bench's and the demo's scratch
    folders, throwaway servers' data), beside `basetemp`: open to all like /tmp, since the
    `postgres` user must reach a throwaway server's folder in it."""
    tmp = basetemp.with_name(f"tmp-{os.getpid()}")
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # read TMPDIR again


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path factory reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        chosen = _tmpfs_basetemp()
        if chosen is not None:
            config.option.basetemp = str(chosen)
            _tmpfs_tmpdir(chosen)
    _handle_sigint()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this session's tmpfs folder (memory, not disk) unless a test failed: then it stays
    for a look, until the next session removes it."""
    base = config.option.basetemp
    if hasattr(config, "workerinput") or base is None or os.environ.get("BACKFILL_ASSETS_TEST_TMP"):
        return
    if Path(base).name == f"run-{os.getpid()}" and getattr(config, "_backfill_failed", 1) == 0:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(Path(base).with_name(f"tmp-{os.getpid()}"), ignore_errors=True)


def _handle_sigint() -> None:
    """Run with SIGINT handled, as the backfill-assets CLI does. A suite started in a script's
    background (CI) inherits SIGINT ignored. Dagster points SIGTERM at SIGINT's handler whenever
    an in-process run ends, so SIGTERM was then ignored by the whole process and by every child
    it started; the compute-log `tail -F` of a run executed in another thread then ignored the
    SIGTERM meant to stop it, and outlived the suite (two per CI run)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The longest test files, longest first (seconds per file, `--durations` of a clean-clone
# `make test` on 2026-12-05). `make test` runs files on two workers (`--dist loadfile
# --no-loadscope-reorder`) in collection order; starting the longest ones first keeps one worker
# from running the UI file alone at the end while the other sits idle. Only the order matters;
# files not listed follow in their usual order.
LONGEST_FIRST = (
    "tests/ui/test_dagster_ui.py",  # ~500 s
    "tests/test_demo.py",  # ~400 s
    "tests/e2e/test_daemon.py",  # ~390 s
    "tests/test_bench_smoke.py",  # ~290 s
    "tests/test_downstream.py",  # ~285 s
    "tests/reliability/test_writers.py",  # ~225 s
    "tests/e2e/test_adoption_ui.py",  # ~170 s
    "tests/test_adoption.py",  # ~115 s
    "tests/e2e/test_daemon_postgres.py",  # ~110 s
    "tests/test_cli_snapshot.py",  # ~110 s
    "tests/e2e/test_restart.py",  # ~95 s
    "tests/test_stale.py",  # ~90 s
    "tests/reliability/test_crashes.py",  # ~80 s
    "tests/reliability/test_state_of_record.py",  # ~75 s
    "tests/test_cli_output.py",  # ~60 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_addoption(parser: pytest.Parser) -> None:
    # For the browser tests in tests/ui (`make screenshots`); options must be declared here.
    parser.addoption("--screenshots", metavar="DIR", help="save the UI tests' screenshots in DIR")


# The backends a test runs on: "embedded" (a DuckDB file and Dagster's SQLite storage, the
# default) and "postgres" (a PostgreSQL warehouse and Dagster's PostgreSQL storage, on a real
# server). A module or test marked `@pytest.mark.backends("embedded", "postgres")` runs on each.
BACKENDS = ("embedded", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None and "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", marker.args, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    name = getattr(request, "param", "embedded")
    assert name in BACKENDS, name
    return name


# -- the reliability figures ---------------------------------------------------------------------
# `reliability: faults injected N, bad inputs tried M, commands checked against the state of
# record R, rows lost L, cases failing K`: N, M and R are counted by the tests through
# tests/reliability/harness.py, L is what `expect_target` found
# missing or mixed in a target (it must be 0), K the failed tests in tests/reliability. Under
# pytest-xdist each worker counts its own; the controller adds them up.


def _ours(report: pytest.TestReport) -> bool:
    return report.nodeid.startswith("tests/reliability/")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._backfill_failed = int(exitstatus != 0)  # type: ignore[attr-defined]
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the figures to the controller
        from tests.reliability.harness import FIGURES

        workeroutput["reliability"] = dataclasses.asdict(FIGURES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    from tests.reliability.harness import FIGURES

    got = getattr(node, "workeroutput", {}).get("reliability")
    if got:
        FIGURES.faults_injected += got["faults_injected"]
        FIGURES.bad_inputs_tried += got["bad_inputs_tried"]
        FIGURES.rows_lost += got["rows_lost"]
        FIGURES.losses.extend(got["losses"])
        FIGURES.record_cases += got.get("record_cases", 0)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.reliability.harness import FIGURES

    stats = terminalreporter.stats
    ran = [r for key in ("passed", "failed", "error") for r in stats.get(key, []) if _ours(r)]
    if not ran:
        return
    failing = {r.nodeid for key in ("failed", "error") for r in stats.get(key, []) if _ours(r)}
    terminalreporter.write_line(
        f"reliability: faults injected {FIGURES.faults_injected}, bad inputs tried "
        f"{FIGURES.bad_inputs_tried}, commands checked against the state of record "
        f"{FIGURES.record_cases}, rows lost {FIGURES.rows_lost}, cases failing {len(failing)}"
    )
    for loss in FIGURES.losses:
        terminalreporter.write_line(f"  rows lost in {loss}")


TEST_POSTGRES_ENV = "BACKFILL_ASSETS_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A database of its own for this session: on the server BACKFILL_ASSETS_TEST_POSTGRES_URL
    names, or on a throwaway server started from the machine's binaries and stopped by PID."""
    import uuid

    from backfill_assets.testing.throwaway_postgres import throwaway_postgres

    name = f"backfill_test_{uuid.uuid4().hex[:10]}"
    given = os.environ.get(TEST_POSTGRES_ENV)
    if given:
        import psycopg
        from psycopg import sql

        db = sql.Identifier(name)
        with psycopg.connect(given, autocommit=True) as con:
            con.execute(sql.SQL("CREATE DATABASE {}").format(db))
        try:
            yield given.rsplit("/", 1)[0] + f"/{name}"
        finally:
            with psycopg.connect(given, autocommit=True) as con:
                con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(db))
        return
    with throwaway_postgres() as server:
        yield server.create_database(name)


@pytest.fixture
def postgres_url(postgres_database: str, request: pytest.FixtureRequest) -> str:
    """A warehouse URL whose schema is this test's own (tests share the session's database); for
    a test with a seed, a database of its own cloned from the worker's template (SeedTemplates)."""
    import uuid

    seed = seed_of(request)
    postgres = (
        "backend" in request.fixturenames and request.getfixturevalue("backend") == "postgres"
    )
    if seed is not None and postgres:
        templates: SeedTemplates = request.getfixturevalue("seed_templates")
        return templates.clone_pg(seed, "warehouse") + f"?schema={PG_SEED_SCHEMA}"
    return f"{postgres_database}?schema=t_{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def defs() -> dg.Definitions:
    from backfill_assets.example.definitions import example_definitions

    return example_definitions()


@pytest.fixture(scope="session")
def tables(defs):
    from backfill_assets.service.tables import backfill_tables

    return backfill_tables(defs)


@pytest.fixture
def warehouse_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv(WAREHOUSE_ENV, str(path))
    return path


@pytest.fixture
def wh(backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Warehouse:
    """The test's warehouse (BACKFILL_ASSETS_WAREHOUSE names it for the runs)."""
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv(WAREHOUSE_ENV, url)
        return open_warehouse(url, lock_timeout_s=5)
    return DuckDBWarehouse(request.getfixturevalue("warehouse_path"), lock_timeout_s=2)


# Not the DefaultRunLauncher: as for runs that execute on other machines (service.plan_runner).
REMOTE_LAUNCHER = {
    "module": "dagster._core.launcher.sync_in_memory_run_launcher",
    "class": "SyncInMemoryRunLauncher",
}


@pytest.fixture
def instance(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[dg.DagsterInstance]:
    """A real Dagster instance: SQLite storage under tmp_path, or (backend "postgres") Dagster's
    PostgreSQL storage in a database of its own on the test server."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    overrides = {}
    if backend == "postgres":
        url = dagster_database(request, home)
        overrides = {"storage": {"postgres": {"postgres_url": dagster_storage_url(url)}}}
    else:
        seed_home(request, home)
    if request.node.get_closest_marker("remote_launcher"):
        overrides = {**overrides, "run_launcher": REMOTE_LAUNCHER}
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as inst:
        yield inst


def dagster_database(request: pytest.FixtureRequest, home: Path) -> str:
    """A database of its own for a test's Dagster storage on the test server: new, or for a
    test with a seed, cloned from the worker's template (marked in `home`, see SeedTemplates)."""
    seed = seed_of(request)
    if seed is None:
        return fresh_database(request.getfixturevalue("postgres_database"), "dagster")
    templates: SeedTemplates = request.getfixturevalue("seed_templates")
    (home / SEED_MARK).write_text(seed)
    return templates.clone_pg(seed, "dagster")


def dagster_storage_url(url: str) -> str:
    """A database URL for dagster-postgres. SQLAlchemy 2.1 drives `postgresql://` with psycopg 3,
    whose server-side parameters break dagster-postgres's `NOTIFY run_events, %(id)s`; name
    psycopg2 (installed with dagster-postgres) explicitly."""
    return url.replace("postgresql://", "postgresql+psycopg2://", 1)


def fresh_database(session_url: str, prefix: str, template: str | None = None) -> str:
    """A new database on the session's server, named `prefix_<random>`, empty or a copy of the
    database `template` (which must have no sessions); its URL."""
    import uuid

    import psycopg
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
    with psycopg.connect(session_url, autocommit=True) as con:
        con.execute(create)
    return session_url.rsplit("/", 1)[0] + f"/{name}"


# -- seeded state: landed sources, the v1 history, its dbt marts ----------------------------------
# Most tests start from the same seeded state. Each xdist worker builds it once per kind and
# backend, with the same real runs and dbt build the fixtures below describe, and each test gets
# a copy of that state made before it is opened: on the embedded backend the DuckDB file and the
# SQLite instance's files, on PostgreSQL the warehouse's and Dagster's databases, cloned.
SEEDS = ("history_with_marts", "history", "landed")  # the first a test uses includes the rest


def seed_of(request: pytest.FixtureRequest) -> str | None:
    """The seed fixture a test uses (the fullest, when it names several)."""
    return next((s for s in SEEDS if s in request.fixturenames), None)


class SeedTemplates:
    """The worker's seeded states, built on first use.

    Embedded: `<root>/<seed>/dagster_home` (a SQLite instance's files) and
    `<root>/<seed>/warehouse.duckdb` (same file name as `warehouse_path`, so that the DuckDB
    catalog the dbt models' views name is the same). PostgreSQL: two template databases on the
    test server, the warehouse (schema PG_SEED_SCHEMA) and Dagster's storage, which a test
    clones with `CREATE DATABASE ... TEMPLATE`."""

    def __init__(self, root: Path, defs: dg.Definitions, request: pytest.FixtureRequest):
        self.root = root
        self.defs = defs
        self.request = request  # the session's, for the test server when a test needs it
        self.pg: dict[str, dict[str, str]] = {}  # seed -> {"warehouse": url, "dagster": url}

    def get(self, seed: str) -> Path:
        where = self.root / seed
        if not (where / "built").exists():
            home = where / "dagster_home"
            home.mkdir(parents=True)
            path = where / "warehouse.duckdb"
            self._build(seed, home, str(path), {}, DuckDBWarehouse(path, lock_timeout_s=2))
            assert not Path(f"{path}.wal").exists(), "the template's warehouse was left open"
            (home / SEED_MARK).write_text(seed)
            (where / "built").touch()
        return where

    def clone_pg(self, seed: str, which: str) -> str:
        """A new database on the test server, cloned from the template `which` of `seed`."""
        import psycopg

        session = self.request.getfixturevalue("postgres_database")
        if seed not in self.pg:
            dagster = fresh_database(session, "seed_dagster")
            warehouse = fresh_database(session, "seed_warehouse")
            home = self.root / f"pg_{seed}"
            home.mkdir(parents=True)
            storage = {"storage": {"postgres": {"postgres_url": dagster_storage_url(dagster)}}}
            url = f"{warehouse}?schema={PG_SEED_SCHEMA}"
            self._build(seed, home, url, storage, open_warehouse(url, lock_timeout_s=5))
            self.pg[seed] = {"warehouse": warehouse, "dagster": dagster}
        template = self.pg[seed][which].rsplit("/", 1)[1]
        with psycopg.connect(session, autocommit=True) as con:
            # A template must have no sessions; the seeding's connections are closed by now,
            # but the server may not have noticed yet.
            con.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (template,),
            )
        return fresh_database(session, which, template=template)

    def _build(self, seed: str, home: Path, url: str, overrides: dict, wh: Warehouse) -> None:
        """The seed's real runs (and dbt build), into the instance at `home` and warehouse `url`."""
        from backfill_assets.example.seed import build_history, land_days, write_history

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(WAREHOUSE_ENV, url)  # the runs and dbt write this warehouse
            with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
                land_days(self.defs, instance, HISTORY_START, HISTORY_END, ROWS_PER_DAY)
                if seed == "history":
                    write_history(instance, wh, HISTORY_START, HISTORY_END, logic="1")
                elif seed == "history_with_marts":
                    build_history(self.defs, instance, wh, HISTORY_START, HISTORY_END, logic="1")


PG_SEED_SCHEMA = "seeded"
SEED_MARK = "backfill_assets_test_seed"


def seed_home(request: pytest.FixtureRequest, home: Path) -> None:
    """Before an embedded test's SQLite instance opens `home`: copy in the worker's template of
    the test's seed, if it uses one. Every `instance` fixture on SQLite storage calls this."""
    seed = seed_of(request)
    if seed is not None:
        templates: SeedTemplates = request.getfixturevalue("seed_templates")
        shutil.copytree(templates.get(seed) / "dagster_home", home, dirs_exist_ok=True)


@pytest.fixture(scope="session")
def seed_templates(
    tmp_path_factory: pytest.TempPathFactory, defs, request: pytest.FixtureRequest
) -> SeedTemplates:
    return SeedTemplates(tmp_path_factory.mktemp("seeds"), defs, request)


def _seed_in(instance: dg.DagsterInstance) -> str | None:
    """The seed the test's instance was copied from (`seed_home`, `dagster_database`), if any."""
    mark = Path(instance.root_directory) / SEED_MARK
    return mark.read_text() if mark.exists() else None


def _seed_warehouse(request: pytest.FixtureRequest, instance: dg.DagsterInstance, wh) -> bool:
    """Whether the test's instance was seeded from the worker's template. On DuckDB the
    template's warehouse is then copied into the test's new file; on PostgreSQL `postgres_url`
    cloned it already."""
    seed = _seed_in(instance)
    if seed is None:
        return False
    if not isinstance(wh, DuckDBWarehouse):
        assert getattr(wh, "schema", None) == PG_SEED_SCHEMA, f"{wh.location} was not seeded"
        return True
    target = Path(wh.path)
    if target.exists():
        raise RuntimeError(
            f"{target} was written before the `{seed}` fixture: the seeded state is copied into "
            "a new file, so request the seed fixture before anything that writes the warehouse"
        )
    templates: SeedTemplates = request.getfixturevalue("seed_templates")
    shutil.copyfile(templates.get(seed) / "warehouse.duckdb", target)
    return True


def _seeded(instance: dg.DagsterInstance, seed: str) -> bool:
    """Whether `landed` copied in a template that holds `seed` already."""
    copied = _seed_in(instance)
    return copied is not None and SEEDS.index(copied) <= SEEDS.index(seed)


@pytest.fixture
def landed(defs, instance, wh, request: pytest.FixtureRequest) -> Warehouse:
    """Source data landed for the whole history window."""
    from backfill_assets.example.seed import land_days

    if not _seed_warehouse(request, instance, wh):
        land_days(defs, instance, HISTORY_START, HISTORY_END, ROWS_PER_DAY)
    return wh


@pytest.fixture
def history(instance, landed) -> Warehouse:
    """orders_daily built for the window by the buggy v1 logic (warehouse write, no dbt)."""
    from backfill_assets.example.seed import write_history

    if not _seeded(instance, "history"):
        write_history(instance, landed, HISTORY_START, HISTORY_END, logic="1")
    return landed


@pytest.fixture
def history_with_marts(defs, instance, landed) -> Warehouse:
    """orders_daily for the window by logic v1, and its dbt marts."""
    from backfill_assets.example.seed import build_history

    if not _seeded(instance, "history_with_marts"):
        build_history(defs, instance, landed, HISTORY_START, HISTORY_END, logic="1")
    return landed


# Planning and execution happen at a fixed "now", inside this window and clear of the daily run.
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
WINDOW = "02:00-23:00"


def make_plan(defs, instance, wh, start: str, end: str, approve: bool = True, **kw):
    """Plan (and approve) a backfill of orders_daily with the project's real planner."""
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.planner import plan_backfill
    from backfill_assets.service.tables import backfill_tables

    tables = kw.pop("tables", None) or backfill_tables(defs)
    request = PlanRequest(
        "orders_daily",
        start,
        end,
        kw.pop("window", WINDOW),
        kw.pop("timezone", "UTC"),
        kw.pop("rollback", "backup"),
        kw.pop("criteria", None),
    )
    plan = plan_backfill(
        request,
        asset_graph=defs.resolve_asset_graph(),
        tables=tables,
        instance=instance,
        warehouse=wh,
        now=kw.pop("now", NOW),
    )
    if approve:
        approve_plan(instance, wh, tables["orders_daily"], plan, "tests")
    return plan
