"""The Dagster UI path, in a real browser: what a user reads and clicks, end to end.

The tests share one server (tests/ui/conftest.py `story`) and run in file order, like a user's
session: first they read the seeded state (lineage, gates, the plan), then they act on it by
clicks (the target's own Materialize button, refused with a proposed plan; a refused swap; the
fix, then the plan started and going around a daily run; a batch launched by hand queued behind
a daily run; the swap).
Each one saves the screenshots docs/ui.md shows.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from playwright.sync_api import Locator, Page, ViewportSize, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from backfill_assets.constants import (
    BATCH_TAG,
    PLAN_ID_TAG,
    PLAN_JOB,
    PLAN_OP,
    REVIEW_JOB,
    REVIEW_OP,
    ROLE_DAILY,
    ROLE_RUNNER,
    ROLE_TAG,
    START_JOB,
    WRITER_TAG,
    driver_sensor,
)
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.seed import land_days
from backfill_assets.lib.review.chart import CHART_ALT
from backfill_assets.lib.states import IN_PROGRESS_RUN_STATUSES
from backfill_assets.service.lease import acquire_writer, holder_for_command
from backfill_assets.service.plans import load_plan, plan_statuses
from backfill_assets.service.stale import find_stale
from tests.e2e.test_daemon import (
    RUN_TIMEOUT_S,
    defs,
    plan_runs,
    quiet_checksums,
    step_failure,
    wait_for,
)
from tests.ui.story import ROWS_PER_DAY, Story

pytestmark = [pytest.mark.browser, pytest.mark.slow]

Shot = Callable[[Page, str], Path]
LOCATION = "backfill_assets"
DRIVER_SENSOR = driver_sensor(ORDERS.key)
RUN_URL = re.compile(r"/runs/([0-9a-f-]{36})")
RUN_TIMEOUT_MS = RUN_TIMEOUT_S * 1000
# Every asset of the example's lineage, and the groups the graph expands to show them.
LINEAGE = (
    "raw_orders",
    "fx_rates",
    "orders_daily",
    "orders_daily__shadow",
    "stg_orders",
    "dim_customers",
    "fct_daily_revenue",
    "fct_weekly_revenue",
)
GROUPS = ("sources", "orders", "marts")
PLAN_SECTIONS = (
    "1. Criteria (written first)",
    "2. Downstream impact",
    "3. Cost and contention",
    "4. Batches",
    "Rollback",
    "Timeline",
)
SWAP_JOB, SWAP_OP = "orders_daily__swap_job", "orders_daily__swap"
TALL = ViewportSize(width=1440, height=1300)


# -- what a user does, in UI terms ---------------------------------------------------------------


def open_launchpad(
    page: Page, story: Story, job: str, config: str = "", partition: str = ""
) -> None:
    """Open a job's Launchpad, pick a partition and type the run config (YAML) by hand."""
    page.goto(story.url(f"/locations/{LOCATION}/jobs/{job}/playground"))
    if partition:
        pick_partition(page, partition)
    if config:
        page.locator(".CodeMirror").click()  # the config editor (CodeMirror; no test ids)
        page.keyboard.press("Control+A")
        page.keyboard.type(config)
    expect(page.get_by_text("No errors", exact=True)).to_be_visible()


def pick_partition(page: Page, partition: str, attempts: int = 3) -> None:
    """Type a partition key into the Launchpad's partition box and take the suggestion.

    While the partition keys load, the Launchpad shows a placeholder box that it then replaces
    with a new one: text typed into the first is lost and the new box's list never opens (seen
    in CI). The loaded box is the one with the sort button, so wait for that first. On a loaded
    machine Enter could also land while the list was still the unfiltered one, which kept the
    first partition; so each attempt focuses the box afresh (the list opens on focus), types,
    and waits for the key to be suggested and then taken."""
    expect(page.get_by_role("button", name="sort_by_alpha")).to_be_visible()
    box = page.get_by_placeholder("Partition")
    for attempt in range(attempts):
        box.blur()
        box.click()
        box.fill(partition)
        try:
            expect(page.get_by_text(partition, exact=True).first).to_be_visible(timeout=10_000)
            box.press("Enter")
            expect(box).to_have_value(partition, timeout=5_000)
            return
        except AssertionError:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")


def add_launch_tags(page: Page, tags: dict[str, str]) -> None:
    """In the Launchpad, click Edit tags, type each tag in an empty Key/Value row, then Apply."""
    page.get_by_role("button", name="Edit tags").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Add tags to run")
    keys, values = dialog.get_by_placeholder("Tag Key"), dialog.get_by_placeholder("Tag Value")
    for key, value in tags.items():
        if keys.last.input_value():  # the dialog opens with one empty row, or the session's tags
            dialog.get_by_role("button", name="Add custom tag").click()
        keys.last.fill(key)
        values.last.fill(value)
    dialog.get_by_role("button", name="Apply").click()
    expect(dialog).to_be_hidden()


