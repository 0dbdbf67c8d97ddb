"""Pure planning: criteria, impact, cost, weekly batches, windows. No I/O, no clock reads."""
