"""The measures of `make bench`, one module each (bench.harness.run.MEASURES names them), and
what only they use: the reader query shapes, PostgreSQL's swap and reader parts and its reader
process."""
