"""One Postgres server per test session, a fresh schema wherever a test needs a clean store.

``MEMPROXY_TEST_PG_URL`` (set by ``.ci/run``) names a running server; without it the
session starts a throwaway cluster itself (``memproxy.testing.pg_cluster``). When no server
can be had, Postgres tests skip on a developer's machine but FAIL when ``CI=true``.

A fresh schema (``CREATE SCHEMA``, named in the URL's ``search_path``) costs a few
milliseconds, a fresh database a few hundred; so tests get schemas, all in one database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import psycopg
import pytest

from memproxy.testing.pg_cluster import PostgresCluster

TEST_DATABASE = "memproxy_test"


@dataclass
class PostgresServer:
    admin_url: str  # the ``postgres`` database
    cluster: PostgresCluster | None  # None: started by someone else (CI)

    @property
    def url(self) -> str:
        return self.admin_url.rsplit("/", 1)[0] + "/" + TEST_DATABASE

    def fresh_url(self, prefix: str = "t") -> str:
        """A URL whose ``search_path`` is a new, empty schema."""
        schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return f"{self.url}?options={quote(f'-csearch_path={schema}')}"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Postgres is required in CI: {reason}")
    pytest.skip(f"no Postgres server: {reason}")


def start_server(own: bool = False) -> Iterator[PostgresServer]:
    """The session's server (``MEMPROXY_TEST_PG_URL`` if set), or with ``own`` always a new
    cluster that the caller may stop and start."""
    given = None if own else os.environ.get("MEMPROXY_TEST_PG_URL")
    cluster = None
    if given:
        admin_url = given
    else:
        try:
            cluster = PostgresCluster.start()
        except Exception as exc:
            _unavailable(f"could not start one: {exc}")
        assert cluster is not None
        admin_url = cluster.url()
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (TEST_DATABASE,)).fetchone()
            if exists is None:
                conn.execute(f"CREATE DATABASE {TEST_DATABASE}")
    except psycopg.Error as exc:
        if cluster is not None:
            cluster.stop()
        _unavailable(f"{admin_url} unreachable: {exc}")
    try:
        yield PostgresServer(admin_url, cluster)
    finally:
        if cluster is not None:
            cluster.stop()