def click_launch(page: Page) -> str:
    """Click Launch Run; the UI opens the new run's page. Return its run id."""
    page.bring_to_front()
    page.get_by_role("button", name="Launch Run").click()
    try:
        page.wait_for_url(RUN_URL)
    except PlaywrightTimeoutError:
        pytest.fail(f"Launch Run opened no run page; the page says:\n{page.inner_text('body')}")
    found = RUN_URL.search(page.url)
    assert found is not None
    return found.group(1)


def run_status(page: Page, status: str) -> None:
    """Wait for the run page's status tag (Queued, Started, Success, Failure...)."""
    expect(page.get_by_text(status, exact=True).first).to_be_visible(timeout=RUN_TIMEOUT_MS)


def filter_logs(page: Page, query: str) -> None:
    box = page.get_by_placeholder(re.compile("^Filter"))
    box.fill(query)
    box.press("Enter")


def section(page: Page, heading: str) -> Locator:
    """The column under a heading of an asset's overview (e.g. "Upstream assets")."""
    return page.get_by_text(heading, exact=True).locator("xpath=..")


def metadata_row(page: Page, label: str) -> Locator:
    """A row of the metadata table of an asset partition's latest materialization."""
    return page.locator("tr", has=page.get_by_text(label, exact=True)).first


def run_row(page: Page, run_id: str) -> Locator:
    """A run's row in the runs list: the innermost element holding both its links (the id and
    "View"); the list is a grid of divs without roles or test ids."""
    link = f".//a[@href='/runs/{run_id}']"
    return page.locator(f"xpath=//div[count({link})=2][not(.//div[count({link})=2])]")


def graph_label(key: str) -> re.Pattern[str]:
    """A node's label in the asset graph, which middle-truncates long ones at low zoom
    ("orders_da…__shadow")."""
    head, tail = re.escape(key[:9]), re.escape(key[-8:])
    return re.compile(rf"^({re.escape(key)}|{head}…{tail})$")


def plan_config(op: str, plan_id: str) -> str:
    return f"ops: {{{op}: {{config: {{plan_id: {plan_id}}}}}}}"


def status_of(story: Story, run_id: str) -> dg.DagsterRunStatus | None:
    run = story.dev.instance.get_run_by_id(run_id)
    return run.status if run else None


def run_story(story: Story, run_id: str) -> str:
    """A run's status and its event log, for a failure's message: what the UI cannot say."""
    instance = story.dev.instance
    run = instance.get_run_by_id(run_id)
    lines = [f"run {run_id[:8]} ({run.job_name if run else '?'}): {run.status if run else None}"]
    for rec in instance.all_logs(run_id):
        kind = rec.dagster_event.event_type_value if rec.dagster_event else "LOG"
        lines.append(f"  {dt.datetime.fromtimestamp(rec.timestamp, dt.UTC):%H:%M:%S.%f} {kind}")
        if rec.user_message:
            lines[-1] += f" {rec.user_message[:300]}"
    return "\n".join(lines)


def nothing_in_progress(story: Story) -> bool:
    return not story.dev.instance.get_runs(
        filters=dg.RunsFilter(statuses=list(IN_PROGRESS_RUN_STATUSES)), limit=1
    )


# -- 1. lineage ----------------------------------------------------------------------------------


def test_the_lineage_shows_the_source_the_target_its_shadow_and_the_dbt_models(
    story: Story, page: Page, shot: Shot
):
    expanded = ",".join(f"global@global:{g}" for g in GROUPS)
    page.goto(story.url(f"/asset-groups?expanded={expanded}"))
    for key in LINEAGE:
        expect(page.get_by_text(graph_label(key)).filter(visible=True).first).to_be_visible()
    shot(page, "ui-lineage")

    # The edges, as each asset's overview lists them.
    expected = {
        "orders_daily": (
            {"raw_orders", "fx_rates"},
            {"orders_daily__shadow", "fct_daily_revenue", "stg_orders"},
        ),
        "orders_daily__shadow": ({"raw_orders", "fx_rates", "orders_daily"}, set()),
        "fct_daily_revenue": ({"orders_daily"}, {"fct_weekly_revenue"}),
        "stg_orders": ({"orders_daily"}, {"dim_customers"}),
    }
    for key, (upstream, downstream) in expected.items():
        page.goto(story.url(f"/assets/{key}"))
        for heading, keys in (("Upstream assets", upstream), ("Downstream assets", downstream)):
            column = section(page, heading)
            for k in keys:
                expect(column.locator(f"a[href='/assets/{k}']")).to_be_visible()
            hrefs = {a.get_attribute("href") for a in column.locator("a").all()}
            assert hrefs == {f"/assets/{k}" for k in keys}, (key, heading)


# -- 2. gates ------------------------------------------------------------------------------------


