"""`leasectl serve` (the console in a browser) and `leasectl serve users` (who may sign in)."""

from __future__ import annotations

import getpass
import ipaddress
import sys
from pathlib import Path
from typing import Annotated

import typer

from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    app,
    chosen_context,
    connect_for_reading,
    dsn_option,
    err,
    friendly,
    out,
    print_json,
    read_dsn_option,
    read_only_option,
)
from console.shared.errors import BadInput, LeasectlError
from console.shared.times import DURATION_FORMS, parse_duration

SERVE_LISTEN = "127.0.0.1:8022"

serve_app = typer.Typer(name="serve", add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                        context_settings={"help_option_names": ["-h", "--help"]},
                        help="The console in a browser, each person signed in; `serve users` says who may.")
app.add_typer(serve_app)
users_app = typer.Typer(name="users", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                        help="Who may sign in to `leasectl serve`, and as whom each works in the database.")
serve_app.add_typer(users_app)

UsersOption = Annotated[Path | None, typer.Option("--users", show_default=False, help="The users file (default: "
                                                  "$LEASECTL_WEB_USERS, else ~/.config/leasectl/web-users.toml)")]


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not (0 <= int(port_text) <= 65535):
        raise BadInput(f"--listen {text}: give HOST:PORT, e.g. {SERVE_LISTEN}")
    if int(port_text) == 0:
        raise BadInput(f"--listen {text}: give the port people will open (the browser's Origin names it)")
    host = host.strip("[]") or "127.0.0.1"
    if host not in ("localhost", "0.0.0.0", "::"):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise BadInput(f"--listen {text}: the host is an IP address (or localhost), not a name") from None
    return host, int(port_text)


@serve_app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve on (loopback unless TLS is configured "
                                        "or --insecure-listen is given)")] = SERVE_LISTEN,
    users: UsersOption = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", show_default=False, help="PEM certificate (chain): "
                                                  "serve HTTPS; cookies become Secure")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", show_default=False, help="its PEM private key")] = None,
    insecure_listen: Annotated[bool, typer.Option("--insecure-listen", help="Serve on a non-loopback address "
                                                  "without TLS (passwords in clear text: says so loudly)")] = False,
    trusted_header: Annotated[str | None, typer.Option("--trusted-header", show_default=False, metavar="HEADER",
                                                       help="A reverse proxy signs people in and names them in this "
                                                            "header (e.g. X-Forwarded-User); no password form")] = None,
    trusted_proxy: Annotated[list[str] | None, typer.Option("--trusted-proxy", show_default=False, metavar="ADDR",
                                                            help="The proxy's address; only it may reach the "
                                                                 "server (default 127.0.0.1 and ::1)")] = None,
    public_url: Annotated[str | None, typer.Option("--public-url", show_default=False, help="The URL people open "
                                                   "(behind a proxy: https://console.example): its scheme, name "
                                                   "and port are the only Origin accepted")] = None,
    allow_host: Annotated[list[str] | None, typer.Option("--allow-host", show_default=False, metavar="NAME",
                                                         help="Another host name browsers use for this server")] = None,
    idle: Annotated[str, typer.Option("--idle", help=f"A session ends after this long without a key ({DURATION_FORMS})"
                                      )] = "30m",
    lifetime: Annotated[str, typer.Option("--session", help="A session ends this long after sign-in, whatever")
                        ] = "12h",
    max_consoles: Annotated[int, typer.Option("--max-consoles", min=1, max=500, help="Browser tabs served at once "
                                              "(each is a console process with its connections)")] = 16,
    label: Annotated[str | None, typer.Option("--label", show_default=False, help="What the console's header "
                                              "calls this database (default: the context's name, else "
                                              "host/database)")] = None,
    dsn: DsnOption = None,
) -> None:
    """Serve the console to browsers at http://127.0.0.1:8022/. Each person signs in (the users file,
    or a trusted reverse proxy) and works under their own operator name and database login; a
    viewer is read-only in the database. A websocket from another Origin is refused."""
    if ctx.invoked_subcommand is not None:
        return
    friendly(_serve)(listen, users, tls_cert, tls_key, insecure_listen, trusted_header, trusted_proxy, public_url,
                     allow_host, idle, lifetime, max_consoles, label, dsn)


