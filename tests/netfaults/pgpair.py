"""A PostgreSQL 15 primary and its streaming replica, two clusters of the caller's own in a
temporary directory on free ports of 127.0.0.1, for failover tests and benchmarks.

    with PgPair(synchronous=True) as pair:   # start() on entry, destroy() on exit
        pair.primary_port, pair.replica_port
        pair.stop_primary()                  # the primary vanishes (pg_ctl -m immediate)
        pair.promote()                       # the replica accepts writes
        pair.reopen_old_primary()            # what the old primary had committed, read-only

PostgreSQL refuses to run as root, so every server command runs as the ``postgres`` user,
which owns the directory. Start-up is made fast, not durable: ``fsync`` is off, which loses
nothing here since the machine itself does not crash (the page cache survives a killed
server).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"
SLOT = "failover_replica"
# What ``pg_ctl stop -m MODE`` sends the postmaster.
_STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}

# Small and quick, with room for the workers' connections and the replica's WAL sender.
_COMMON_CONF = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{sockets}'
max_connections = 100
shared_buffers = 16MB
fsync = off
synchronous_commit = on
wal_level = replica
max_wal_senders = 4
max_replication_slots = 4
wal_sender_timeout = 10s
wal_receiver_status_interval = 1s
hot_standby = on
log_line_prefix = '%m [%p] %a '
"""

_HBA = """
local all all trust
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
"""


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def connect(port: int, dbname: str = "postgres", autocommit: bool = True) -> psycopg.Connection:
    """A psycopg connection to a cluster of the pair, as the superuser."""
    return psycopg.connect(
        host="127.0.0.1",
        port=port,
        user=USER,
        dbname=dbname,
        autocommit=autocommit,
        connect_timeout=5,
    )


