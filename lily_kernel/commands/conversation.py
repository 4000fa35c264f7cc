"""``/rewind`` and ``/fork``: what the model sees of this notebook's conversation.

Both are commands, never tools. ``/rewind`` lists the requests the model still sees;
``/rewind N`` drops request N and everything after it (the journal keeps them and records
the rewind; the notebook's cells are untouched). ``/fork [name]`` goes on in a new session
that carries the conversation so far. Contract: docs/session.md#rewind-and-fork.
"""
from __future__ import annotations

import time

from lily_kernel.commands import sanitize
from lily_kernel.commands.results import Notice
from lily_kernel.errors import CommandError, ConfigError
from lily_kernel.session.session import Session

_FIRST_LINE = 80  # characters of a request's first line that a list shows


def _row(number: int, when: float, first: str) -> str:
    line = first if len(first) <= _FIRST_LINE else first[: _FIRST_LINE - 1] + "…"
    clock = time.strftime("%H:%M", time.localtime(when)) if when else "--:--"
    return f"| {number} | {clock} | {sanitize.code_span(line or '(empty)')} |"


def rewind(session: Session, args: str) -> Notice:
    """``/rewind``: the list; ``/rewind N``: drop request N onwards."""
    args = args.strip()
    if not args:
        listed = session.requests()
        if not listed:
            return Notice("The model sees no request of this conversation yet.")
        rows = [_row(n, t, first) for n, (_, t, first) in enumerate(listed, 1)]
        return Notice("Requests the model sees (`/rewind N` drops N and after):\n\n"
                      "| # | time | request |\n| --- | --- | --- |\n" + "\n".join(rows))
    if not args.isdigit():
        raise CommandError("usage: /rewind [N], with N the number of a request in /rewind's list.")
    try:
        dropped = session.rewind(int(args))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    rows = [_row(n, t, first) for n, (_, t, first) in enumerate(dropped, int(args))]
    many = len(dropped) != 1
    return Notice(f"Rewound: the model no longer sees request{'s' if many else ''} "
                  f"{args}{'–' + str(int(args) + len(dropped) - 1) if many else ''} "
                  "(their cells stay in the notebook; the journal keeps them):\n\n"
                  "| # | time | request |\n| --- | --- | --- |\n" + "\n".join(rows))


def fork(session: Session, args: str) -> Notice:
    """``/fork [name]``: a new session carrying this conversation."""
    name = args.strip() or None
    if name is not None and (len(name) > 80 or not name.isprintable()):
        raise CommandError("a fork's name is one printable line of at most 80 characters.")
    old = session.fork(name)
    turns = len(session.requests())
    return Notice(f"Forked session `{old[:12]}` into `{session.session_id[:12]}`"
                  f"{' (' + sanitize.code_span(name) + ')' if name else ''}: {turns} "
                  f"request{'s' if turns != 1 else ''} carried over; /rewind and /new work "
                  "on the fork, and `lily logs` shows its parent.")
