"""Benchmarks for backfill_assets: `python -m bench` (see bench/README.md).

Every comparison is a ratio of contenders measured side by side in the same run, and every
figure is a median of repeated runs: the machine is shared and noisy, absolute seconds are not.

bench.harness runs the measures and reports them, bench.contenders are what the backfill
measures compare, bench.measures are the measures, and bench.experiments the one-off experiments
behind figures in the docs.
"""
