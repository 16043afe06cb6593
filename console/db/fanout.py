"""Ask several databases at once, each on a thread of its own, and answer by a deadline whatever
they do: `leasectl contexts` (console.db.probe) and the all-contexts Triage (console.db.everywhere)
both need it, and a context that hangs (a firewall that drops packets, a host that does not
resolve) must cost its deadline and never hold up the answers of the others."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


def ask_all(items: Mapping[str, Item], ask: Callable[[str, Item], Answer], seconds: float,
            unanswered: Callable[[str, Item, BaseException | None], Answer],
            on_answer: Callable[[str, Answer], None] | None = None) -> dict[str, Answer]:
    """`ask(name, item)` for every item at once; back as soon as all have answered, or `seconds`
    later at the most. A name without an answer by then, or whose ask raised, gets
    `unanswered(name, item, error)` (error None: no answer in time); an answer after the time is
    up is dropped. `on_answer` hears each answer as it is settled, the late ones included, on the
    thread that settled it. The threads are daemons: one still hanging never keeps the process alive."""
    answers: dict[str, Answer] = {}
    arrived = threading.Condition()

    def settle(name: str, answer: Answer) -> None:
        with arrived:
            if name in answers:  # the deadline has already spoken for it
                return
            answers[name] = answer
            arrived.notify_all()
        if on_answer is not None:
            on_answer(name, answer)

    def one(name: str, item: Item) -> None:
        try:
            answer = ask(name, item)
        except BaseException as exc:  # noqa: BLE001 - an ask that raised still leaves its item unknown
            answer = unanswered(name, item, exc)
        settle(name, answer)

    deadline = time.monotonic() + seconds
    for name, item in items.items():
        threading.Thread(target=one, args=(name, item), name=f"ask:{name}", daemon=True).start()
    with arrived:
        while len(answers) < len(items) and (left := deadline - time.monotonic()) > 0:
            arrived.wait(left)
        late = [name for name in items if name not in answers]
    for name in late:
        settle(name, unanswered(name, items[name], None))
    with arrived:
        return {name: answers[name] for name in items}


__all__ = ["ask_all"]
