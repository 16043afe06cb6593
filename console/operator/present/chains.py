"""A chain of calls put into words (docs/seeds.md §000 stages, §004 the chain's deadline): the
story the call detail tells -- every stage in order, who held it, how it ended, how long it waited
and ran, how much of the chain's deadline was left when it started and when it ended, the slowest
stage marked -- and the words of the Chains screen's rows. Rules in console/core/chains.py."""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from console.core.chains import Chain, ChainStage, seconds_left
from console.core.health import deadline_urgency
from console.operator.present.words import STYLE, clock, one_line, state_label, state_style, time_left, when
from console.shared.text import counted, format_seconds, sanitize

OUTCOME_WORDS: dict[str, tuple[str, str]] = {
    "running": ("running", STYLE["watch"]),
    "succeeded": ("succeeded", STYLE["ok"]),
    "failed": ("failed", STYLE["bad"]),
    "cancelled": ("cancelled", STYLE["warn"]),
    "needs_human": ("needs a human", STYLE["bad"]),
}
OUTCOME_MEANING = {
    "running": "a call of it is queued or running",
    "succeeded": "every call of it succeeded",
    "failed": "a call of it failed: no later stage starts",
    "cancelled": "a call of it was cancelled: a cancel reaches the whole chain",
    "needs_human": "a call of it waits in Approvals (outcome unknown): the chain waits with it",
}
SLOWEST = "◀ slowest"
THIS_CALL = "▶"


def outcome_words(outcome: str) -> tuple[str, str]:
    return OUTCOME_WORDS.get(outcome, (outcome.replace("_", " "), ""))


def left_words(seconds: float | None) -> tuple[str, str]:
    """The deadline's remainder at a past instant: `14m59s`, or `3s over` once it had passed."""
    if seconds is None:
        return "—", STYLE["none"]
    if seconds < 0:
        return f"{format_seconds(-seconds)} over", STYLE["bad"]
    return format_seconds(seconds), STYLE[deadline_urgency(seconds)]


def deadline_now_words(chain: Chain, now: datetime) -> tuple[str, str]:
    """The chain's deadline as a list shows it: time left (ticking) while it goes on; met with how
    much to spare, or missed, once it is over."""
    if chain.deadline_at is None:
        return "no deadline", STYLE["none"]
    if not chain.over:
        left = seconds_left(chain.deadline_at, now)
        return time_left(left, "passed"), STYLE[deadline_urgency(left)]
    left = chain.deadline_left(now)
    if left is not None and left >= 0:
        return f"met, {format_seconds(left)} spare", STYLE["ok"]
    return f"missed by {format_seconds(-(left or 0))}", STYLE["bad"]


def stage_words(chain: Chain) -> str:
    """`2/3`: the stage it is at, and its last stage so far (the first call is stage 0)."""
    current = chain.current
    return f"{current.stage if current else 0}/{chain.stage_count - 1}"


def slowest_words(chain: Chain, now: datetime) -> tuple[str, str]:
    slowest = chain.slowest(now)
    if slowest is None:
        return "—", STYLE["none"]
    return f"{slowest.stage} · {format_seconds(slowest.ran(now))}", "bold" if slowest.live else ""


def chain_row_words(chain: Chain, now: datetime) -> dict[str, tuple[str, str]]:
    """One row of the Chains screen: (text, style) per column (sanitized by the cell that shows it)."""
    first = chain.first
    tools = sorted({s.tool for s in chain.stages})
    return {
        "chain": (chain.short_id, "bold"),
        "stem": (chain.stem, ""),
        "tool": (tools[0] if len(tools) == 1 else f"{len(tools)} tools", ""),
        "outcome": outcome_words(chain.outcome),
        "stage": (stage_words(chain), ""),
        "deadline": (clock(chain.deadline_at) if chain.deadline_at else "—", ""),
        "left": deadline_now_words(chain, now),
        "slowest": slowest_words(chain, now),
        "started": (clock(first.created_at) if first else "—", STYLE["none"]),
        "agent": (first.agent_id if first and first.agent_id else "—", ""),
    }


