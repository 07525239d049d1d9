"""The durable run store: SQLite (WAL) under the data dir. A media take's bytes live in the blob
store (a file, which the take's ``uri`` names); a text take's bytes live here (``take_texts``,
by hash), written in the same transaction as its row: a new file per text cost more than the
rest of a trivial run.

Every accepted run is written at submit (its request included), so a crash loses none; a node's
takes are written when the node finishes, in one transaction with the run's link to them; the run's
final state is written when it settles. Takes are found again by cache key, which is how an
interrupted run resumes without redoing finished work.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import msgspec

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    target TEXT NOT NULL,
    status TEXT NOT NULL,
    request BLOB NOT NULL,
    state BLOB,
    client_run_id TEXT,
    request_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    finished_at INTEGER,
    scoped INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_status ON runs(status);
CREATE INDEX IF NOT EXISTS runs_client ON runs(client_run_id);
CREATE TABLE IF NOT EXISTS takes (
    take_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    port TEXT NOT NULL,
    kind TEXT NOT NULL,
    ext TEXT NOT NULL,
    uri TEXT NOT NULL,
    hash TEXT NOT NULL,
    params BLOB NOT NULL,
    cache_key TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS takes_key ON takes(cache_key);
CREATE INDEX IF NOT EXISTS takes_node ON takes(node_id, created_at);
CREATE INDEX IF NOT EXISTS takes_run ON takes(run_id, created_at);
CREATE TABLE IF NOT EXISTS run_takes (
    run_id TEXT NOT NULL,
    take_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (run_id, take_id)
);
CREATE TABLE IF NOT EXISTS take_texts (
    hash TEXT PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deployments (
    name TEXT PRIMARY KEY,
    spec BLOB NOT NULL,
    created_at INTEGER NOT NULL
);
"""


#: Columns added since the first schema, with their definition: a database made before one
#: of them gets it at open (``ALTER TABLE ... ADD COLUMN``, old rows take the default).
ADDED_COLUMNS: Final = {"scoped": "INTEGER NOT NULL DEFAULT 0"}

#: How long a write waits for a lock held by another connection before it fails.
BUSY_TIMEOUT_S = 5.0
#: SQLite's primary result codes for "another connection holds the lock".
_WOULD_WAIT: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

T = TypeVar("T")


class TakeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A take as stored (``port``, ``ext`` and ``cache_key`` are not part of the /v1 shape)."""

    id: str
    run_id: str
    node_id: str
    port: str
    kind: str
    ext: str
    uri: str
    hash: str
    params: dict[str, Any]
    cache_key: str
    created_at: int
    #: A text take's bytes, stored with its row (None once read back: ``RunStore.take_text``).
    data: bytes | None = None


class StoredRun(msgspec.Struct, frozen=True, kw_only=True):
    """A run row."""

    run_id: str
    target: str
    status: str
    request: dict[str, Any]
    state: dict[str, Any] | None
    client_run_id: str | None
    request_hash: str
    created_at: int
    #: a run its request waits on (``/openai``): once the process that served the request is
    #: gone, so is its client, and a restart settles it as cancelled instead of resuming it
    scoped: bool = False


class TakeSource(Protocol):
    """Where stored takes are found by cache key, and text takes' bytes (the store, or a test
    double)."""

    def takes_for_key(self, cache_key: str) -> list[TakeRecord]: ...

    def take_text(self, digest: str) -> bytes | None: ...


def now_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)


class RunStore:
    """Thread-safe access to ``inline.db``; each write is one transaction."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(
            path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S
        )
        self._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        self._migrate()
        # reentrant: ``attempt`` holds it around a call that takes it again
        self._lock = threading.RLock()
        self._enc = msgspec.json.Encoder()

    def attempt(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[bool, T | None]:
        """``fn(*args, **kwargs)`` (a call of this store) on the calling thread, if it runs
        without waiting: ``(True, its result)``; ``(False, None)``, with nothing written, when
        another thread is in the store or another connection holds the database's write lock
        (the caller then makes the call in a worker thread, which waits for it). The event
        loop's short writes go through here: a commit in WAL mode is tens of microseconds."""
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            self._db.execute("PRAGMA busy_timeout=0")
            try:
                return True, fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _WOULD_WAIT:
                    return False, None  # refused at BEGIN (or rolled back): nothing written
                raise
            finally:
                self._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        finally:
            self._lock.release()

    def _migrate(self) -> None:
        """Add the columns a database made by an older host lacks."""
        for column, definition in ADDED_COLUMNS.items():
            have = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            if column in have:
                continue
            try:
                self._db.execute(f"ALTER TABLE runs ADD COLUMN {column} {definition}")
            except sqlite3.OperationalError:
                # another process opening the same database added it first
                have = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
                if column not in have:
                    raise

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:
                # a failed commit (disk full, I/O error) leaves the transaction open
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # runs -------------------------------------------------------------------------------------
    def add_run(self, run: StoredRun) -> None:
        """Record an accepted run (status ``queued``)."""
        with self._tx() as db:
            self._insert(db, run)

    def _insert(self, db: sqlite3.Connection, run: StoredRun) -> None:
        db.execute(
            "INSERT INTO runs (run_id, target, status, request, state, client_run_id,"
            " request_hash, created_at, scoped) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.run_id,
                run.target,
                run.status,
                self._enc.encode(run.request),
                None if run.state is None else self._enc.encode(run.state),
                run.client_run_id,
                run.request_hash,
                run.created_at,
                int(run.scoped),
            ),
        )

    def settle(
        self,
        run_id: str,
        status: str,
        state: dict[str, Any],
        *,
        new: StoredRun | None = None,
        takes: list[TakeRecord] | tuple[TakeRecord, ...] = (),
    ) -> None:
        """Write a run's final status and state (and its row, for a run not stored yet, and
        the takes of its last node, linked to it), in one transaction."""
        with self._tx() as db:
            if new is not None:
                self._insert(db, new)
            if takes:
                self._insert_takes(db, run_id, takes)
            db.execute(
                "UPDATE runs SET status = ?, state = ?, finished_at = ? WHERE run_id = ?",
                (status, self._enc.encode(state), now_ms(), run_id),
            )

    def probe(self, wait_s: float = 0.2) -> None:
        """Raise unless a write transaction can start now (health's check of a failing store)."""
        if not self._lock.acquire(timeout=wait_s):
            raise sqlite3.OperationalError("the run store is busy")
        try:
            self._db.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute("ROLLBACK")
            finally:
                self._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        finally:
            self._lock.release()

    def mark_cancelled(self, run_id: str) -> None:
        """Record an accepted cancel at once, so that a restart does not resume the run."""
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET status = 'cancelled', finished_at = ? WHERE run_id = ?"
                " AND status IN ('queued', 'running')",
                (now_ms(), run_id),
            )

    def find_client_run(self, client_run_id: str) -> tuple[str, str] | None:
        """(run id, request hash) of the newest run submitted with ``client_run_id``."""
        with self._lock:
            row = self._db.execute(
                "SELECT run_id, request_hash FROM runs WHERE client_run_id = ?"
                " ORDER BY seq DESC LIMIT 1",
                (client_run_id,),
            ).fetchone()
        return (row[0], row[1]) if row else None

    def get_run(self, run_id: str) -> StoredRun | None:
        """A run by id."""
        with self._lock:
            row = self._db.execute(
                "SELECT run_id, target, status, request, state, client_run_id, request_hash,"
                " created_at, scoped FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        return _run(row) if row else None

    def unfinished(self) -> list[StoredRun]:
        """Runs that were queued or running, in submission order (to resume after a restart)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, target, status, request, state, client_run_id, request_hash,"
                " created_at, scoped FROM runs WHERE status IN ('queued', 'running') ORDER BY seq"
            ).fetchall()
        return [_run(r) for r in rows]

    def recent(self, statuses: tuple[str, ...], limit: int) -> list[tuple[str, str, str, float]]:
        """``(run_id, status, target, fraction)`` of the newest ``limit`` runs whose status is one
        of ``statuses``, newest first."""
        marks = ", ".join("?" for _ in statuses)
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, status, target, json_extract(CAST(state AS TEXT), '$.fraction')"
                f" FROM runs WHERE status IN ({marks}) ORDER BY seq DESC LIMIT ?",
                (*statuses, limit),
            ).fetchall()
        return [(r[0], r[1], r[2], float(r[3] or 0.0)) for r in rows]

    # takes ------------------------------------------------------------------------------------
    def add_takes(self, run_id: str, takes: list[TakeRecord]) -> None:
        """Store new takes and link them to ``run_id``, in one transaction."""
        with self._tx() as db:
            self._insert_takes(db, run_id, takes)

    def _insert_takes(
        self,
        db: sqlite3.Connection,
        run_id: str,
        takes: list[TakeRecord] | tuple[TakeRecord, ...],
    ) -> None:
        for t in takes:
            db.execute(
                "INSERT OR IGNORE INTO takes (take_id, run_id, node_id, port, kind, ext, uri,"
                " hash, params, cache_key, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    t.id,
                    t.run_id,
                    t.node_id,
                    t.port,
                    t.kind,
                    t.ext,
                    t.uri,
                    t.hash,
                    self._enc.encode(t.params),
                    t.cache_key,
                    t.created_at,
                ),
            )
            if t.data is not None:  # one copy of each text (content-addressed)
                db.execute(
                    "INSERT OR IGNORE INTO take_texts (hash, data) VALUES (?, ?)", (t.hash, t.data)
                )
        self._link(db, run_id, [t.id for t in takes])

    def take_text(self, digest: str) -> bytes | None:
        """The bytes of the text take whose hash is ``digest`` (None: not stored here)."""
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM take_texts WHERE hash = ?", (digest,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def link_takes(self, run_id: str, take_ids: list[str]) -> None:
        """Attach existing takes (cache hits) to a run; idempotent."""
        with self._tx() as db:
            self._link(db, run_id, take_ids)

    def _link(self, db: sqlite3.Connection, run_id: str, take_ids: list[str]) -> None:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM run_takes WHERE run_id = ?", (run_id,)
        ).fetchone()
        for take_id in take_ids:
            cur = db.execute(
                "INSERT OR IGNORE INTO run_takes (run_id, take_id, position) VALUES (?, ?, ?)",
                (run_id, take_id, count),
            )
            count += cur.rowcount

    def takes_for_key(self, cache_key: str) -> list[TakeRecord]:
        """The newest takes stored for a cache key (one per output port)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_TAKE_COLS} FROM takes WHERE cache_key = ? ORDER BY created_at DESC",
                (cache_key,),
            ).fetchall()
        newest: dict[str, TakeRecord] = {}
        for row in rows:
            take = _take(row)
            newest.setdefault(take.port, take)
        return list(newest.values())

    def run_takes(self, run_id: str) -> list[TakeRecord]:
        """Every take a run reported, in arrival order."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join('t.' + c for c in _TAKE_COLS.split(', '))} FROM run_takes r"
                " JOIN takes t ON t.take_id = r.take_id WHERE r.run_id = ? ORDER BY r.position",
                (run_id,),
            ).fetchall()
        return [_take(r) for r in rows]

    def get_take(self, take_id: str) -> TakeRecord | None:
        """A take by id."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_TAKE_COLS} FROM takes WHERE take_id = ?", (take_id,)
            ).fetchone()
        return _take(row) if row else None

    def history(self, *, node_id: str | None, run_id: str | None, limit: int) -> list[TakeRecord]:
        """Takes newest first, optionally of one node id and/or produced by one run."""
        where, args = [], []
        if node_id is not None:
            where.append("node_id = ?")
            args.append(node_id)
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_TAKE_COLS} FROM takes {clause} ORDER BY created_at DESC, rowid DESC"
                " LIMIT ?",
                (*args, limit),
            ).fetchall()
        return [_take(r) for r in rows]

    # deployments --------------------------------------------------------------------------------
    def add_deployment(self, name: str, spec: bytes, created_at: int) -> bool:
        """Store a deployment's spec; False (nothing written) where ``name`` is taken."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO deployments (name, spec, created_at) VALUES (?, ?, ?)",
                (name, spec, created_at),
            )
            return cur.rowcount == 1

    def drop_deployment(self, name: str) -> bool:
        """Forget a deployment; False where there was none of that name."""
        with self._tx() as db:
            return db.execute("DELETE FROM deployments WHERE name = ?", (name,)).rowcount == 1

    def deployments(self) -> list[bytes]:
        """Every stored deployment's spec, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT spec FROM deployments ORDER BY created_at, name"
            ).fetchall()
        return [bytes(r[0]) for r in rows]

    def integrity_check(self) -> str:
        """SQLite's own ``PRAGMA integrity_check`` answer (``ok`` when sound)."""
        with self._lock:
            return self._db.execute("PRAGMA integrity_check").fetchone()[0]


_TAKE_COLS = "take_id, run_id, node_id, port, kind, ext, uri, hash, params, cache_key, created_at"


def _run(row: tuple[Any, ...]) -> StoredRun:
    return StoredRun(
        run_id=row[0],
        target=row[1],
        status=row[2],
        request=msgspec.json.decode(row[3]),
        state=msgspec.json.decode(row[4]) if row[4] else None,
        client_run_id=row[5],
        request_hash=row[6],
        created_at=row[7],
        scoped=bool(row[8]),
    )


def _take(row: tuple[Any, ...]) -> TakeRecord:
    return TakeRecord(
        id=row[0],
        run_id=row[1],
        node_id=row[2],
        port=row[3],
        kind=row[4],
        ext=row[5],
        uri=row[6],
        hash=row[7],
        params=msgspec.json.decode(row[8]),
        cache_key=row[9],
        created_at=row[10],
    )