def test_the_shadow_shows_each_gate_per_partition_and_a_failed_gates_mismatching_rows(
    story: Story, page: Page, shot: Shot
):
    plan, bad = story.plan, story.bad_day.isoformat()
    page.set_viewport_size(TALL)  # the failed partition's row is the 7th of the history
    page.goto(story.url("/assets/orders_daily__shadow?view=checks"))
    gates = {"row_count_gate": "Succeeded", "sample_gate": "Failed", "invariants_gate": "Succeeded"}
    for gate, status in gates.items():
        entry = page.locator("span", has=page.get_by_title(gate, exact=True)).first
        expect(entry).to_contain_text(status)

    page.goto(story.url("/assets/orders_daily__shadow?view=checks&checkDetail=sample_gate"))
    page.get_by_role("tab", name="Execution history").click()
    # One evaluation per partition of the batches that ran (1 and 2), newest first.
    for day in (*plan.batches[0].partitions, *plan.batches[1].partitions):
        row = page.locator("tr", has=page.get_by_text(day, exact=True))
        expect(row.first).to_contain_text("Failed" if day == bad else "Passed")
    failed = page.locator("tr", has=page.get_by_text(bad, exact=True)).first
    expect(failed).to_contain_text("unchanged columns differ: gross_amount")
    shot(page, "ui-gates")

    failed.get_by_role("button").click()  # the row's metadata
    metadata = page.get_by_role("dialog")
    expect(metadata.locator("tr", has_text="mismatch_rate")).to_contain_text("0.1")
    expect(metadata.locator("tr", has_text="sampled_rows")).to_contain_text("200")
    shot(page, "ui-gate-failed-metadata")
    metadata.get_by_text("[Show Markdown]").click()
    # The sampled rows that differ: the key, then each differing column in the shadow and in the
    # target (target_*).
    table = page.locator("table", has=page.get_by_role("columnheader", name="target_gross_amount"))
    expect(table.get_by_role("columnheader", name="gross_amount", exact=True)).to_be_visible()
    rows = table.locator("tbody tr")
    expect(rows.first).to_contain_text(bad)
    assert rows.count() == 20  # 1 in 10 of the 200 orders of the day
    shot(page, "ui-gate-failed-rows")


# -- 3. the plan ---------------------------------------------------------------------------------


def test_a_plan_reads_as_markdown_on_the_backfill_plans_asset(
    story: Story, page: Page, shot: Shot, screenshot_dir: Path
):
    plan = story.plan
    page.set_viewport_size(TALL)  # the whole plan, down to its timeline
    page.goto(story.url(f"/assets/backfill_plans?view=partitions&partition={plan.plan_id}"))
    expect(metadata_row(page, "status")).to_contain_text("approved")
    # The batches as a Dagster table, rendered in place: one row per batch.
    batches = metadata_row(page, "batches_table")
    for batch in plan.batches:
        expect(batches).to_contain_text(batch.start.isoformat())
        expect(batches).to_contain_text(batch.end.isoformat())
    expect(batches).to_contain_text("row_count_gate, sample_gate, invariants_gate, diff_gate")
    metadata_row(page, "plan_markdown").get_by_text("[Show Markdown]").click()
    md = page.get_by_role("dialog")
    expect(md.get_by_role("heading", level=1)).to_contain_text(
        f"Backfill plan {plan.plan_id}: orders_daily {plan.start}..{plan.end}"
    )
    for heading in PLAN_SECTIONS:
        expect(md.get_by_role("heading", name=heading)).to_be_visible()
    for impacted in ("fct_daily_revenue", "fct_weekly_revenue", "stg_orders", "dim_customers"):
        expect(md.get_by_role("cell", name=impacted)).to_be_visible()
    for batch in plan.batches:
        expect(md.get_by_role("cell", name=f"{batch.start}..{batch.end}")).to_be_visible()
    shot(page, "ui-plan-markdown")
    # The timeline picture renders as a monospaced block: the hour scale, then one row a day
    # with the daily run's slot (D) and the batches (their numbers, or # when they share a cell).
    picture = md.locator("pre").filter(has_text="00    03    06    09    12")
    expect(picture).to_be_visible()
    expect(picture).to_contain_text("D")
    text = picture.inner_text()
    rows = [line for line in text.splitlines() if line[:4].isdigit()]
    assert rows and all(len(line.split("  ", 1)[1]) == 48 for line in rows)
    assert any(ch in "".join(rows) for ch in "#123456789")
    # A picture of just the timeline: from its heading down to the lines under the picture.
    top = md.get_by_role("heading", name="Timeline").bounding_box()
    bottom = md.locator("pre").last.bounding_box()
    assert top is not None and bottom is not None
    clip = {
        "x": top["x"] - 16,
        "y": top["y"] - 12,
        "width": max(bottom["width"], top["width"]) + 32,
        "height": bottom["y"] + bottom["height"] - top["y"] + 24,
    }
    page.screenshot(path=str(screenshot_dir / "ui-plan-timeline.png"), clip=clip)  # type: ignore[arg-type]