# ----------------------------------------------------------------------------- the story


def chain_of_one(chain: Chain | None) -> Text:
    """The quiet line of a call that is a chain of one."""
    if chain is not None and not chain.lone:
        return Text("")
    return Text("chain: a chain of one — no call made this one, and it made none", style="dim italic")


def _owners(stage: ChainStage) -> str:
    owners = stage.owners or ([stage.owner_id] if stage.owner_id else [])
    if not owners:
        return "—"
    shown = ", ".join(sanitize(o, max_chars=40) for o in owners[:3])
    return shown + (f" +{len(owners) - 3}" if len(owners) > 3 else "")


def _outcome_cell(stage: ChainStage) -> Text:
    text = Text(state_label(stage.state), style=state_style(stage.state))
    if stage.attempt > 1:
        text.append(f" (try {stage.attempt})", style="dim")
    return text


def _left_cell(chain: Chain, stage: ChainStage, now: datetime) -> Text:
    """The deadline's remainder when the stage started → when it ended (`now`, while it runs or waits)."""
    if chain.deadline_at is None:
        return Text("—", style=STYLE["none"])
    start = left_words(seconds_left(chain.deadline_at, stage.started_at))
    end_at = stage.ended(now) if stage.started_at else (now if stage.state == "queued" else stage.finished_at)
    end = left_words(seconds_left(chain.deadline_at, end_at))
    text = Text()
    if stage.started_at is None:
        text.append("—", style=STYLE["none"])
    else:
        text.append(*start)
    text.append(" → ", style="dim")
    text.append(end[0] + (" now" if stage.live or stage.state == "queued" else ""), style=end[1])
    return text


def story_table(chain: Chain, now: datetime, *, compact: bool = False) -> Table:
    """Every stage of the chain in order. `compact` (a narrow terminal) keeps the stage, the call,
    the outcome and the times; the key, owners and clock times give way."""
    slowest = chain.slowest(now)
    tools = {s.tool for s in chain.stages}
    table = Table(show_edge=False, box=box.SIMPLE_HEAD, pad_edge=False, caption_justify="left",
                  caption="deadline left: when the stage started → when it ended (now, while it runs) · "
                          "◀ ran longest",
                  caption_style="dim")
    left = "deadline left"
    columns = ["stage", "call"]
    if not compact:
        if len(tools) > 1:
            columns.append("tool")
        columns += ["idempotency key", "owner"]
    columns += ["outcome"]
    if not compact:
        columns += ["started", "finished"]
    columns += ["waited", "ran", left]
    # worker- and agent-chosen text is bounded, cut with an ellipsis; the times never wrap
    bounded = {"idempotency key": 28, "owner": 20, "tool": 18}
    # the facts never shrink below what they need (a clock 8, an outcome 9, the deadline's two ends):
    # when the table is wider than the pane, the key, owners and tool give way first
    least = {"stage": 5, "call": 9, "outcome": 9, "started": 8, "finished": 8, "waited": 6, "ran": 6, left: 16}
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=bounded.get(column),
                         min_width=10 if column in bounded else least.get(column))
    for stage in chain.stages:
        is_slowest = slowest is not None and stage.id == slowest.id
        ran = Text(format_seconds(stage.ran(now)) if stage.started_at else "—")
        if is_slowest:
            ran.append(" ◀" if compact else f" {SLOWEST}", style="bold yellow")
        cells: dict[str, Text] = {
            "stage": Text(str(stage.stage), style="bold"),
            "call": Text((THIS_CALL if stage.this_call else " ") + stage.short_id,
                         style="bold reverse" if stage.this_call else ""),
            "tool": one_line(stage.tool, max_chars=80),
            "idempotency key": one_line(stage.idempotency_key, max_chars=120),
            "owner": one_line(_owners(stage)),
            "outcome": _outcome_cell(stage),
            "started": Text(clock(stage.started_at)),
            "finished": Text(clock(stage.finished_at) if stage.finished_at else ("running" if stage.live else "—"),
                             style="" if stage.finished_at else "dim"),
            "waited": Text(format_seconds(stage.waited(now))),
            "ran": ran,
            left: _left_cell(chain, stage, now),
        }
        table.add_row(*(cells[c] for c in columns), style="bold" if is_slowest else None)
    return table


