"""The web console's sign-in rules (console/core/signin.py) and its users file
(console/shared/web_users.py), at chosen instants."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from console.core.signin import (
    MAX_FAILURES,
    Sessions,
    SignInLimits,
    TryLimiter,
    allowed_host,
    allowed_origin,
    split_host,
)
from console.shared.errors import BadInput
from console.shared.web_users import (
    WebUser,
    check_password_strength,
    hash_password,
    load_users,
    loose_permissions,
    remove_user,
    save_user,
    verify_password,
)

NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})


def test_a_name_gets_five_tries_in_the_window_then_waits_for_the_oldest_to_leave_it():
    limiter = TryLimiter(MAX_FAILURES, window=900)
    for i in range(MAX_FAILURES):
        assert limiter.wait("alice", 100 + i) == 0
        limiter.failed("alice", 100 + i)
    assert limiter.wait("alice", 105) == pytest.approx(895)
    assert limiter.wait("bob", 105) == 0, "another name is not held back"
    assert limiter.wait("alice", 1000) == 0, "the oldest failure (t=100) left the window at 1000"
    limiter.failed("alice", 1000)
    assert limiter.wait("alice", 1000) == pytest.approx(1), "still five within the window: t=101..1000"


def test_a_limiter_remembers_only_what_decides_something():
    limiter = TryLimiter(3, window=10)
    for i in range(1000):
        limiter.failed("x", float(i) / 1000)
    assert len(limiter._failures["x"]) == 3
    assert limiter.wait("x", 100) == 0 and len(limiter) == 0, "a key whose failures all expired is forgotten"


def test_names_and_addresses_are_limited_apart_and_a_success_clears_its_name():
    limits = SignInLimits()
    for i in range(MAX_FAILURES):
        limits.failed("Alice", f"10.0.0.{i}", 0)
    assert limits.wait("alice", "10.0.0.99", 1) > 0, "many addresses cannot guess one name's password (case-blind)"
    limits.succeeded("ALICE")
    assert limits.wait("alice", "10.0.0.99", 1) == 0
    for i in range(20):
        limits.failed(f"name{i}", "10.9.9.9", 0)
    assert limits.wait("somebody-else", "10.9.9.9", 1) > 0, "one address cannot walk through every name"
    assert limits.wait("somebody-else", "10.9.9.8", 1) == 0


def test_a_burst_of_tries_at_one_instant_is_counted_before_any_password_is_checked():
    """Found by an attack walk: the count came after the (awaited) check, so 19 tries sent at once
    all passed a limit of five, the right password among them."""
    limits = SignInLimits()
    allowed = [limits.attempt("carol", "10.0.0.1", 0) == 0 for _ in range(19)]
    assert allowed.count(True) == MAX_FAILURES
    allowed = [limits.attempt(f"n{i}", "10.0.0.2", 0) == 0 for i in range(100)]
    assert allowed.count(True) == 20, "one address: twenty, whatever the names"


def test_a_right_password_takes_back_its_own_count():
    limits = SignInLimits()
    for now in range(20):
        assert limits.attempt(f"p{now}", "10.0.0.3", now) == 0
        limits.succeeded(f"p{now}", "10.0.0.3", now)
    assert limits.wait("anyone", "10.0.0.3", 21) == 0, "twenty people signing in from one office"


def test_a_session_ends_idle_or_at_its_lifetime_whichever_first():
    sessions = Sessions(idle=60, lifetime=300)
    s = sessions.start("alice", 0)
    assert len(s.token) >= 43 and sessions.find(s.token, 59) is s
    assert sessions.find("forged", 1) is None and sessions.find(None, 1) is None
    sessions.touch(s, 50)
    assert sessions.find(s.token, 100) is s, "a keystroke at 50 keeps it until 110"
    assert sessions.find(s.token, 110) is None
    assert [(x.person, why) for x, why in sessions.reap(110)] == [("alice", "no keystroke for 1 min")]
    assert len(sessions) == 0
    t = sessions.start("bob", 0)
    for now in range(0, 300, 30):
        sessions.touch(t, now)
    assert sessions.find(t.token, 299) is t
    assert sessions.reap(300) == [(t, "the session's lifetime of 5 min ended")]


def test_two_sessions_of_one_person_have_different_tokens_and_end_apart():
    sessions = Sessions()
    a, b = sessions.start("alice", 0), sessions.start("alice", 0)
    assert a.token != b.token
    assert sessions.end(a.token) is a and sessions.find(b.token, 1) is b


@pytest.mark.parametrize("host, ok", [
    ("127.0.0.1:8022", True), ("localhost:8022", True), ("[::1]:8022", True), ("LOCALHOST:8022", True),
    ("127.0.0.1", False), ("127.0.0.1:80", False), ("127.0.0.1:8023", False), ("evil.example:8022", False),
    ("127.0.0.1.evil.example:8022", False), ("", False), (None, False), ("127.0.0.1:8022:1", False),
])
def test_host_header_names_this_server_or_is_refused(host, ok):
    assert allowed_host(host, NAMES, 8022) is ok


@pytest.mark.parametrize("origin, ok", [
    ("http://127.0.0.1:8022", True), ("http://localhost:8022", True), ("http://[::1]:8022", True),
    ("https://127.0.0.1:8022", False), ("http://127.0.0.1:8023", False), ("http://127.0.0.1", False),
    ("http://evil.example:8022", False), ("null", False), ("", False), (None, False),
    ("http://user@127.0.0.1:8022", False), ("http://:x@127.0.0.1:8022", False), ("http://127.0.0.1:8022/path", False),
    ("http://127.0.0.1:8022.evil", False), ("http://127.0.0.1:99999", False), ("http://127.0.0.1:+8022", False),
])
def test_only_this_servers_own_origin_is_accepted(origin, ok):
    assert allowed_origin(origin, "http", NAMES, 8022) is ok


def test_an_https_origin_on_the_default_port():
    names = frozenset({"console.example"})
    assert allowed_origin("https://console.example", "https", names, 443)
    assert not allowed_origin("http://console.example", "https", names, 443)
    assert split_host("Console.Example") == ("console.example", None)
    # behind a proxy (nginx's `Host $host` carries no port): the scheme's own port
    assert allowed_host("console.example", names, 443, "https")
    assert not allowed_host("console.example", names, 443, "http")


# --- the users file --------------------------------------------------------------------------------

def test_a_password_is_checked_against_its_hash_and_nothing_else():
    stored = hash_password("correct horse battery", n=2**10)
    assert stored.startswith("scrypt$1024$8$1$")
    assert verify_password(stored, "correct horse battery")
    assert not verify_password(stored, "correct horse batterY")
    assert not verify_password(None, "anything"), "no hash: never signed in (and as slow as a wrong one)"
    assert hash_password("same") != hash_password("same"), "salted"


@pytest.mark.parametrize("bad", ["short", " leading space 1", "trailing space 1 "])
def test_weak_or_mistyped_passwords_are_refused(bad):
    with pytest.raises(BadInput):
        check_password_strength(bad)


def test_the_file_is_written_0600_keeps_comments_and_round_trips(tmp_path: Path):
    path = tmp_path / "users.toml"
    path.write_text("# who may sign in\n", encoding="utf-8")
    os.chmod(path, 0o644)
    assert loose_permissions(path) is not None
    save_user(path, WebUser(name="alice", role="operator", password=hash_password("x" * 12, n=2**10),
                            db_user="web_alice"))
    save_user(path, WebUser(name="victor", role="viewer", password=None, operator="Victor V."))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and loose_permissions(path) is None
    assert path.read_text().startswith("# who may sign in")
    users = load_users(path)
    assert users["alice"].db_user == "web_alice" and users["alice"].operator_name == "alice"
    assert users["victor"].read_only and users["victor"].operator_name == "Victor V."
    with pytest.raises(BadInput, match="already"):
        save_user(path, WebUser(name="alice", role="viewer"))
    save_user(path, WebUser(name="alice", role="viewer"), replace=True)
    assert load_users(path)["alice"].role == "viewer"
    remove_user(path, "alice")
    assert set(load_users(path)) == {"victor"}
    with pytest.raises(BadInput, match="not in"):
        remove_user(path, "alice")


@pytest.mark.parametrize("text, says", [
    ("[users.a]\nrole = 'admin'\n", "role"),
    ("[users.a]\nrole = 'operator'\npassword = 'plain-text'\n", "scrypt"),
    ("[users.a]\nrole = 'operator'\nextra = 1\n", "extra"),
    ("[users.a]\nrole = 'operator'\ndb_user = 'x; drop'\n", "login"),
    ("[users.'bad name']\nrole = 'operator'\n", "not a user name"),
    ("[people.a]\nrole = 'operator'\n", "unknown table"),
    ("[users.a\n", "not valid TOML"),
])
def test_a_file_that_could_sign_in_the_wrong_person_is_refused_naming_the_place(tmp_path: Path, text, says):
    path = tmp_path / "users.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput, match=says):
        load_users(path)


def test_no_file_is_nobody(tmp_path: Path):
    assert load_users(tmp_path / "missing.toml") == {}


# --- an export in a browser tab -----------------------------------------------------------------------

@pytest.mark.parametrize("typed", ["../../root/.ssh/authorized_keys", "/etc/cron.d/x", "~/.pgpass",
                                   "..\\..\\web-users.toml", "  report.jsonl  "])
def test_an_export_in_a_browser_keeps_only_the_name_and_writes_in_a_private_directory(typed):
    from console.operator.tui.screens.export import web_target

    target = web_target(typed)
    assert target.name == Path(typed.strip().replace("\\", "/")).name
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700, "mkdtemp's own directory: nobody else's"
    assert target.parent.name.startswith(f"leasectl-web-export-{os.getpid()}-"), "its process is named"


def test_the_downloads_of_a_killed_console_are_removed_and_no_one_elses(tmp_path):
    """A console killed with SIGKILL cannot remove its directory; `leasectl serve` does, at start and
    as it reaps: only directories whose process is gone, only its own user's."""
    import subprocess
    import sys

    from console.operator.files import WEB_EXPORT_PREFIX, remove_orphaned_export_directories

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    orphan = tmp_path / f"{WEB_EXPORT_PREFIX}{ended.pid}-abc"
    orphan.mkdir(mode=0o700)
    (orphan / "calls.jsonl").write_text("{}\n")
    mine = tmp_path / f"{WEB_EXPORT_PREFIX}{os.getpid()}-def"
    mine.mkdir(mode=0o700)
    odd = tmp_path / f"{WEB_EXPORT_PREFIX}notapid"
    odd.mkdir()
    a_file = tmp_path / f"{WEB_EXPORT_PREFIX}{ended.pid}-file"
    a_file.write_text("not a directory")
    assert remove_orphaned_export_directories(tmp_path) == [orphan]
    assert not orphan.exists() and mine.exists() and odd.exists() and a_file.exists()


@pytest.mark.parametrize("typed", ["", "   ", "..", "."])
def test_an_export_without_a_name_is_refused(typed):
    from console.operator.tui.screens.export import web_target

    with pytest.raises(BadInput):
        web_target(typed)
