"""How leasectl decides it is behind a connection pooler, and what it then says (console.db.pooler);
the pooler itself is tests/pooler's."""

from __future__ import annotations

import pytest

from console.db import sql
from console.db.pooler import Pooler, judge, pooler_prepares, pooler_setting
from console.shared.errors import BadInput


@pytest.fixture(autouse=True)
def no_setting(monkeypatch):
    monkeypatch.delenv("LEASECTL_POOLER", raising=False)
    monkeypatch.delenv("LEASECTL_POOLER_PREPARES", raising=False)


def test_auto_finds_a_pooler_by_the_process_that_answers():
    assert pooler_setting() == "auto"
    assert judge("auto", started_as=4242, answered_by=4242) is None  # the server itself, or a TCP proxy
    found = judge("auto", started_as=-2046985539, answered_by=4242)  # PgBouncer's own cancel key
    assert found is not None and found.mode == "transaction" and not found.prepares
    assert "4242" in found.how and "LEASECTL_POOLER=session" in found.how


def test_the_setting_overrides_what_auto_would_find(monkeypatch):
    assert judge("none", started_as=1, answered_by=2) is None
    told = judge("transaction", started_as=1, answered_by=1)
    assert told is not None and told.how == "LEASECTL_POOLER=transaction" and not told.keeps_sessions
    session = judge("session", started_as=1, answered_by=2)
    assert session is not None and session.keeps_sessions and session.prepares
    monkeypatch.setenv("LEASECTL_POOLER_PREPARES", "on")
    assert pooler_prepares() and judge("transaction", started_as=1, answered_by=1).prepares


@pytest.mark.parametrize(("name", "value"), [("LEASECTL_POOLER", "pgbouncer"), ("LEASECTL_POOLER_PREPARES", "maybe")])
def test_a_setting_it_does_not_know_is_refused_with_the_ones_it_does(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(BadInput, match=name):
        pooler_setting() if name == "LEASECTL_POOLER" else pooler_prepares()


def test_what_a_transaction_pooler_changes_is_said_and_a_session_pooler_changes_nothing():
    changes = " ".join(Pooler("transaction", "told").changes())
    for words in ("no session state", "prepared statements off", "no LISTEN/NOTIFY", "migrate", "pg_stat_activity"):
        assert words in changes
    assert "prepared statements on" in " ".join(Pooler("transaction", "told", prepares=True).changes())
    assert Pooler("session", "told", prepares=True).changes()[0].startswith("nothing")


def test_only_a_set_transaction_must_come_before_the_transactions_settings():
    flagged = [name for name in sql.all_query_names() if sql.load(name).sets_transaction]
    assert flagged == ["meta/snapshot"]
    # every setting of meta/session_setup.sql has its per-transaction form
    assert set(sql.load("meta/transaction_setup").params) == {
        *sql.load("meta/session_setup").params, "role", "clock"}
