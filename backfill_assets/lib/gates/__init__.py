"""Gate logic: row counts, a validated sample, invariants. Reads the warehouse; writes nothing."""

from backfill_assets.lib.gates.evaluate import GateOutcome, evaluate_gates

__all__ = ["GateOutcome", "evaluate_gates"]