# -- 4. the target's own Materialize button ------------------------------------------------------


def test_materializing_the_target_from_its_page_writes_nothing_and_proposes_a_plan(
    story: Story, page: Page, shot: Shot
):
    """The asset page's Materialize button is the obvious way to "just re-run" old days. It
    launches a backfill of the target; its run is refused before anything is written, says why,
    and leaves a proposed plan for the same range on backfill_plans."""
    dev = story.dev
    # Three days of history right before the story's plan. Its first day moves with the weekday
    # (21-27 days ago); a fixed 27 days ago was its first batch on Fridays, whose run then passed.
    end = story.plan.start - dt.timedelta(days=1)
    start = end - dt.timedelta(days=2)
    before = quiet_checksums(dev, start, end)
    proposed_before = set(proposed_plans(story))

    page.goto(story.url(f"/assets/{ORDERS.key}"))
    page.get_by_role("button", name="Materialize…").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Launch runs to materialize {ORDERS.key}")
    # The partition selection opens empty ("No matching partitions"); type the range.
    box = dialog.get_by_placeholder("No matching partitions")
    box.fill(f"[{start}...{end}]")
    box.press("Enter")
    expect(dialog.get_by_text("3 partitions", exact=True)).to_be_visible()
    shot(page, "ui-target-materialize")
    dialog.get_by_role("button", name="Launch backfill").click()
    expect(dialog).to_be_hidden()

    def refused_run() -> dg.DagsterRun | None:
        runs = dev.instance.get_runs(
            dg.RunsFilter(tags={"dagster/asset_partition_range_start": start.isoformat()})
        )
        # The backfill's run alone: a batch run of a plan starting that day has no backfill id.
        done = [r for r in runs if r.is_finished and "dagster/backfill" in r.tags]
        return done[0] if done else None

    run = wait_for("the backfill's run to finish", refused_run, 3 * RUN_TIMEOUT_S, dev)
    assert run.status == dg.DagsterRunStatus.FAILURE
    why = step_failure(dev, run.run_id)
    assert why.startswith(f"Refused: this run of {run.job_name} would write the live table")
    new = set(proposed_plans(story)) - proposed_before
    assert len(new) == 1, (why, new)
    plan_id = new.pop()

    # The run's page says why, and what to do instead.
    page.goto(story.url(f"/runs/{run.run_id}"))
    run_status(page, "Failure")
    filter_logs(page, "type:STEP_FAILURE")
    expect(page.get_by_text("would write the live table").first).to_be_visible()
    expect(page.get_by_text(f"Plan {plan_id} (proposed) covers that range instead").first)\
        .to_be_visible()  # fmt: skip
    shot(page, "ui-target-refused")

    # The proposal is on backfill_plans, for review and approval.
    page.goto(story.url(f"/assets/backfill_plans?view=partitions&partition={plan_id}"))
    expect(metadata_row(page, "status")).to_contain_text("proposed")
    assert quiet_checksums(dev, start, end) == before  # the live table is unchanged


def proposed_plans(story: Story) -> list[str]:
    return [
        pid
        for pid, (target, status) in plan_statuses(story.dev.instance).items()
        if target == ORDERS.key and status == "proposed"
    ]


# -- 5. a refused swap ---------------------------------------------------------------------------


def test_a_swap_launched_from_the_launchpad_is_refused_while_a_gate_has_failed(
    story: Story, page: Page, shot: Shot
):
    plan = story.plan
    open_launchpad(page, story, SWAP_JOB, plan_config(SWAP_OP, plan.plan_id))
    run_id = click_launch(page)
    run_status(page, "Failure")
    filter_logs(page, "type:STEP_FAILURE")
    expect(page.get_by_text(f"plan {plan.plan_id} cannot be swapped").first).to_be_visible()
    expect(page.get_by_text(f"{story.bad_day} sample_gate failed").first).to_be_visible()
    shot(page, "ui-swap-refused")
    assert status_of(story, run_id) == dg.DagsterRunStatus.FAILURE


# -- 6. the fix, then the plan started from the UI, going around the daily run -------------------


