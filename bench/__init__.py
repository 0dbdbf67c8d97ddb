"""Benchmarks for backfill_assets: `python -m bench.run` (see bench/README.md).

Every comparison is a ratio of contenders measured side by side in the same run, and every
figure is a median of repeated runs: the machine is shared and noisy, absolute seconds are not.
"""
