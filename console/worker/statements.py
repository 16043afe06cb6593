"""How the worker sends the shared SQL: queries/<name>.sql through console.db.sql, errors
translated by console.db.connect, rows as dicts.

Not console.db.connect.run: that one asks the cursor for its `description` to tell a statement
that returns rows from one that does not, and psycopg builds a Column object per column for it,
about 55 us for the 19 columns of a claim. Every worker statement returns rows (RETURNING or
SELECT), so the worker only fetches; the dict keys come from the result's field names.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from console.db import sql
from console.db.connect import Conn, Row, translate_error
from console.db.pooler import send


def rows(conn: Conn, name: str, /, **params: Any) -> list[Row]:
    """Execute `queries/<name>.sql` (a statement that returns rows) with named parameters."""
    query = sql.load(name)
    values = query.bind(params)
    try:
        return send(conn, query, values).fetchall()
    except psycopg.Error as exc:
        raise translate_error(exc, query.path) from exc


def first(conn: Conn, name: str, /, **params: Any) -> Row | None:
    found = rows(conn, name, **params)
    return found[0] if found else None


def _verbatim(body: Any) -> Any:
    return body


def result_param(body: bytes) -> Jsonb:
    """A serialised result (console.worker.calls.serialise_result) as a statement parameter, sent as
    it is (psycopg does not serialise it again): the bytes hashed for a rejection are exactly the
    bytes a completion sends."""
    return Jsonb(body, dumps=_verbatim)