def test_a_plan_started_from_the_launchpad_runs_its_batches_around_the_daily_run(
    story: Story, page: Page, shot: Shot
):
    dev, plan = story.dev, story.plan
    # The fix, from this process: re-land the restated day from the source of truth. The
    # server's runs write the same DuckDB file, so only while none is in progress.
    wait_for("no run in progress", lambda: nothing_in_progress(story), RUN_TIMEOUT_S, dev)
    land_days(defs, dev.instance, story.bad_day, story.bad_day, ROWS_PER_DAY)

    # The daily run's Launchpad, ready in a second tab: its partition is a landed day outside
    # the plan.
    daily_page = page.context.new_page()
    open_launchpad(daily_page, story, "orders_daily_job", partition=story.daily_day.isoformat())

    # Start the plan (approving alone launches nothing); the batch driver then launches the
    # plan's runner run, which runs batches 2 and 3 one after the other, each a run of its own
    # (service.plan_runner). On this small table a batch lasts a second: to launch the daily run
    # while the runner is in progress, the test takes the table's writer lease first, as a
    # command would, so the runner waits for it before batch 2.
    wh = dev.wh()
    hold = holder_for_command("ui test: holds the runner before batch 2")
    acquire_writer(dev.instance, wh, plan.target, hold, wait_s=30)
    try:
        open_launchpad(page, story, START_JOB, plan_config("start_backfill_plan", plan.plan_id))
        start_id = click_launch(page)

        def runner_waiting() -> dg.DagsterRun | None:
            # Started is not enough: a daily run created before the runner's step decides makes
            # it yield at once (ci30, ci34: its log said "daily run … in progress"). Once it
            # logged its launch of batch 2 it waits for the lease this test holds.
            for rec in plan_runs(dev, plan.plan_id, ROLE_RUNNER):
                run = rec.dagster_run
                if run.status == dg.DagsterRunStatus.STARTED and any(
                    "launching batch 2" in (e.user_message or "")
                    for e in dev.instance.all_logs(run.run_id)
                ):
                    return run
            return None

        runner = wait_for("the plan's runner to launch batch 2", runner_waiting, RUN_TIMEOUT_S, dev)
        # A daily run launched now waits in the queue: the instance runs one writer at a time,
        # and the runner holds the table's writer slot. (The other way round never happens:
        # the driver launches no runner, and a runner starts no batch, while a daily run is
        # queued or running; see below.)
        daily_id = click_launch(daily_page)
        page.goto(story.url("/runs"))
        try:
            expect(run_row(page, daily_id)).to_contain_text("Queued")
        except AssertionError as e:  # say what the runner did, which the UI cannot
            stories = "\n".join(run_story(story, r) for r in (runner.run_id, daily_id))
            raise AssertionError(f"{e}\n{stories}") from None
        expect(run_row(page, start_id)).to_contain_text("Success")
        runner_row = run_row(page, runner.run_id)
        expect(runner_row).to_contain_text(f"{PLAN_ID_TAG}: {plan.plan_id}")
        expect(runner_row).to_contain_text(f"{ROLE_TAG}: {ROLE_RUNNER}")
        expect(runner_row).to_contain_text(DRIVER_SENSOR[:12])  # launched by the driver sensor
        shot(page, "ui-runs-queue")
        run_row(page, daily_id).get_by_text("View queue criteria").click()
        criteria = page.get_by_role("dialog")
        expect(criteria).to_contain_text("backfill_assets/writer")
        shot(page, "ui-queue-criteria")
    finally:
        wh.release_writer(plan.target, hold.holder_id)

    # While the daily run runs, the driver launches no batch, and each tick says why.
    wait_for(
        "the daily run to start",
        lambda: status_of(story, daily_id) == dg.DagsterRunStatus.STARTED,
        2 * RUN_TIMEOUT_S,
        dev,
    )
    waiting = f"daily run {daily_id[:8]} (daily, started) in progress; a batch never overlaps it"
    page.goto(story.url(f"/locations/{LOCATION}/sensors/{DRIVER_SENSOR}"))

    def latest_tick_says_it_waits() -> bool:
        if status_of(story, daily_id) != dg.DagsterRunStatus.STARTED:
            pytest.fail("the daily run ended before a driver tick saw it")
        page.reload()
        # The newest tick's result opens a dialog with the skip reason.
        page.get_by_role("button", name=re.compile(r"^\d+ runs? requested$")).first.click()
        tick = page.get_by_role("dialog")
        expect(tick).to_contain_text(re.compile("Skip reason|Run requests|requested"))
        if waiting in tick.inner_text():
            return True
        tick.get_by_role("button", name="Close").click()
        return False

    wait_for("a driver tick waiting for the daily run", latest_tick_says_it_waits, 60, dev)
    shot(page, "ui-driver-waits")

    # Once the daily run is done, batch 3 runs; every batch run is tagged with plan and batch.
    def batches_passed() -> list[dg.RunRecord] | None:
        recs = [r for r in plan_runs(dev, plan.plan_id) if r.dagster_run.tags.get(BATCH_TAG)]
        done = [r for r in recs if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS]
        return done if {r.dagster_run.tags[BATCH_TAG] for r in done} == {"1", "2", "3"} else None

    passed = wait_for("batches 2 and 3 to pass", batches_passed, 3 * RUN_TIMEOUT_S, dev)
    page.goto(story.url(f"/runs?q%5B0%5D=tag%3A{PLAN_ID_TAG}%3D{plan.plan_id}"))
    for rec in passed:
        row = run_row(page, rec.dagster_run.run_id)
        expect(row).to_contain_text(f"{BATCH_TAG}: {rec.dagster_run.tags[BATCH_TAG]}")
        expect(row).to_contain_text("Success")
    shot(page, "ui-batch-runs")

    # The record behind the screenshots: the daily run was queued while the runner held the
    # writer slot and started after it ended, before batch 2; batches 2 and 3 were created only
    # after the daily run had finished, by the driver's next runner.
    instance = dev.instance
    daily = instance.get_run_record_by_id(daily_id)
    first_runner = instance.get_run_record_by_id(runner.run_id)
    assert daily and first_runner and daily.dagster_run.tags.get(ROLE_TAG) == ROLE_DAILY
    assert daily.dagster_run.status == dg.DagsterRunStatus.SUCCESS
    assert first_runner.dagster_run.status == dg.DagsterRunStatus.SUCCESS  # ended: not now
    assert first_runner.end_time and daily.start_time and daily.end_time
    assert daily.create_timestamp.timestamp() < first_runner.end_time <= daily.start_time
    for n in ("2", "3"):
        rec = next(r for r in passed if r.dagster_run.tags[BATCH_TAG] == n)
        assert rec.create_timestamp.timestamp() >= daily.end_time
    assert status_of(story, start_id) == dg.DagsterRunStatus.SUCCESS


