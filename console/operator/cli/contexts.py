"""`leasectl contexts [--json]`: the contexts of contexts.toml (console.shared.contexts), passwords
masked, each asked at once whether it answers (console.db.probe: connect and one round trip,
3 s each at most), and which one is current (--context or LEASECTL_CONTEXT).

A listing: exit 0 even when some are down (they say so, loudly, and why); 2 when the current name
(--context or LEASECTL_CONTEXT) is not in the file, after the listing that shows the known ones.
"""

from __future__ import annotations

from rich.markup import escape

from console.db.probe import PROBE_SECONDS, probe_all
from console.operator.cli.common import JsonOption, app, before, err, friendly, out, print_json
from console.operator.present.contexts import NO_CONTEXTS_HINT, contexts_summary, contexts_table, no_contexts
from console.shared.contexts import contexts_path, load_contexts, resolve_context
from console.shared.text import sanitize

# `contexts --json`: one object a context, in the file's order (docs/contract.md §7)
JSON_KEYS = ("name", "dsn", "read_dsn", "operator", "read_only", "production", "colour", "trace_url", "current",
             "answers", "answered_in_ms", "error")


@app.command("contexts")
@friendly
def contexts_command(as_json: JsonOption = False) -> None:
    """The contexts of contexts.toml (passwords masked), whether each answers, and the current one."""
    path = contexts_path()
    found = load_contexts(path)
    current = before().context_name
    answers = probe_all({name: context.dsn for name, context in found.items()}, timeout=PROBE_SECONDS)
    listed = list(found.values())
    if as_json:
        rows = [{**context.masked(), "current": context.name == current, **answers[context.name].model_dump()}
                for context in listed]
        print_json([{key: row[key] for key in JSON_KEYS} for row in rows])
    elif not listed:
        err.print(escape(no_contexts(sanitize(str(path), max_chars=200))))
        err.print(f"[dim]hint:[/] {escape(NO_CONTEXTS_HINT)}")
    else:
        out.print(contexts_table(listed, answers, current))
        out.print(contexts_summary(listed, answers, current, str(path)))
    if current is not None:
        resolve_context(current, path)  # an unknown current name: exit 2, naming the known ones
