"""PostgreSQL output (`output db postgres dsn postgresql://...`): the SQLite output's schema, runs and claims
(outputs/sqlite.py, resultsdb.py) in a database several Blueprint drivers share. Needs psycopg 3 (the `postgres`
extra). docs/blueprint.md ("PostgreSQL") and docs/operations.md ("PostgreSQL results") say how to set it up."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from firstfault.blueprint import resultsdb
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.blueprint.outputs.sqlite import DEFAULT_HISTORY, DEFAULT_LEASE, HISTORY_DOC, LEASE_DOC, SqlOutput


@dataclass(frozen=True)
class PostgresOptions(LabelOptions):
    dsn: str | None = option(None, "the database: `postgresql://USER@HOST:PORT/DB` or libpq's `key=value` form (a password is better kept in "
                                   "~/.pgpass or $PGPASSWORD than in the DSN; any libpq parameter works)",
                             required=True)
    db: str = option("postgres", "the database kind (`output db postgres` declares it)", choices=["postgres"])
    lease: timedelta = option(DEFAULT_LEASE, LEASE_DOC)
    history: timedelta = option(DEFAULT_HISTORY, HISTORY_DOC)


class PostgresOutput(SqlOutput):
    Options = PostgresOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(PostgresOptions, spec)
        assert options.dsn is not None   # required
        self.dsn = options.dsn
        super().__init__(options.label or spec.name, self.dsn, options.lease, options.history)

    def connect(self) -> resultsdb.Database:
        return resultsdb.connect_postgres(self.dsn, application="firstfault claims")