def _serve(listen: str, users: Path | None, tls_cert: Path | None, tls_key: Path | None, insecure_listen: bool,
           trusted_header: str | None, trusted_proxy: list[str] | None, public_url: str | None,
           allow_host: list[str] | None, idle: str, lifetime: str, max_consoles: int, label: str | None,
           dsn: str | None) -> None:
    from urllib.parse import urlsplit

    from console.db.web import may_journal
    from console.operator.present.web import LOUD_INSECURE, NO_USERS, NOT_LOOPBACK
    from console.operator.web.server import ServeConfig, is_loopback, run, tls_context
    from console.shared.web_users import load_users, loose_permissions, users_path

    host, port = parse_listen(listen)
    if (tls_cert is None) != (tls_key is None):
        raise BadInput("--tls-cert and --tls-key go together")
    if tls_cert is not None and tls_key is not None:
        try:
            tls_context(tls_cert, tls_key)
        except (OSError, ValueError) as exc:
            raise BadInput(f"--tls-cert/--tls-key: cannot load them: {exc}") from None
    if public_url is not None:
        parts = urlsplit(public_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise BadInput(f"--public-url {public_url}: give scheme://host[:port], e.g. https://console.example")
    if trusted_header is not None and not trusted_header.replace("-", "").isalnum():
        raise BadInput(f"--trusted-header {trusted_header}: a header name (letters, digits and -)")
    if trusted_proxy and trusted_header is None:
        raise BadInput("--trusted-proxy goes with --trusted-header")
    for proxy in trusted_proxy or ():
        try:
            ipaddress.ip_address(proxy)
        except ValueError:
            raise BadInput(f"--trusted-proxy {proxy}: the proxy's IP address (one per option)") from None
    insecure = not is_loopback(host) and tls_cert is None
    if insecure and not insecure_listen:
        raise BadInput(NOT_LOOPBACK.format(host=host))
    where = users or users_path()
    people = load_users(where)
    if not people:
        raise BadInput(NO_USERS.format(path=where))
    loose = loose_permissions(where)
    if loose:
        err.print(f"[bold yellow]warning:[/] {loose}")
    config = ServeConfig(
        dsn=dsn_option(dsn), read_dsn=read_dsn_option(None), host=host, port=port, users_file=where,
        tls_cert=tls_cert, tls_key=tls_key, trusted_header=trusted_header,
        trusted_proxies=frozenset(trusted_proxy) if trusted_proxy else frozenset({"127.0.0.1", "::1"}),
        public_url=public_url.rstrip("/") if public_url else None, allow_hosts=tuple(allow_host or ()),
        idle_seconds=parse_duration(idle, what="--idle"), lifetime_seconds=parse_duration(lifetime, what="--session"),
        max_consoles=max_consoles, read_only=read_only_option(),
        label=label or (context.name if (context := chosen_context()) else None))
    # before anything listens: the database answers, its schema is this release's, and this login
    # may journal sign-ins (else no one could sign in, and they would learn it only then)
    with connect_for_reading(config.dsn, replica=False) as conn:
        may_journal(conn)
    if insecure:
        err.print(f"[bold red]{LOUD_INSECURE.format(host=host)}[/]")
    try:
        run(config, announce=lambda line: print(line, flush=True))
    except OSError as exc:
        raise LeasectlError(f"cannot serve on {listen}: {exc.strerror or exc}",
                            hint="another program holds that port, or the address is not this machine's") from None


# ----------------------------------------------------------------------------- users


def _password(from_stdin: bool) -> str:
    from console.shared.web_users import check_password_strength

    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        if not sys.stdin.isatty():
            raise BadInput("no terminal to ask the password on: give it on standard input with --password-stdin")
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise BadInput("the two passwords differ: nothing was written")
    check_password_strength(password)
    return password


@users_app.command("add")
@friendly
def users_add(
    name: Annotated[str, typer.Argument(help="The name this person signs in with")],
    role: Annotated[str, typer.Option("--role", help="operator (acts as far as the database login may) or viewer "
                                      "(read-only in the database)")],
    operator: Annotated[str | None, typer.Option("--operator", show_default=False, help="Their name in the journal "
                                                 "(default: NAME)")] = None,
    db_user: Annotated[str | None, typer.Option("--db-user", show_default=False, help="The PostgreSQL login their "
                                                "console runs as (default: serve's own; its password, if one is "
                                                "needed, from serve's ~/.pgpass)")] = None,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from standard input "
                                                 "(one line) instead of asking twice")] = False,
    no_password: Annotated[bool, typer.Option("--no-password", help="Signs in through the reverse proxy only "
                                              "(serve --trusted-header)")] = False,
    replace: Annotated[bool, typer.Option("--replace", help="Replace the person's entry (a new password, role...)")
                       ] = False,
    users: UsersOption = None,
) -> None:
    """Add a person who may sign in to `leasectl serve` (the file is written 0600, its comments kept)."""
    from pydantic import ValidationError

    from console.shared.web_users import WebUser, check_name, hash_password, load_users, save_user, users_path

    check_name(name)
    if role not in ("operator", "viewer"):
        raise BadInput(f"--role {role}: operator or viewer")
    if no_password and password_stdin:
        raise BadInput("--no-password and --password-stdin: one or the other")
    where = users or users_path()
    if name in load_users(where) and not replace:  # said before a password is asked for nothing
        raise BadInput(f"{name} is already in {where}: --replace sets a new password and role")
    try:
        user = WebUser(name=name, role=role, operator=operator, db_user=db_user,
                       password=None if no_password else hash_password(_password(password_stdin)))
    except ValidationError as exc:
        raise BadInput("; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}"
                                 for e in exc.errors())) from None
    save_user(where, user, replace=replace)
    err.print(f"{name} may sign in as {role} ({where})")


@users_app.command("list")
@friendly
def users_list(users: UsersOption = None, as_json: JsonOption = False) -> None:
    """Who may sign in, with their role, journal name and database login (never their hash)."""
    from console.operator.present.web import NO_USERS, user_json, users_table
    from console.shared.web_users import load_users, users_path

    where = users or users_path()
    people = list(load_users(where).values())
    if as_json:
        print_json([user_json(u) for u in people])
    elif not people:
        err.print(NO_USERS.format(path=where))
    else:
        out.print(users_table(people))


@users_app.command("remove")
@friendly
def users_remove(name: Annotated[str, typer.Argument(help="The person to remove")], users: UsersOption = None) -> None:
    """Remove a person: they cannot sign in again, and their open tabs end at their next page or
    keystroke check (within seconds)."""
    from console.shared.web_users import remove_user, users_path

    where = users or users_path()
    remove_user(where, name)
    err.print(f"{name} removed from {where}")


__all__ = ["parse_listen", "serve_app"]
