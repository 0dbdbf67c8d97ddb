"""The code location the commands work on: found and imported as the `dagster` CLI does
(`loader.py`), and what the plan commands read of it kept between commands (`snapshot.py`).

Between cli/ and defs/ in the layers: the snapshot writes down and reads back the tables, the
asset lineage and the warehouse resource (defs/resources.py), and only the command line uses it.
Imports nothing here, so that importing a module of it does not import the other.
"""