def test_a_batch_launched_from_the_launchpad_waits_queued_while_a_daily_run_is_in_progress(
    story: Story, page: Page, shot: Shot
):
    """The driver never submits a batch while a daily run is in progress, so the last test never
    shows a batch in the queue. A batch run launched by hand shows it: the instance, not only the
    driver, keeps a batch from overlapping the daily run."""
    dev, plan = story.dev, story.plan
    wait_for("no run in progress", lambda: nothing_in_progress(story), RUN_TIMEOUT_S, dev)
    # A day of batch 3 (the plan has passed: re-running it is idempotent and its gates pass).
    batch, day = plan.batches[-1], plan.batches[-1].partitions[0]
    tags = {PLAN_ID_TAG: plan.plan_id, BATCH_TAG: str(batch.index), WRITER_TAG: plan.target}

    # The batch's Launchpad, ready: the shadow job, the day, and the batch run's tags.
    open_launchpad(page, story, f"{plan.target}__shadow_job", partition=day)
    add_launch_tags(page, tags)
    for key, value in tags.items():
        expect(page.get_by_text(f"{key}: {value}").first).to_be_visible()

    # The daily run writes one day in about a second, less than its run page takes to render.
    # To be seen in progress it is held: the test takes the table's writer lease first, as a
    # command would, so the daily run's step waits for it (and says so in its logs).
    wh = dev.wh()
    hold = holder_for_command("ui test: holds the daily run in progress")
    acquire_writer(dev.instance, wh, plan.target, hold, wait_s=30)
    try:
        # The daily run first, launched by clicks; once it is in progress, the batch.
        daily_page = page.context.new_page()
        open_launchpad(daily_page, story, "orders_daily_job", partition=story.daily_day.isoformat())
        daily_id = click_launch(daily_page)
        run_status(daily_page, "Started")
        filter_logs(daily_page, "writer lease")
        expect(
            daily_page.get_by_text(re.compile("waiting for .*writer lease")).first
        ).to_be_visible(timeout=RUN_TIMEOUT_MS)
        batch_id = click_launch(page)
        run_status(page, "Queued")

        page.goto(story.url("/runs"))
        batch_row = run_row(page, batch_id)
        expect(batch_row).to_contain_text("Queued")
        expect(batch_row).to_contain_text(f"{PLAN_ID_TAG}: {plan.plan_id}")
        expect(batch_row).to_contain_text(f"{BATCH_TAG}: {batch.index}")
        expect(run_row(page, daily_id)).to_contain_text("Started")
        shot(page, "ui-batch-queued")
        assert status_of(story, daily_id) == dg.DagsterRunStatus.STARTED
        assert status_of(story, batch_id) == dg.DagsterRunStatus.QUEUED
    finally:
        wh.release_writer(plan.target, hold.holder_id)

    # After the daily run, the batch runs, and passes.
    wait_for(
        "the batch run to pass",
        lambda: status_of(story, batch_id) == dg.DagsterRunStatus.SUCCESS,
        3 * RUN_TIMEOUT_S,
        dev,
    )
    page.goto(story.url("/runs"))
    expect(run_row(page, batch_id)).to_contain_text("Success")

    # The record: the batch run carries the tags typed, and started only after the daily run.
    daily = dev.instance.get_run_record_by_id(daily_id)
    queued = dev.instance.get_run_record_by_id(batch_id)
    assert daily and queued and daily.dagster_run.tags.get(ROLE_TAG) == ROLE_DAILY
    assert daily.dagster_run.status == dg.DagsterRunStatus.SUCCESS
    assert tags.items() <= queued.dagster_run.tags.items()
    assert queued.dagster_run.tags.get("dagster/partition") == day
    assert daily.start_time and daily.end_time and queued.start_time
    assert daily.start_time < queued.create_timestamp.timestamp()
    assert queued.start_time >= daily.end_time


