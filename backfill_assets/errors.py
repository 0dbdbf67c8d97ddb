"""One error hierarchy. Every message says what is wrong and how to fix it."""


class BackfillError(Exception):
    """Root of every error this package raises on purpose."""


class InvalidInput(BackfillError):
    """Input that cannot be used as given (a date, an identifier, a predicate, a plan file)."""


class PlanRefused(BackfillError):
    """The planner will not produce a plan for this request."""


class GateFailed(BackfillError):
    """A blocking gate failed for one or more partitions; the plan is halted."""


class SwapRefused(BackfillError):
    """The swap (or rollback) would not be safe; nothing was changed."""


class ExecutionRefused(BackfillError):
    """A batch may not run now (daily run in progress, plan not approved, plan conflict)."""


class WarehouseError(BackfillError):
    """The warehouse could not be opened or used (locked, unreadable, missing table)."""


class WarehouseMissing(WarehouseError):
    """The warehouse file does not exist yet (nothing has been built)."""


class WriterBusy(ExecutionRefused):
    """Another run holds the table's writer lease (one writer per table at a time)."""


class TargetWriteRefused(BackfillError):
    """A run that is not the declared daily path tried to write the live table."""


class AdoptionRefused(BackfillError):
    """An existing table cannot be adopted as it is; nothing was written."""
