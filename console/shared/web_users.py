"""Who may sign in to the web console (`leasectl serve`), and as whom each person works.

    $XDG_CONFIG_HOME/leasectl/web-users.toml   (default ~/.config/leasectl/web-users.toml)

    [users.alice]
    password = "scrypt$16384$8$1$<salt>$<hash>"   # `leasectl serve users add alice` writes it
    role = "operator"          # operator: may act as far as db_user's grants allow; viewer: read-only
    operator = "alice"         # optional: the name journaled with her actions (default: the key)
    db_user = "alice"          # optional: the PostgreSQL login her console runs as (default: serve's own)

    [users.victor]
    role = "viewer"            # read-only in the database, whatever db_user may do
    db_user = "victor_ro"

Passwords are kept as scrypt hashes (Python's hashlib, OpenSSL's scrypt: memory-hard, salted, no
new dependency); the file holds no database secret: a db_user's password, where the server asks
for one, comes from libpq's own password file (PGPASSFILE, ~/.pgpass) of the account serve runs
under. Behind a reverse proxy that signs people in (`serve --trusted-header`), a person needs no
password here, only an entry: the proxy names them, this file says who they are to the database.

One module reads the file for `serve` and `serve users`; tomlkit edits it keeping its comments.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from console.shared.config import MAX_OPERATOR_CHARS
from console.shared.contexts import read_toml
from console.shared.errors import BadInput

USERS_ENV = "LEASECTL_WEB_USERS"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$")
# a PostgreSQL login name as serve passes it to libpq: plain identifiers only (no quoting games)
_LOGIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")

# scrypt's cost: 2^14 x 8 x 1 is 16 MiB and ~50 ms a check here (the interactive-login figure of
# RFC 7914 §2 and OWASP's password storage cheat sheet); a stored hash carries its own parameters
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024
MIN_PASSWORD = 10

Role = Literal["operator", "viewer"]


class WebUser(BaseModel):
    """One person, as the file says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: Role
    password: str | None = None
    operator: str | None = None
    db_user: str | None = None

    @field_validator("password")
    @classmethod
    def _hash_shape(cls, value: str | None) -> str | None:
        if value is not None:
            _parse_hash(value)
        return value

    @field_validator("db_user")
    @classmethod
    def _login_shape(cls, value: str | None) -> str | None:
        if value is not None and not _LOGIN.match(value):
            raise ValueError(f"not a plain PostgreSQL login name: {value!r}")
        return value

    @field_validator("operator")
    @classmethod
    def _operator_shape(cls, value: str | None) -> str | None:
        if value is not None and not (1 <= len(value) <= MAX_OPERATOR_CHARS and value.isprintable()
                                      and value.strip() == value):
            raise ValueError(f"an operator name is 1 to {MAX_OPERATOR_CHARS} printable characters, no spaces "
                             "around it")
        return value

    @property
    def operator_name(self) -> str:
        return self.operator or self.name

    @property
    def read_only(self) -> bool:
        return self.role == "viewer"


def users_path() -> Path:
    explicit = os.environ.get(USERS_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "leasectl" / "web-users.toml"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise BadInput(f"'{name}' is not a user name: letters, digits and _ . @ - (up to 63, not starting "
                       "with a sign)")
    return name


def load_users(path: Path | None = None) -> dict[str, WebUser]:
    """Every person in the file; no file: none. A file that does not parse, an unknown key or a
    hash that is not one this module wrote is an error naming the place (exit 2): a typo must not
    sign somebody in as someone else, nor quietly lock them out."""
    where = path or users_path()
    document = read_toml(where)
    if document is None:
        return {}
    unknown = set(document) - {"users"}
    if unknown:
        raise BadInput(f"{where}: unknown table(s) {', '.join(sorted(unknown))}: only [users.NAME] tables belong here")
    table = document.get("users", {})
    if not isinstance(table, dict):
        raise BadInput(f"{where}: 'users' must be tables ([users.NAME])")
    users: dict[str, WebUser] = {}
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise BadInput(f"{where}: users.{name} must be a table")
        check_name(name)
        try:
            users[name] = WebUser(name=name, **entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or name}: {e['msg']}" for e in exc.errors())
            raise BadInput(f"{where}: users.{name}: {problems}") from None
    return users


def loose_permissions(path: Path) -> str | None:
    """Why the file is readable by others (its hashes can be attacked offline), or None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"{path} is readable by others (mode {stat.filemode(mode)}): chmod 600 {path}"
    return None


# --- passwords ------------------------------------------------------------------------------------

def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    try:
        if len(parts) != 6 or parts[0] != "scrypt":
            raise ValueError
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
        if n < 2**10 or n & (n - 1) or not (1 <= r <= 32) or not (1 <= p <= 16) or len(salt) < 16 or len(digest) < 32:
            raise ValueError
    except (ValueError, TypeError):
        raise ValueError("not a password hash `leasectl serve users add` writes (scrypt$N$r$p$salt$hash)") from None
    return n, r, p, salt, digest


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=32)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


# a hash checked when the name is unknown or has no password, so that a wrong name costs what a
# wrong password costs and the time taken does not say which names exist
_NOBODY = hash_password(secrets.token_urlsafe(16))


def verify_password(stored: str | None, password: str) -> bool:
    n, r, p, salt, digest = _parse_hash(stored if stored is not None else _NOBODY)
    found = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM,
                           dklen=len(digest))
    return hmac.compare_digest(found, digest) and stored is not None


def check_password_strength(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise BadInput(f"a password is at least {MIN_PASSWORD} characters")
    if password != password.strip():
        raise BadInput("a password does not begin or end with a space (a copy-paste slip would lock you out)")


# --- editing the file (keeping its comments) -----------------------------------------------------

def _read_document(path: Path):  # type: ignore[no-untyped-def]
    import tomlkit

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    load_users(path)  # refuse to edit a file that does not parse as a users file
    return tomlkit.parse(text)


def _write_document(path: Path, document) -> None:  # type: ignore[no-untyped-def]
    import tomlkit

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
    # 0600 from the first byte: the hashes are never readable by others, not even for a moment
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(tomlkit.dumps(document))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def save_user(path: Path, user: WebUser, *, replace: bool = False) -> None:
    import tomlkit

    document = _read_document(path)
    users = document.setdefault("users", tomlkit.table(is_super_table=True))
    if user.name in users and not replace:
        raise BadInput(f"{user.name} is already in {path}: --replace sets a new password and role")
    entry = tomlkit.table()
    entry["role"] = user.role
    if user.password is not None:
        entry["password"] = user.password
    if user.operator is not None:
        entry["operator"] = user.operator
    if user.db_user is not None:
        entry["db_user"] = user.db_user
    users[user.name] = entry
    _write_document(path, document)


def remove_user(path: Path, name: str) -> None:
    document = _read_document(path)
    users = document.get("users")
    if users is None or name not in users:
        raise BadInput(f"{name} is not in {path}")
    del users[name]
    _write_document(path, document)
