"""The ledger's database as the doctor reads it: which file or server, and its migration; nothing written."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from jupyterhub_gpu.ledger.store import MIGRATIONS


def sqlite_path(url: str, here: Path) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(here, parsed.database)


def same_database(a: str, b: str, here: Path) -> bool:
    ua, ub = make_url(a), make_url(b)
    if ua.get_backend_name() == ub.get_backend_name() == "sqlite":
        return Path(here, ua.database or "").resolve() == Path(here, ub.database or "").resolve()
    return ua == ub


def migration_head() -> str:
    """The newest migration this jupyterhub-gpu has."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def known_migrations() -> set[str]:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return {s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()}


def database_revision(db_url: str, timeout: float) -> tuple[str | None, bool]:
    """The database's migration (None: none recorded) and whether it has any table; reads only."""
    url = make_url(db_url)
    args = {}
    if url.get_backend_name() == "sqlite":
        args = {"timeout": timeout}
    elif url.get_backend_name() == "postgresql":
        args = {"connect_timeout": max(1, int(timeout))}
    engine_ = create_engine(url, connect_args=args)
    try:
        with engine_.connect() as connection:
            tables = inspect(connection).get_table_names()
            return MigrationContext.configure(connection).get_current_revision(), bool(tables)
    finally:
        engine_.dispose()
