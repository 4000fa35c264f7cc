"""One confirmation mechanism for everything the user must approve first.

A typed skill's action (a settings change, a message to send) and a model's call of a
tool listed in ``[tools] confirm`` (``run_python`` always) are both held as the session's
one pending :class:`~lily_kernel.typed.actions.Action`. :func:`decide` is the single entry
point every face calls for Confirm / Cancel (the card's buttons, ``/confirm``,
``/cancel``): a typed action runs once; a held tool call runs once and the agent goes on
with its output, or is answered "declined by the user" (docs/typed-skills.md#confirmation,
docs/notebook-tools.md).
"""
from __future__ import annotations

from lily_kernel.agent import loop
from lily_kernel.errors import ActionError
from lily_kernel.typed import actions


def _decide_tool(session, pending: actions.Action, ok: bool) -> actions.Outcome:
    """Cancel: the call is answered "declined by the user". Confirm: it runs, once."""
    if not ok:
        session.settle(pending, "cancelled")
        loop.decline(session, pending)
        return actions.Outcome(pending, f"Cancelled: **{pending.tool}** did not run; the "
                                        "agent is told it was declined by the user.")
    session.settle(pending, "confirmed")  # settled first: a second click finds nothing
    try:
        result = loop.run_confirmed(session, pending)
    except KeyboardInterrupt:
        loop.decline(session, pending, "Error: interrupted by the user while it ran")
        raise
    return actions.Outcome(pending, f"**{pending.tool}** ran (confirmed).", result)


def decide(session, action: actions.Action | None, ok: bool) -> actions.Outcome:
    """Confirm (``ok``) or cancel the pending ``action`` (None: whatever is pending).

    Only the action the session is holding can be decided: a card whose action
    was replaced, cancelled or already done does nothing. A failed execution
    leaves the action pending so it can be retried or cancelled.
    """
    pending = session.pending
    if pending is None:
        raise ActionError("nothing is waiting for confirmation")
    if action is not None and action.id != pending.id:
        raise ActionError("this action is no longer waiting (it was replaced, cancelled or done)")
    if pending.kind == "tool":
        return _decide_tool(session, pending, ok)
    if not ok:
        session.settle(pending, "cancelled")
        return actions.Outcome(pending, f"Cancelled: **{pending.skill}** did nothing.")
    try:
        outcome = actions.execute(session, pending)
    except actions.Uncertain as exc:
        raise actions.held(session, pending, exc) from None
    except ActionError as exc:
        raise ActionError(f"{exc}; the action is still waiting (/confirm to retry, "
                          "/cancel to drop it)") from None
    session.settle(pending, "executed")
    return outcome
