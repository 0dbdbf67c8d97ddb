"""The code location loads, and Dagster's lineage graph is the one the planner relies on."""

import datetime as dt

import dagster as dg

from backfill_assets.constants import GATE_NAMES


def _parents(defs: dg.Definitions, key: str) -> set[str]:
    node = defs.resolve_asset_graph().get(dg.AssetKey(key))
    return {k.to_user_string() for k in node.parent_keys}


def test_definitions_load_with_every_job_and_sensor(defs):
    jobs = {j.name for j in defs.resolve_all_job_defs()}
    assert {"orders_daily_job", "orders_weekly_marts_job", "land_raw_orders_job"} <= jobs
    sensors = {s.name for s in defs.sensors or []}
    assert {"orders_daily_sensor", "orders_weekly_refresh_sensor"} <= sensors


def test_lineage_runs_from_source_through_target_to_every_dbt_model(defs):
    assert _parents(defs, "orders_daily") == {"raw_orders", "fx_rates"}
    assert "orders_daily" in _parents(defs, "stg_orders")
    assert "orders_daily" in _parents(defs, "fct_daily_revenue")
    assert _parents(defs, "fct_weekly_revenue") == {"fct_daily_revenue"}
    assert "stg_orders" in _parents(defs, "dim_customers")
    assert "orders_daily" in _parents(defs, "orders_daily__shadow")


def test_downstream_of_target_found_through_the_graph_includes_dbt_models(defs):
    graph = defs.resolve_asset_graph()
    down = dg.AssetSelection.assets("orders_daily").downstream(include_self=False).resolve(graph)
    names = {k.to_user_string() for k in down}
    assert {"stg_orders", "fct_daily_revenue", "fct_weekly_revenue", "dim_customers"} <= names


def test_weekly_model_is_partitioned_by_iso_week_starting_monday(defs):
    node = defs.resolve_asset_graph().get(dg.AssetKey("fct_weekly_revenue"))
    keys = node.partitions_def.get_partition_keys()
    assert keys[0] == "2024-12-30"
    assert {dt.date.fromisoformat(k).weekday() for k in keys} == {0}  # every key is a Monday


def test_shadow_asset_carries_every_gate_as_a_blocking_partitioned_check(defs):
    specs = {s.name: s for s in defs.resolve_assets_def("orders_daily__shadow").check_specs}
    assert set(specs) == set(GATE_NAMES)
    assert all(s.blocking for s in specs.values())
    assert all(s.partitions_def is not None for s in specs.values())


def test_no_op_or_check_of_the_framework_loads_an_input_from_an_io_manager(defs):
    # Dagster finds a function's context by its parameter's name; the downstream check's was
    # named otherwise, so Dagster made it an input loaded from the shadow's IO manager, and
    # executing the check from the UI failed before it ran. Every input of the framework's ops
    # and checks is an ordering dependency (Nothing), never a value to load.
    from backfill_assets.example.declaration import ORDERS

    nodes = [c.node_def for c in defs.asset_checks or []]
    nodes += [n.definition for j in defs.resolve_all_job_defs() for n in j.graph.node_dict.values()]
    ours = [n for n in nodes if ORDERS.spec.name in n.name]  # its shadow's, swap's, rollback's
    assert len(ours) >= 4, [n.name for n in nodes]
    loaded = {(n.name, i.name) for n in ours for i in n.input_defs if not i.dagster_type.is_nothing}
    assert loaded == set()
