"""One-off experiments behind figures in the docs, each run on its own (`python -m
bench.experiments.NAME`), not measures of `make bench`."""
