"""The harness: the run (`python -m bench`), sizes, the wait for quiet and the noisy rounds, the
contenders' child process and its launcher, the data every measure starts from, and the report.

Imports nothing: a contender's child process (`python -m bench.harness.contenders`) imports this
package before its clock starts, so whatever it imported would go untimed.
"""