def story_title(chain: Chain, now: datetime) -> Text:
    text = Text()
    text.append(f"chain {chain.short_id}", style="bold")
    text.append(f" · {sanitize(chain.stem, max_chars=80) or '—'}")
    tools = sorted({s.tool for s in chain.stages})
    if len(tools) == 1:
        text.append(f" · {sanitize(tools[0], max_chars=60)}")
    text.append(f" · {counted(chain.stage_count, 'stage')} (0 to {chain.stage_count - 1})")
    if chain.calls > len(chain.stages):
        text.append(f" (the first {len(chain.stages)} of {counted(chain.calls, 'call')} shown)", style="yellow")
    words, style = outcome_words(chain.outcome)
    text.append(" · ")
    text.append(words, style=style)
    text.append(" · deadline ")
    if chain.deadline_at is None:
        text.append("none", style="dim")
    else:
        text.append(when(chain.deadline_at))
        text.append(" (")
        text.append(*deadline_now_words(chain, now))
        text.append(")")
    return text


def where_the_time_went(chain: Chain, now: datetime) -> Text:
    """The story's last lines: what the time went into, the slowest stage, where the deadline ran out."""
    spent = chain.time_spent(now)
    text = Text()
    text.append("where the time went: ", style="bold")
    text.append(f"{format_seconds(spent.ran)} running, {format_seconds(spent.waited)} waiting in queues")
    if spent.between >= 1:
        text.append(f", {format_seconds(spent.between)} between stages")
    text.append(f" — {format_seconds(spent.total)} since the first call was enqueued"
                + ("" if chain.over else ", and counting") + ".")
    slowest = chain.slowest(now)
    if slowest is not None:
        text.append("\nslowest: ", style="bold")
        text.append(f"stage {slowest.stage} ({sanitize(slowest.tool, max_chars=60)}, "
                    f"{_owners(slowest)}) ran {format_seconds(slowest.ran(now))}"
                    + (" so far" if slowest.live else "") + ".")
    passed = chain.deadline_passed_in(now)
    if passed is not None:
        stage, how = passed
        doing = {"running": "while stage {n} ran", "waiting": "while stage {n} waited in the queue",
                 "between": "before stage {n} was enqueued"}[how].format(n=stage.stage)
        text.append("\nthe deadline passed ", style=STYLE["bad"])
        text.append(f"{doing}, at {clock(chain.deadline_at)}", style=STYLE["bad"])
        if how == "running" and stage.started_at is not None:
            had = seconds_left(chain.deadline_at, stage.started_at)
            text.append(f" ({format_seconds(had)} of it were left when that stage started)", style=STYLE["bad"])
        text.append(".", style=STYLE["bad"])
    ending = next((s for s in chain.stages if s.terminal_reason and s.state in ("failed", "cancelled")), None)
    if ending is not None:
        text.append(f"\nstage {ending.stage} {state_label(ending.state)}: ", style="bold")
        text.append(sanitize(ending.terminal_reason, max_chars=300))
    return text


def chain_story(chain: Chain, now: datetime, *, compact: bool = False) -> RenderableType:
    """The whole chain as one story: a title line, every stage, where the time went. A chain of
    one is one quiet line."""
    if chain.lone:
        return chain_of_one(chain)
    return Group(story_title(chain, now), story_table(chain, now, compact=compact), where_the_time_went(chain, now))
