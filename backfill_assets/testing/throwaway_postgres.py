"""A throwaway PostgreSQL server from the machine's binaries, for the demo, the tests and the bench.

`initdb` in a new temporary directory, `pg_ctl start` on 127.0.0.1 and a free port, trust
authentication for the `postgres` user, and `pg_ctl stop` (then SIGKILL by PID, after a bound)
when done. PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user
(`runuser`), in a directory it owns. Nothing is installed here: `make postgres` installs Debian's
package when the binaries are missing.

    with throwaway_postgres() as server:
        url = server.create_database("warehouse")   # postgresql://postgres@127.0.0.1:PORT/warehouse
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backfill_assets.errors import BackfillError

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
# A throwaway server: durability is not the point, speed is (the tests never kill the server).
FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


class PostgresUnavailable(BackfillError):
    """No PostgreSQL binaries, or the server did not start."""


def binaries_dir() -> Path:
    """Where `initdb` and `pg_ctl` are: on the PATH, else Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(candidate).parent
    raise PostgresUnavailable(
        "PostgreSQL's binaries (initdb, pg_ctl) are not installed: run `make postgres` (Debian's "
        "postgresql package), or set BACKFILL_ASSETS_TEST_POSTGRES_URL to a server to use"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    """Run as `postgres` when we are root (the server refuses root)."""
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root needs `runuser` to start PostgreSQL as postgres")
    return [runuser, "-u", "postgres", "--", *cmd]


@dataclass
class ThrowawayPostgres:
    root: Path  # data directory, socket directory and log live here
    port: int
    bin_dir: Path
    user: str = "postgres"
    host: str = "127.0.0.1"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def pid(self) -> int | None:
        pidfile = self.data_dir / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(pidfile.read_text().splitlines()[0])
        return None

    def create_database(self, name: str) -> str:
        """A new, empty database (dropped first if it exists); return its URL."""
        import psycopg
        from psycopg import sql

        db = sql.Identifier(name)
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(db))
            con.execute(sql.SQL("CREATE DATABASE {}").format(db))
        return self.url(name)

    def start(self) -> None:
        self.data_dir.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.data_dir, "postgres", "postgres")
        subprocess.run(
            _as_server_user([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-A",
                             "trust", "-U", self.user, "--no-sync", "-E", "UTF8"]),
            check=True, capture_output=True, timeout=START_TIMEOUT_S,
        )  # fmt: skip
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=127.0.0.1",
            "-c max_connections=200",
            *(f"-c {s}" for s in FAST_SETTINGS),
        ]
        done = subprocess.run(
            _as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-o",
                             " ".join(options), "-l", str(self.log), "-w", "-t",
                             str(START_TIMEOUT_S), "start"]),
            capture_output=True, text=True, timeout=START_TIMEOUT_S + 10,
        )  # fmt: skip
        if done.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else done.stderr
            raise PostgresUnavailable(f"PostgreSQL did not start on port {self.port}: {tail}")

    def stop(self) -> None:
        """`pg_ctl stop -m fast`; SIGKILL by PID if it is still up after the bound."""
        pid = self.pid()
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                _as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m",
                                 "fast", "-w", "-t", str(STOP_TIMEOUT_S), "stop"]),
                capture_output=True, timeout=STOP_TIMEOUT_S + 10,
            )  # fmt: skip
        if pid is not None:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A fresh server for the duration of the block, stopped (and its files removed) after."""
    bin_dir = binaries_dir()
    # Under /tmp, not a caller's temporary directory: the `postgres` user must reach it.
    root = Path(tempfile.mkdtemp(prefix="backfill-assets-pg-"))
    server = ThrowawayPostgres(root=root, port=free_port(), bin_dir=bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def dagster_pg_env(url: str) -> dict[str, str]:
    """The DAGSTER_PG_* variables the shipped dagster.postgres.yaml reads, for the database at
    `url` (dagster-postgres storage on a throwaway server)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return {
        "DAGSTER_PG_HOST": parts.hostname or "127.0.0.1",
        "DAGSTER_PG_PORT": str(parts.port or 5432),
        "DAGSTER_PG_USERNAME": parts.username or "postgres",
        "DAGSTER_PG_PASSWORD": parts.password or "",
        "DAGSTER_PG_DB": parts.path.lstrip("/"),
    }