# -- 6b. the review: what the fix changes --------------------------------------------------------


def test_the_diff_shows_per_batch_on_the_shadow_and_a_review_records_its_summary_on_the_plan(
    story: Story, page: Page, shot: Shot
):
    plan = story.plan
    # Every batch recorded its diff gate per partition, with what it changes as metadata.
    page.goto(story.url("/assets/orders_daily__shadow?view=checks&checkDetail=diff_gate"))
    page.get_by_role("tab", name="Execution history").click()
    day = plan.batches[1].partitions[0]
    row = page.locator("tr", has=page.get_by_text(day, exact=True)).first
    expect(row).to_contain_text("rows change")
    expect(row).to_contain_text("fx_rate")
    shot(page, "ui-diff-gate")
    row.get_by_role("button").click()  # the row's metadata
    metadata = page.get_by_role("dialog")
    expect(metadata.locator("tr", has_text="net_revenue_usd_sum_after")).to_be_visible()
    expect(metadata.locator("tr", has_text="changed_pct")).to_be_visible()
    shot(page, "ui-diff-gate-metadata")
    page.keyboard.press("Escape")

    # The review, from the Launchpad; the plan's partition then shows who and what.
    config = f"ops: {{{REVIEW_OP}: {{config: {{plan_id: {plan.plan_id}, reviewed_by: ana}}}}}}"
    open_launchpad(page, story, REVIEW_JOB, config)
    run_id = click_launch(page)
    run_status(page, "Success")
    assert status_of(story, run_id) == dg.DagsterRunStatus.SUCCESS
    page.goto(story.url(f"/assets/backfill_plans?view=partitions&partition={plan.plan_id}"))
    expect(metadata_row(page, "reviewed_by")).to_contain_text("ana")
    expect(metadata_row(page, "diff_summary")).to_contain_text("rows change over")
    expect(metadata_row(page, "diff_summary")).to_contain_text("fx_rate")
    metadata_row(page, "diff_summary").scroll_into_view_if_needed()
    shot(page, "ui-plan-diff")
    # The picture: before and after per day, inlined in the reviewed diff's Markdown.
    metadata_row(page, "diff_markdown").get_by_text("[Show Markdown]").click()
    chart = page.get_by_role("dialog").get_by_role("img", name=CHART_ALT)
    chart.scroll_into_view_if_needed()
    expect(chart).to_be_visible()
    # The inlined SVG loaded and was drawn (a refused or broken image has no natural width).
    assert chart.evaluate("img => img.complete && img.naturalWidth") > 0
    shot(page, "ui-plan-diff-chart")
    page.keyboard.press("Escape")


# -- 7. the swap ---------------------------------------------------------------------------------


def test_after_the_fix_a_swap_launched_from_the_launchpad_succeeds(
    story: Story, page: Page, shot: Shot
):
    plan = story.plan
    open_launchpad(page, story, SWAP_JOB, plan_config(SWAP_OP, plan.plan_id))
    run_id = click_launch(page)
    run_status(page, "Success")
    filter_logs(page, "swapped:")
    weeks = len({b.start.isocalendar()[:2] for b in plan.batches})
    swapped = f"swapped: {len(plan.partitions)} partitions in {weeks} weeks"
    expect(page.get_by_text(swapped).first).to_be_visible()
    shot(page, "ui-swap-succeeded")
    assert status_of(story, run_id) == dg.DagsterRunStatus.SUCCESS
    # One materialization of the target per swapped partition, with rows and checksums; the
    # impacted dbt tables were published with it (materialized by the same run).
    mats = story.dev.instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    keys = [m.event_log_entry.dagster_event.asset_key for m in mats]  # type: ignore[union-attr]
    assert keys.count(dg.AssetKey(plan.target)) == len(plan.partitions)
    assert {k.to_user_string() for k in keys if k} >= {"fct_daily_revenue", "dim_customers"}

    # The downstream gate: the dbt tests of the models built in shadow, on the shadow's checks.
    filter_logs(page, "built in shadow")
    expect(page.get_by_text("dbt tests").first).to_contain_text("passed")
    page.goto(story.url("/assets/orders_daily__shadow?view=checks"))
    entry = page.locator("span", has=page.get_by_title("downstream_dbt_tests", exact=True)).first
    expect(entry).to_contain_text("Succeeded")
    shot(page, "ui-downstream-gate")

    page.goto(story.url(f"/assets/backfill_plans?view=partitions&partition={plan.plan_id}"))
    expect(metadata_row(page, "status")).to_contain_text("swapped")


