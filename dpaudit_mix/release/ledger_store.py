"""Where the ledger's rows live: a database, through SQLAlchemy Core (no ORM).

SQLite by default (one file in the user state folder, in WAL mode; a write is one ``BEGIN
IMMEDIATE`` transaction, so check-and-append is serialised on the file), PostgreSQL for a team
(libpq's ``postgresql://user@host:port/db`` as written; the driver is psycopg 3, the
``dpaudit-mix[postgres]`` extra; a write holds a transaction-scoped advisory lock, so every
check-and-append on the ledger is serialised). One table of rows, append-only: a trigger on both
backends refuses UPDATE, DELETE and (PostgreSQL) TRUNCATE of a row; the schema records its
version in ``ledger_meta``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.cache import user_state_dir
from ..base.errors import InputError, require
from .ledger_chain import Row

#: the schema's version: a ledger of another one is refused (never read as spending less).
SCHEMA_VERSION = "1"
#: the advisory lock every PostgreSQL write holds (any 64-bit key the ledger's tables own).
LOCK_KEY = 0x6470617564697478  # "dpauditx"
#: seconds a SQLite writer waits for another's transaction before it fails.
BUSY_SECONDS = 120

_SQLITE_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS ledger_rows_no_update BEFORE UPDATE ON ledger_rows "
    "BEGIN SELECT RAISE(ABORT, 'dpaudit-mix ledger rows are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS ledger_rows_no_delete BEFORE DELETE ON ledger_rows "
    "BEGIN SELECT RAISE(ABORT, 'dpaudit-mix ledger rows are append-only'); END",
)
_POSTGRES_TRIGGERS = (
    "CREATE OR REPLACE FUNCTION dpaudit_mix_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'dpaudit-mix ledger rows are append-only (%% refused)', TG_OP; END $$",
    "CREATE TRIGGER ledger_rows_append_only BEFORE UPDATE OR DELETE ON ledger_rows "
    "FOR EACH ROW EXECUTE FUNCTION dpaudit_mix_append_only()",
    "CREATE TRIGGER ledger_rows_no_truncate BEFORE TRUNCATE ON ledger_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION dpaudit_mix_append_only()",
)


@dataclass(frozen=True)
class Location:
    """A ledger's address: the SQLAlchemy URL, what a person is shown (no password), and the
    SQLite file where it is one."""

    url: str
    shown: str
    path: Path | None

    @property
    def sqlite(self) -> bool:
        return self.path is not None

    @property
    def public(self) -> str:
        """How a published manifest and card name it: a team's URL without its password; an SQLite
        file by its name alone (its folders are where a machine keeps its files, not published)."""
        return self.shown if self.path is None else f"sqlite:{self.path.name}"


def location(given: str | Path | None = None) -> Location:
    """The ledger named by ``given`` (``--ledger``), else ``$DPAUDIT_MIX_LEDGER``, else
    ``ledger.sqlite`` in the user state folder. A path is an SQLite file; a URL is
    ``sqlite:///PATH`` or ``postgresql://…`` (libpq's form). A JSON ledger is refused by name: it
    is imported (``dpaudit-mix ledger import FILE``), not written."""
    require(given is None or str(given).strip() != "", "--ledger is empty: give a path or a URL, or leave it out")
    raw = str(given) if given is not None else os.environ.get("DPAUDIT_MIX_LEDGER") or ""
    if not raw:
        return _sqlite(user_state_dir() / "ledger.sqlite")
    require("?" not in raw, f"the ledger {_without_password(raw)} carries options (?...): name the database alone")
    if raw.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from sqlalchemy.engine import make_url

        try:
            url = make_url("postgresql+psycopg://" + raw.split("://", 1)[1])
        except Exception as exc:  # SQLAlchemy's own ArgumentError and a bad port's ValueError
            raise InputError(f"the ledger URL {_without_password(raw)} cannot be read: {exc}") from None
        return Location(url.render_as_string(hide_password=False), _without_password(raw), None)
    if raw.startswith("sqlite:///"):  # SQLAlchemy's form: sqlite:///relative, sqlite:////absolute
        return _sqlite(Path(raw[len("sqlite:///") :]))
    require("://" not in raw, f"the ledger {raw!r} is neither a path nor a sqlite:/// or postgresql:// URL")
    require(
        not raw.endswith(".json"),
        f"{raw} is a JSON ledger: a ledger is a database now; import it once with `dpaudit-mix ledger import {raw}` "
        "and name the database (a path or a URL) instead",
    )
    return _sqlite(Path(raw))


def _without_password(raw: str) -> str:
    """A URL as a person may see it: its password, if any, as ``***``."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(raw)
        if parts.password is None:
            return raw
        return parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rsplit('@', 1)[1]}").geturl()
    except ValueError:  # not a URL a parser reads: its scheme alone
        return raw.split("://", 1)[0] + "://…"


def _sqlite(path: Path) -> Location:
    path = Path(os.path.realpath(path))  # a symlinked ledger is the file it names
    return Location(f"sqlite:///{path}", str(path), path)


