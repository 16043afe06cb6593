"""Connection strings on their way to a person: never the password.

A DSN reaches messages in more ways than one: leasectl's own words ("--dsn is given twice,
before the command (...) and after it (...)", the demo's "database: ..."), and libpq's, which
echo what they could not parse (`missing "=" after "postgresql//alice:secret@db" in connection
info string`, `invalid percent-encoded token: "secret"`). A terminal, a shell's scrollback, a CI
log and a ticket all keep them.

The masking is textual, not a parse: the strings that most need it are the ones libpq could not
parse. It keeps the DSN's shape (a URI stays a URI, so a person still recognises it) and leaves an
empty password as it is (the demo's `postgres:@` still connects when pasted).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

# postgresql://user:PASSWORD@host (any scheme-looking prefix: `postgresql//` is a typo libpq echoes)
_URI_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*:?//[^:@/\s'\"]*:)(?P<secret>[^@\s'\"]*)(?P<tail>@)")
# ?password=... or &sslpassword=... in a URI's query
_URI_PARAM = re.compile(r"(?P<head>[?&](?:ssl)?password=)(?P<secret>[^&#\s'\"]*)(?P<tail>)", re.IGNORECASE)
# password=... or password = '...' in key=value form (a quoted value may be unterminated; after ? or &
# it is a URI's query, above)
_KEYWORD = re.compile(r"(?P<head>(?<![\w.?&])(?:ssl)?password\s*=\s*)"
                      r"(?P<secret>'(?:[^'\\]|\\.)*'?|[^\s'\"]+)(?P<tail>)", re.IGNORECASE)
_PATTERNS = (_URI_USERINFO, _URI_PARAM, _KEYWORD)
SHORTEST_ECHOED_SECRET = 4  # a shorter password is not searched for on its own in a message


def _masked(match: re.Match[str]) -> str:
    secret = match.group("secret")
    if secret in ("", "''"):
        return match.group(0)  # no password: nothing to hide, and the string still works
    return f"{match.group('head')}{MASK}{match.group('tail')}"


def masked_dsn(dsn: str) -> str:
    """The connection string with every password (URI user info, `password=` in either form,
    `sslpassword`) replaced by ***; anything else as it was."""
    for pattern in _PATTERNS:
        dsn = pattern.sub(_masked, dsn)
    return dsn


def passwords_in(dsn: str) -> list[str]:
    """The non-empty passwords a connection string carries (raw and percent-decoded), as written."""
    found: list[str] = []
    for pattern in _PATTERNS:
        for match in pattern.finditer(dsn):
            secret = match.group("secret")
            if secret.startswith("'"):
                secret = secret.strip("'").replace("\\'", "'").replace("\\\\", "\\")
            for form in (secret, unquote(secret)):
                if form and form not in found:
                    found.append(form)
    return found


def mask_secrets(text: str, dsn: str | None = None) -> str:
    """A message safe to print: any DSN-looking password in it masked, and, given the DSN the
    message is about, that DSN's passwords wherever they appear (libpq quotes the token it could
    not parse, which may be the password alone)."""
    if dsn:
        for secret in sorted(passwords_in(dsn), key=len, reverse=True):
            if len(secret) >= SHORTEST_ECHOED_SECRET:
                text = text.replace(secret, MASK)
    return masked_dsn(text)