# -- 7. rows per partition, plotted by Dagster -----------------------------------------------------


def test_the_target_plots_its_rows_per_partition(story: Story, page: Page, shot: Shot):
    """Every write of the target (daily, swap, rollback) records `dagster/partition_row_count`
    on each partition's materialization; Dagster plots it by itself, by partition, in the
    Overview's Metadata section (Plots)."""
    page.set_viewport_size(TALL)
    page.goto(story.url("/assets/orders_daily"))
    page.get_by_role("button", name="Plots").click()
    expect(page.get_by_role("button", name="Partitions")).to_be_visible()  # x axis: partitions
    title = page.get_by_text("dagster/partition_row_count", exact=True)
    expect(title).to_be_visible(timeout=30_000)
    expect(page.locator("canvas").first).to_be_visible()
    shot(page, "ui-target-row-count-plot")


def test_the_target_shows_its_runbook(story: Story, page: Page, shot: Shot):
    """The table's runbook, generated from its declaration (lib/runbook.py), is Markdown
    metadata of the target asset: its page lists it, and it opens as Markdown."""
    page.set_viewport_size(TALL)
    dialog = page.get_by_role("dialog")
    heading = dialog.get_by_role("heading", name="Backfill runbook: orders_daily")

    def runbook_open() -> bool:
        # The asset page renders again as the instance's last runs' events arrive; a click
        # during that lands on nothing (seen twice in five runs), so the page is opened anew.
        page.goto(story.url("/assets/orders_daily"))
        row = page.get_by_role("row").filter(has_text="backfill_assets/runbook")
        try:
            expect(row).to_be_visible(timeout=20_000)
            row.get_by_text("[Show Markdown]").click()
            expect(heading).to_be_visible(timeout=10_000)
            # The same re-render can close the dialog once open (seen in CI): its text is read
            # inside the retry, so a closed dialog is opened again rather than failing the test.
            expect(
                dialog.get_by_text(f"idle window: {ORDERS.backfill_window}", exact=False)
            ).to_be_visible(timeout=10_000)
            shot(page, "ui-target-runbook")
        except AssertionError:
            return False
        return True

    wait_for("the runbook's Markdown to open", runbook_open, 120, story.dev)


# -- 9. planning what is stale from the Launchpad -------------------------------------------------


def test_the_planning_job_plans_what_is_stale_and_each_plan_says_why(
    story: Story, page: Page, shot: Shot
):
    """`stale: true` in the planning job's config, no dates: it finds the days of orders_daily
    still built by code version 1 (the seeded history outside the swapped plan) and proposes a
    plan per range of them, whose Markdown says why each day is in it."""
    dev = story.dev
    wait_for("no run in progress", lambda: nothing_in_progress(story), RUN_TIMEOUT_S, dev)
    scan = find_stale(dev.instance, ORDERS, now=dt.datetime.now(dt.UTC))
    assert scan.ranges, "the story leaves v1 history outside its plan"
    before = set(plan_statuses(dev.instance, ORDERS.key))
    config = (
        f"ops: {{{PLAN_OP}: {{config: {{target: {ORDERS.key}, stale: true, "
        "window: 03:00-23:00, rollback: backup}}}"
    )
    open_launchpad(page, story, PLAN_JOB, config)
    run_id = click_launch(page)
    run_status(page, "Success")
    filter_logs(page, "range")
    expect(
        page.get_by_text(re.compile(r"built by a code version other than 2")).first
    ).to_be_visible()
    shot(page, "ui-plan-stale-run")
    assert status_of(story, run_id) == dg.DagsterRunStatus.SUCCESS

    proposed = {
        pid: status
        for pid, (_, status) in plan_statuses(dev.instance, ORDERS.key).items()
        if pid not in before
    }
    assert len(proposed) == len(scan.ranges) and set(map(str, proposed.values())) == {"proposed"}
    plans = sorted(
        (load_plan(dev.instance, pid, allow_proposed=True)[0] for pid in proposed),
        key=lambda p: p.start,
    )
    assert [(p.start, p.end) for p in plans] == scan.ranges
    first = plans[0]
    page.set_viewport_size(TALL)
    page.goto(story.url(f"/assets/backfill_plans?view=partitions&partition={first.plan_id}"))
    expect(metadata_row(page, "status")).to_contain_text("proposed")
    metadata_row(page, "plan_markdown").get_by_text("[Show Markdown]").click()
    md = page.get_by_role("dialog")
    expect(md.get_by_role("heading", name="Why these partitions (stale)")).to_be_visible()
    expect(
        md.get_by_text(re.compile(r"built by code version 1 on \d{4}-\d{2}-\d{2}")).first
    ).to_be_visible()
    shot(page, "ui-plan-stale-why")