class Store:
    """The rows of one ledger: read them, or append under the ledger's write lock."""

    def __init__(self, where: Location) -> None:
        self.where = where
        self._engine: Any = None

    def _connect(self) -> Any:
        if self._engine is None:
            from sqlalchemy import create_engine, event
            from sqlalchemy.pool import NullPool

            if self.where.sqlite:
                assert self.where.path is not None
                require(
                    not self.where.path.exists() or self.where.path.is_file(),
                    f"the ledger {self.where.shown} is not a regular file",
                )
                try:
                    self.where.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise InputError(f"cannot use the ledger {self.where.shown}: {exc.strerror or exc}") from None
                engine = create_engine(self.where.url, poolclass=NullPool, isolation_level="AUTOCOMMIT")

                @event.listens_for(engine, "connect")
                def _pragmas(connection: Any, _: Any) -> None:
                    connection.execute(f"PRAGMA busy_timeout = {BUSY_SECONDS * 1000}")
                    connection.execute("PRAGMA journal_mode = WAL")

            else:
                engine = create_engine(self.where.url, poolclass=NullPool)
            self._engine = engine
        return self._engine

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """A database's own failure (cannot connect, a locked file, a refused statement) as one line."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            yield
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise InputError(f"the ledger {self.where.shown}: {reason}") from None

    @contextmanager
    def writing(self) -> Iterator[Any]:
        """A connection inside the ledger's one write transaction (committed when the block ends,
        rolled back when it raises), its schema made first if it has none."""
        with self._failures():
            engine = self._connect()
            with engine.connect() as connection:
                if self.where.sqlite:
                    connection.exec_driver_sql("BEGIN IMMEDIATE")
                    try:
                        self._schema(connection)
                        yield connection
                    except BaseException:
                        connection.exec_driver_sql("ROLLBACK")
                        raise
                    connection.exec_driver_sql("COMMIT")
                else:
                    with connection.begin():
                        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOCK_KEY})")
                        self._schema(connection)
                        yield connection

    def _schema(self, connection: Any) -> None:
        """The tables, the append-only triggers and the version, made once; a ledger of another
        schema version refuses."""
        from sqlalchemy import inspect

        if not inspect(connection).has_table("ledger_rows"):
            _tables().create_all(connection)
            for statement in _SQLITE_TRIGGERS if self.where.sqlite else _POSTGRES_TRIGGERS:
                connection.exec_driver_sql(statement)
            connection.execute(_meta().insert().values(key="schema_version", value=SCHEMA_VERSION))
        self._check_version(connection)

    def _check_version(self, connection: Any) -> None:
        from sqlalchemy import select

        meta = _meta()
        found = connection.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
        require(
            found == SCHEMA_VERSION,
            f"the ledger {self.where.shown} has schema version {found!r}, this dpaudit-mix reads {SCHEMA_VERSION!r}",
        )

    def rows(self, connection: Any = None) -> list[Row]:
        """Every row, in order (none where the ledger was never written)."""
        if connection is not None:
            return _read(connection)
        if self.where.path is not None and not self.where.path.exists():
            require(
                self.where.path.parent.is_dir(),
                f"no ledger at {self.where.shown}: its folder {self.where.path.parent} does not exist",
            )
            return []  # a ledger nothing was written to yet
        with self._failures():
            from sqlalchemy import inspect

            with self._connect().connect() as connection:
                if not inspect(connection).has_table("ledger_rows"):
                    return []
                self._check_version(connection)
                return _read(connection)

    def append(self, connection: Any, row: Row) -> None:
        connection.execute(
            _tables()
            .tables["ledger_rows"]
            .insert()
            .values(
                seq=row.seq,
                dataset=row.dataset,
                kind=row.kind,
                body=json.dumps(row.body, sort_keys=True, allow_nan=False),
                prev_sha256=row.prev_sha256,
                sha256=row.sha256,
                signer=row.signer,
                signature=row.signature,
            )
        )


def _read(connection: Any) -> list[Row]:
    from sqlalchemy import select

    table = _tables().tables["ledger_rows"]
    found = []
    for r in connection.execute(select(table).order_by(table.c.seq)):
        try:
            body = json.loads(r.body)
        except ValueError:
            body = {"unreadable": r.body}
        found.append(Row(r.seq, r.dataset, r.kind, body, r.prev_sha256, r.sha256, r.signer, r.signature))
    return found


_METADATA: Any = None


def _tables() -> Any:
    """The schema (built once, when a ledger is first used: SQLAlchemy loads only then)."""
    global _METADATA
    if _METADATA is None:
        from sqlalchemy import Column, Integer, MetaData, String, Table, Text

        metadata = MetaData()
        Table(
            "ledger_rows",
            metadata,
            Column("seq", Integer, primary_key=True, autoincrement=False),
            Column("dataset", String(64), nullable=False),
            Column("kind", String(16), nullable=False),
            Column("body", Text, nullable=False),
            Column("prev_sha256", String(64), nullable=False, unique=True),
            Column("sha256", String(64), nullable=False, unique=True),
            Column("signer", String(80), nullable=False),
            Column("signature", Text, nullable=False),
        )
        Table("ledger_meta", metadata, Column("key", String(64), primary_key=True), Column("value", Text))
        _METADATA = metadata
    return _METADATA


def _meta() -> Any:
    return _tables().tables["ledger_meta"]
