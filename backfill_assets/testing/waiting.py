"""Waiting for a condition, for the tests and the bench."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(check: Callable[[], Any], timeout: float, interval: float) -> Any:
    """Call `check` every `interval` s until it returns something truthy, and return that; None
    after `timeout` s. The callers decide how a timeout fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    return None
