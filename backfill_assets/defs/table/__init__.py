"""The Dagster definitions of one BackfillableTable, one module for each thing it owns.

- `target.py`: the **target** asset writes the live table only on the declared daily path
  (service.frontdoor); any other run of it (a UI "Materialize..." or partition backfill) is
  refused before it writes and turned into a proposed plan for the same range.
- `shadow.py` and `gates.py`: the **shadow** asset writes the shadow partitions of an approved
  plan, then evaluates every gate per partition as blocking checks; its batch job runs one batch.
- `publish.py`: the **swap** and **rollback** jobs move data between them; the downstream dbt
  check gates the swap on the dbt tests of the models published with the target.
- `sensors.py`: the table's **batch driver** sensor launches the next batch of its started plan
  inside the window; its **refresh** sensor refreshes downstream after a swap or rollback
  launched from the UI.
- `definitions.py`: `table_definitions` composes them, cached per declaration.

Every step that writes claims the table's writer lease first (service.lease, through
`steps.claim_writer`): one writer per table, whatever launched it. Every decorated function here
gathers its inputs from the context and calls service/.
"""
