"""The daemon end to end with the Dagster instance and the warehouse on PostgreSQL: the shipped
dagster.postgres.yaml (dagster-postgres storage) over one database, the warehouse in another,
both on the test server; the same story as tests/e2e/test_daemon.py's Launchpad test.
"""

from collections.abc import Iterator

import pytest

from tests.e2e.test_daemon import Dev, _seed_history, dev_server, launchpad_plan_around_a_daily_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, postgres_database: str) -> Iterator[Dev]:
    tmp = tmp_path_factory.mktemp("e2e-postgres")
    with dev_server(tmp, _seed_history, postgres=postgres_database) as (d, _):
        yield d


def test_on_postgres_a_plan_started_from_the_launchpad_completes_around_a_daily_run(dev):
    assert dev.warehouse.startswith("postgresql://")
    assert type(dev.instance.run_storage).__name__ == "PostgresRunStorage"
    launchpad_plan_around_a_daily_run(dev)
