"""Names that cross module boundaries: tags, check names, job and sensor names, suffixes, keys.

One place only: every other module builds these names by calling what is here.
"""

TAG_PREFIX = "backfill_assets"

# Run tags.
PLAN_ID_TAG = f"{TAG_PREFIX}/plan_id"
BATCH_TAG = f"{TAG_PREFIX}/batch"
ROLE_TAG = f"{TAG_PREFIX}/role"  # one of the ROLE_* values below
# Every run that writes a table (batches, swap, rollback, refresh; the daily job if its author tags
# it) carries `writer=<table>`. The shipped dagster.yaml limits it to one run in progress per
# value, so runs of one table queue behind each other and other tables are not held up.
WRITER_TAG = f"{TAG_PREFIX}/writer"
# The rows a batch was estimated to write: the next plan fits seconds per row from these.
ROWS_TAG = f"{TAG_PREFIX}/estimated_rows"
# Set on runs this package executes in its own process (the CLI), so a later command can tell a
# run whose process died (SIGKILL, OOM) from one that is still going.
PID_TAG = f"{TAG_PREFIX}/pid"
HOST_TAG = f"{TAG_PREFIX}/host"
# With the pid: when that process started (boot id and start time), so that a pid reused by a
# later process does not pass for the run's (service.lease.process_start).
PROCESS_TAG = f"{TAG_PREFIX}/process"
# Set on a run marked failed because its process was found dead: it was interrupted (a crash, a
# restart), so the batch driver runs that batch again instead of halting the plan.
REAPED_TAG = f"{TAG_PREFIX}/reaped"

ROLE_DAILY = "daily"
ROLE_BATCH = "batch"
ROLE_SWAP = "swap"
ROLE_ROLLBACK = "rollback"
ROLE_REFRESH = "refresh"
# The daemon's run of a started plan: its batches one after another, each a run of its own
# (service.plan_runner).
ROLE_RUNNER = "runner"

# Dagster's own tags.
PARTITION_TAG = "dagster/partition"
PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"
PRIORITY_TAG = "dagster/priority"
CODE_VERSION_TAG = "dagster/code_version"

# Gate (asset check) names on every shadow asset.
ROW_COUNT_CHECK = "row_count_gate"
SAMPLE_CHECK = "sample_gate"
INVARIANTS_CHECK = "invariants_gate"
# The diff of the shadow against the live rows, recorded per partition; it fails only on the
# thresholds the criteria declare (criteria.diff).
DIFF_CHECK = "diff_gate"
# The gates of every plan's batches; a plan built before the diff gate has these alone.
CORE_GATES = (ROW_COUNT_CHECK, SAMPLE_CHECK, INVARIANTS_CHECK)
GATE_NAMES = (*CORE_GATES, DIFF_CHECK)
# On a target asset: true when its swap builds its impacted dbt models in shadow and publishes
# them with it (backfill_definitions(..., downstream_dbt=...)).
DOWNSTREAM_DBT_METADATA_KEY = "backfill_assets/downstream_dbt"
# The swap's own gate, on the whole plan: the impacted dbt models' tests, run on their shadows.
DOWNSTREAM_CHECK = "downstream_dbt_tests"

# Physical names.
SHADOW_SUFFIX = "__shadow"
BACKUP_INFIX = "__backup__"
WEEK_INFIX = "__w"
# PostgreSQL: the ISO-year table between the target and its weeks (orders_daily__y2026).
YEAR_INFIX = "__y"
TEMPLATE_SUFFIX = "__template"
# DuckDB: the table holding every live row that no week table overrides (orders_daily__base).
BASE_SUFFIX = "__base"
METADATA_SCHEMA = "backfill_meta"

# Dagster asset holding plans, one dynamic partition per plan id.
PLANS_ASSET = "backfill_plans"
PLANS_PARTITIONS = "backfill_plans"
# The plans approved and not yet swapped, abandoned or rolled back: what the batch drivers drive.
# An index kept in the instance (dynamic partitions), so a driver tick reads only these however
# many plans the instance has recorded.
ACTIVE_PLANS_PARTITIONS = "backfill_active_plans"
PLAN_SCHEMA_VERSION = 1

# The target asset's definition metadata holds its BackfillableTable under this key: the CLI and
# the sensors find the tables of any code location from its assets (as dagster-dbt finds its
# manifest), never from a module-level registry.
TABLE_METADATA_KEY = f"{TAG_PREFIX}/table"
# The warehouse resource every framework asset, op and sensor uses.
WAREHOUSE_RESOURCE_KEY = "backfill_warehouse"

# Jobs shared by every table (the Launchpad's control plane).
PLAN_JOB = "plan_backfill_job"
APPROVE_JOB = "approve_backfill_job"
START_JOB = "start_backfill_plan_job"
PAUSE_JOB = "pause_backfill_plan_job"
PLAN_OP = "plan_backfill_op"
APPROVE_OP = "approve_backfill_op"
START_OP = "start_backfill_plan"
PAUSE_OP = "pause_backfill_plan"
ADOPT_JOB = "adopt_table_job"
ADOPT_OP = "adopt_table_op"
REVIEW_JOB = "review_backfill_plan_job"
REVIEW_OP = "review_backfill_plan"


def shadow_job(table: str) -> str:
    """One backfill batch of `table`: write its shadow partitions, then every gate."""
    return f"{table}__shadow_job"


def runner_job(table: str) -> str:
    """The batch driver's run of a started plan of `table`: batch after batch while they may."""
    return f"{table}__plan_runner_job"


def swap_job(table: str) -> str:
    return f"{table}__swap_job"


def rollback_job(table: str) -> str:
    return f"{table}__rollback_job"


def swap_op(table: str) -> str:
    return f"{table}__swap"


def rollback_op(table: str) -> str:
    return f"{table}__rollback"


def driver_sensor(table: str) -> str:
    """Launches the next batch of `table`'s started plan, inside its window."""
    return f"{table}__batch_driver"


def refresh_sensor(table: str) -> str:
    """Refreshes the downstream of `table` after a swap or rollback launched from the UI."""
    return f"{table}__refresh_after_swap"


def swap_run_config(table: str, kind: str, plan_id: str, downstream: bool = True) -> dict:
    """Run config of a swap or rollback job (`kind`) acting on `plan_id`; `downstream=False`:
    the swap publishes the target alone."""
    if kind != ROLE_SWAP:
        return {"ops": {rollback_op(table): {"config": {"plan_id": plan_id}}}}
    return {"ops": {swap_op(table): {"config": {"plan_id": plan_id, "downstream": downstream}}}}