class PgPair:
    """A primary and a replica streaming from it, synchronously (every commit waits until
    the replica has flushed it) or asynchronously; see the module's docstring."""

    def __init__(self, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary_port = free_port()
        self.replica_port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="everystep-pgpair-"))
        self.primary_dir = self.root / "primary"
        self.replica_dir = self.root / "replica"
        self._running: set[Path] = set()
        self._stalled: list[int] = []  # WAL senders frozen by stall_replication()
        atexit.register(self.destroy)

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> PgPair:
        """Create both clusters, start them and wait until the replica streams (and, when
        synchronous, is the synchronous standby)."""
        postgres = pwd.getpwnam(USER)
        os.chown(self.root, postgres.pw_uid, postgres.pw_gid)
        self._as_postgres(
            "initdb", "-D", self.primary_dir, "-U", USER, "--auth=trust", "--no-sync",
            "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        # '*': whichever standby connects is the synchronous one; the replica has only
        # itself to wait for after its promotion, so it gets none.
        standbys = "*" if self.synchronous else ""
        self._configure(self.primary_dir, self.primary_port, standbys)
        (self.primary_dir / "pg_hba.conf").write_text(_HBA)
        self._pg_ctl(self.primary_dir, "start")
        self._as_postgres(
            "pg_basebackup", "-h", "127.0.0.1", "-p", self.primary_port, "-U", USER,
            "-D", self.replica_dir, "-X", "stream", "-c", "fast", "-C", "-S", SLOT,
            "-R", "--no-sync",
        )  # fmt: skip
        # The copy carries the primary's settings: the later lines win.
        self._configure(self.replica_dir, self.replica_port, "")
        self._pg_ctl(self.replica_dir, "start")
        self._wait_streaming()
        return self

    def stall_replication(self) -> None:
        """Freeze the primary's WAL senders (SIGSTOP), as a stalled link to the replica
        would: the replica receives nothing more. Asynchronous commits go on and are what
        a failover now loses; synchronous ones wait. ``stop_primary`` kills the senders."""
        with connect(self.primary_port) as conn:
            pids = [int(row[0]) for row in conn.execute("SELECT pid FROM pg_stat_replication")]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        self._stalled.extend(pids)

    def stop_primary(self, mode: str = "immediate", timeout: float = 60) -> None:
        """Stop the primary (``immediate``: its processes quit at once, with no shutdown
        checkpoint and no goodbye to the replica or the clients, as a crashed host).

        The signal is sent from here, as ``pg_ctl stop`` would send it, rather than by
        starting ``pg_ctl``: the stop then happens when the caller reads the clock, not
        tens of milliseconds of commits later."""
        pid_file = self.primary_dir / "postmaster.pid"
        os.kill(int(pid_file.read_text().split()[0]), _STOP_SIGNALS[mode])
        # A frozen WAL sender would act on the postmaster's signal only once thawed, and
        # might first send what it holds: SIGKILL ends it where it stands. After the
        # postmaster's signal, so the postmaster does not take it for a crash and restart.
        for pid in self._stalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._stalled.clear()
        deadline = time.monotonic() + timeout
        while pid_file.exists():  # the postmaster removes it last, as pg_ctl waits for
            if time.monotonic() > deadline:
                raise RuntimeError(f"the primary did not stop:\n{self.log('primary')}")
            time.sleep(0.01)
        self._running.discard(self.primary_dir)

    def promote(self, timeout: float = 60) -> None:
        """Promote the replica; return once it accepts writes."""
        self._as_postgres(BIN / "pg_ctl", "promote", "-w", "-D", self.replica_dir)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with connect(self.replica_port) as conn:
                    conn.execute("CREATE TEMP TABLE promoted (x int)")
                    return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def reopen_old_primary(self) -> int:
        """Start the stopped primary again, on its own (nothing replicates to or from it)
        and read-only: after crash recovery it holds exactly what it had committed, which
        the promoted replica may lack. Its port."""
        self._pg_ctl(
            self.primary_dir,
            "start",
            "-o",
            "-c synchronous_standby_names='' -c default_transaction_read_only=on",
        )
        return self.primary_port

    def destroy(self) -> None:
        """Stop whatever still runs and delete both clusters; safe to call again."""
        for data in list(self._running):
            subprocess.run(
                ["runuser", "-u", USER, "--", str(BIN / "pg_ctl"), "stop", "-m", "immediate",
                 "-w", "-D", str(data)],
                capture_output=True,
                timeout=60,
            )  # fmt: skip
            self._running.discard(data)
        shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.destroy)

    def __enter__(self) -> PgPair:
        try:
            return self.start()
        except BaseException:
            self.destroy()
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()

    # -- what happened ----------------------------------------------------------------

    def log(self, which: str = "primary", tail: int = 4000) -> str:
        """The end of a cluster's server log (``primary`` or ``replica``)."""
        path = self.root / f"{which}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def replication(self) -> list[tuple[str, str]]:
        """(state, sync_state) of each WAL sender of the primary."""
        with connect(self.primary_port) as conn:
            rows = conn.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
        return [(str(state), str(sync)) for state, sync in rows]

    # -- helpers ----------------------------------------------------------------------

    def _configure(self, data: Path, port: int, standbys: str) -> None:
        extra = _COMMON_CONF.format(sockets=self.root)
        extra += f"port = {port}\nsynchronous_standby_names = '{standbys}'\n"
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(extra)

    def _pg_ctl(self, data: Path, action: str, *args: str) -> None:
        log = self.root / f"{data.name}.log"
        self._as_postgres(BIN / "pg_ctl", action, "-w", "-t", "60", "-D", data, "-l", log, *args)
        if action == "start":
            self._running.add(data)
        elif action == "stop":
            self._running.discard(data)

    def _as_postgres(self, program: str | Path, *args: object) -> None:
        command = [str(program if os.sep in str(program) else BIN / program), *map(str, args)]
        done = subprocess.run(
            ["runuser", "-u", USER, "--", *command],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
            )

    def _wait_streaming(self, timeout: float = 60) -> None:
        want = ("streaming", "sync" if self.synchronous else "async")
        deadline = time.monotonic() + timeout
        while want not in self.replication():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the replica does not stream ({self.replication()}):\n{self.log('replica')}"
                )
            time.sleep(0.05)
