"""Names that cross module boundaries: tags, check names, suffixes, pool keys. One place only."""

TAG_PREFIX = "backfill_assets"

# Run tags.
PLAN_ID_TAG = f"{TAG_PREFIX}/plan_id"
BATCH_TAG = f"{TAG_PREFIX}/batch"
ROLE_TAG = f"{TAG_PREFIX}/role"  # "daily", "batch", "swap", "rollback", "refresh"
# Shared by the daily production run and every backfill run of a table: dagster.yaml limits it to
# one run in progress at a time, so the instance itself keeps them from overlapping.
WRITER_TAG = f"{TAG_PREFIX}/writer"

ROLE_DAILY = "daily"
ROLE_BATCH = "batch"
ROLE_SWAP = "swap"
ROLE_ROLLBACK = "rollback"
ROLE_REFRESH = "refresh"

# Dagster's own tags for a ranged (single-run) partition backfill.
PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"

# Gate (asset check) names on every shadow asset.
ROW_COUNT_CHECK = "row_count_gate"
SAMPLE_CHECK = "sample_gate"
INVARIANTS_CHECK = "invariants_gate"
GATE_NAMES = (ROW_COUNT_CHECK, SAMPLE_CHECK, INVARIANTS_CHECK)

# Physical names.
SHADOW_SUFFIX = "__shadow"
BACKUP_INFIX = "__backup__"
WEEK_INFIX = "__w"
TEMPLATE_SUFFIX = "__template"
METADATA_SCHEMA = "backfill_meta"

# Dagster asset holding approved plans, one dynamic partition per plan id.
PLANS_ASSET = "backfill_plans"
PLANS_PARTITIONS = "backfill_plans"

PLAN_SCHEMA_VERSION = 1

# Dagster concurrency pool shared by every step that writes a backfillable table's storage (the
# daily target write, shadow batches, swap, rollback). dagster.yaml limits pools to one slot, so
# even runs launched by hand from the UI never write concurrently.
WRITER_POOL = "backfill_assets_writer"
