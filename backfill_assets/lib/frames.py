"""Check what a Python build returned before anything is written.

A Python build returns a pandas DataFrame for the days [start, end). It must have exactly the
table's columns, values of the declared types, only days of the range, and a primary key that is
neither null nor duplicated. Anything else is refused with one message naming every problem, and
the warehouse is not touched.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import TYPE_CHECKING, Any

from backfill_assets.errors import InvalidInput
from backfill_assets.lib.spec import TableSpec

if TYPE_CHECKING:
    import pandas as pd

_INTEGER = {"BIGINT", "INTEGER", "INT", "SMALLINT", "TINYINT", "HUGEINT", "INT8", "INT4"}
_NUMERIC = {"DECIMAL", "NUMERIC", "DOUBLE", "FLOAT", "REAL", "DOUBLE PRECISION"}
_TEXT = {"VARCHAR", "TEXT", "STRING", "CHAR"}


def _base_type(sql_type: str) -> str:
    return sql_type.split("(")[0].strip().upper()


def _values_of(series: pd.Series, kinds: tuple[type, ...]) -> bool:
    values = series.dropna()
    return bool(values.map(lambda v: isinstance(v, kinds)).all())


def _type_problem(name: str, sql_type: str, series: pd.Series) -> str | None:
    import pandas as pd
    from pandas.api import types as t

    base = _base_type(sql_type)
    dtype = series.dtype
    ok: bool
    if base in _INTEGER:
        ok = t.is_integer_dtype(dtype) and not t.is_bool_dtype(dtype)
    elif base in _NUMERIC:
        ok = (t.is_numeric_dtype(dtype) and not t.is_bool_dtype(dtype)) or (
            t.is_object_dtype(dtype) and _values_of(series, (decimal.Decimal, int, float))
        )
    elif base == "BOOLEAN":
        ok = t.is_bool_dtype(dtype)
    elif base == "DATE":
        ok = t.is_datetime64_any_dtype(dtype) or (
            t.is_object_dtype(dtype) and _values_of(series, (dt.date,))
        )
    elif base == "TIMESTAMP":
        ok = t.is_datetime64_any_dtype(dtype) or (
            t.is_object_dtype(dtype) and _values_of(series, (dt.datetime, pd.Timestamp))
        )
    elif base in _TEXT:
        ok = t.is_string_dtype(dtype) and _values_of(series, (str,))
    else:
        return None  # a type this check does not know: the warehouse casts or refuses it
    return None if ok else f"{name} is {dtype}, not {sql_type}"


def check_frame(spec: TableSpec, frame: Any, start: dt.date, end: dt.date) -> pd.DataFrame:
    """Return `frame` with the table's columns in order, or refuse it.

    Raises:
        InvalidInput: naming every problem (columns, types, days, keys); nothing is written.
    """
    import pandas as pd

    where = f"the Python build of {spec.name} for {start}..{end - dt.timedelta(days=1)}"
    if not isinstance(frame, pd.DataFrame):
        raise InvalidInput(
            f"{where} returned {type(frame).__name__}, not a pandas DataFrame; nothing written"
        )
    names = list(spec.column_names)
    got = [str(c) for c in frame.columns]
    problems: list[str] = []
    missing = [c for c in names if c not in got]
    extra = [c for c in got if c not in names]
    if missing:
        problems.append(f"missing columns {missing}")
    if extra:
        problems.append(f"columns not in the table {extra}")
    if len(set(got)) != len(got):
        problems.append(f"repeated column names {sorted({c for c in got if got.count(c) > 1})}")
    if problems:
        raise InvalidInput(f"{where} has the wrong schema: {'; '.join(problems)}; nothing written")
    frame = frame[names]
    for col in spec.columns:
        problem = _type_problem(col.name, col.sql_type, frame[col.name])
        if problem:
            problems.append(problem)
    if problems:
        raise InvalidInput(f"{where} has the wrong types: {'; '.join(problems)}; nothing written")
    if len(frame):
        days = pd.to_datetime(frame[spec.partition_column]).dt.date
        outside = sorted({d for d in days if not start <= d < end})
        if outside:
            shown = ", ".join(str(d) for d in outside[:5])
            problems.append(f"{spec.partition_column} outside the range: {shown}")
        keys = frame[list(spec.primary_key)]
        null_keys = int(keys.isna().any(axis=1).sum())
        if null_keys:
            problems.append(f"{null_keys} rows with a null primary key")
        dup = keys.duplicated(keep=False)
        if dup.any():
            sample = keys[dup].head(3).to_dict("records")
            problems.append(f"{int(dup.sum())} rows share a primary key, e.g. {sample}")
    if problems:
        raise InvalidInput(f"{where} is refused: {'; '.join(problems)}; nothing written")
    return frame
