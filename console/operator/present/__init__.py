"""How calls, actions and the fleet are put into words, for the CLI and the console alike.

Rich renderables and plain strings; every value that came from the database passes `sanitize` on
its way in, cut to a bound where it is shown. The CLI prints them; the console's screens place
them. Nothing here imports Textual.
"""

from console.operator.present.actions import action_message, action_verb, guard_of, shutdown_message, words_of
from console.operator.present.calls import (
    archived_history_note,
    call_fields,
    describe_for_confirmation,
    fields_grid,
    history_group,
    history_table,
    job_panel,
    jobs_table,
    lineage_table,
    operator_actions,
    ownership_table,
)
from console.operator.present.fleet import (
    fleet_tables,
    grant_summary,
    proposal_summary,
    reconciliation_panel,
    shutdowns_table,
    subtree_counts,
    subtree_summary,
    unaccounted_block,
)

__all__ = [
    "action_message",
    "action_verb",
    "archived_history_note",
    "call_fields",
    "describe_for_confirmation",
    "fields_grid",
    "fleet_tables",
    "grant_summary",
    "guard_of",
    "history_group",
    "history_table",
    "job_panel",
    "jobs_table",
    "lineage_table",
    "operator_actions",
    "ownership_table",
    "proposal_summary",
    "reconciliation_panel",
    "shutdown_message",
    "shutdowns_table",
    "subtree_counts",
    "subtree_summary",
    "unaccounted_block",
    "words_of",
]
