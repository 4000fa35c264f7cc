"""Typed skills at run time: validate → confirm → execute (SPEC §8, seed 004).

:func:`prepare` checks parameter values in code (types, constraints,
resolvers) and computes exactly what would happen: the config changes of an
``internal`` skill (old → new) or the ActivityStreams activity of an
``external`` one, with its id fixed now so a retry can never deliver twice.
Nothing changes until :func:`execute` runs it — after the user confirms (a
button, ``/confirm``), or at once for a programmatic ``/skill <id> {json}``
call that carries every required parameter.

The same card, ``/confirm``, ``/cancel`` and :func:`decide` serve a model's call
of a tool that needs confirmation (``[tools] confirm``): an Action of kind
``tool`` holds the call and the paused request (docs/notebook-tools.md#confirmation).
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from lily_kernel.typed import contacts
from lily_kernel.skills.skill import Skill
from lily_kernel.typed.declarations import ParamError, TypedSpec, validate

DEFAULT_ACTOR = "https://localhost/users/lily"
TOKEN_VAR = "LILY_OUTBOX_TOKEN"


class ActionError(ValueError):
    """An action cannot be prepared or carried out; one readable line."""


@dataclass(frozen=True)
class Action:
    id: str
    skill: str
    kind: str  # internal | external | tool
    params: dict[str, Any]
    changes: dict[str, Any] = field(default_factory=dict)  # internal: path -> new value
    old: dict[str, Any] = field(default_factory=dict)  # internal: path -> value now
    activity: dict[str, Any] | None = None  # external
    target: str = ""  # external: "local outbox" or the outbox URL
    tool: str = ""  # tool: the tool the model called
    args: dict[str, Any] = field(default_factory=dict)  # tool: the call's arguments
    paused: Any = field(default=None, compare=False, repr=False)  # tool: loop.Paused

    def as_dict(self) -> dict:
        if self.kind == "tool":
            return {"id": self.id, "skill": self.skill, "kind": self.kind, "tool": self.tool,
                    "args": self.args}
        return {"id": self.id, "skill": self.skill, "kind": self.kind, "params": self.params,
                "changes": self.changes, "old": self.old, "activity": self.activity,
                "target": self.target}


@dataclass(frozen=True)
class Outcome:
    action: Action
    summary: str  # Markdown
    result: str | None = None  # a confirmed tool call: its result, for the agent to continue with


def spec_of(skill: Skill) -> TypedSpec:
    if skill.typed is None:
        raise ActionError(f"skill '{skill.name}' is not a typed skill")
    return skill.typed


def parse_json_params(text: str) -> dict | None:
    """The JSON object of a programmatic call, or None when ``text`` is not one."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ActionError(f"the parameters are not valid JSON: {exc.msg} (at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ActionError("the parameters must be a JSON object")
    return value


def prepare(session, skill: Skill, values: dict) -> Action:
    """Validate ``values`` for ``skill`` and compute its effect, changing nothing."""
    spec = spec_of(skill)
    try:
        params = validate(spec, values,
                          resolve=lambda resolver, name: contacts.resolve(session.workspace, name))
    except ParamError as exc:
        raise ActionError(f"{skill.name}: {exc}") from None
    if spec.kind == "internal":
        changes = {p.config: params[p.name] for p in spec.params
                   if p.config and p.name in params}
        if not changes:
            raise ActionError(f"{skill.name}: no parameter sets a config path "
                              "(name a parameter after a write path, or give it 'config: <path>')")
        scoped = session.config.scoped(skill.name, spec.acl_read, spec.acl_write)
        for path in changes:
            if not scoped.can_write(path):
                raise ActionError(f"{skill.name}: writing {path} is outside the skill's Config ACL "
                                  f"(write: {', '.join(spec.acl_write) or 'none'})")
        old = {path: session.config.get(path) for path in changes}
        return Action(uuid.uuid4().hex, skill.name, "internal", params, changes, old)
    return Action(uuid.uuid4().hex, skill.name, "external", params,
                  activity=_activity(session, spec, params), target=_target(session))


def _activity_settings(session) -> dict:
    table = session.file_config.get("activitypub", {})
    return table if isinstance(table, dict) else {}


def _target(session) -> str:
    return _activity_settings(session).get("outbox") or "local outbox"


def _activity(session, spec: TypedSpec, params: dict) -> dict:
    from lily_kernel.typed.activity import build_activity, new_activity_id
    actor = _activity_settings(session).get("actor") or DEFAULT_ACTOR
    actors = [params[p.name] for p in spec.params if p.type == "actorUri" and p.name in params]
    objects = [params[p.name] for p in spec.params if p.type == "objectId" and p.name in params]
    strings = [p.name for p in spec.params if p.type == "string" and p.name in params]
    content_name = "content" if "content" in params else (strings[0] if strings else None)
    kind = spec.activity
    obj: Any = None
    content = None
    if kind in ("Follow", "Block"):
        if not actors:
            raise ActionError(f"a {kind} needs an actorUri parameter")
        obj = actors[0]
    elif kind != "Create":
        if not objects:
            raise ActionError(f"a {kind} needs an objectId parameter")
        obj = objects[0]
    else:
        content = params.get(content_name) if content_name else None
        if content is None and not objects:
            raise ActionError("a Create needs a string parameter (the content) or an objectId")
        obj = objects[0] if content is None else None
    try:
        return build_activity(kind, actor=actor, to=actors, object=obj, content=content,
                              summary=params.get("summary") if "summary" != content_name else None,
                              activity_id=new_activity_id(actor if actor != DEFAULT_ACTOR else None))
    except Exception as exc:  # DispatchError and friends: one readable line
        raise ActionError(str(exc)) from None


def execute(session, action: Action) -> Outcome:
    """Carry out ``action``. Internal: one transaction under the skill's ACL. External: deliver."""
    skill = session.snapshot.get(action.skill)
    if skill is None or skill.typed is None:
        raise ActionError(f"skill '{action.skill}' is no longer in this session's snapshot")
    spec = skill.typed
    if action.kind == "internal":
        scoped = session.config.scoped(skill.name, spec.acl_read, spec.acl_write)
        try:
            entries = scoped.write(action.changes)
        except PermissionError as exc:  # AclError
            raise ActionError(str(exc)) from None
        if not entries:
            return Outcome(action, "Nothing to change: every setting already had that value.")
        rows = "\n".join(f"| `{e.path}` | {_fmt(e.old)} | {_fmt(e.new)} |" for e in entries)
        return Outcome(action, f"**{skill.name}** changed {len(entries)} setting"
                               f"{'s' if len(entries) != 1 else ''}:\n\n| setting | was | now |\n"
                               f"| --- | --- | --- |\n{rows}")
    from lily_kernel.typed.activity import DispatchError
    url = _activity_settings(session).get("outbox")
    try:
        delivery = session.outbox.deliver(action.activity, url=url,
                                          token=os.environ.get(TOKEN_VAR) if url else None)
    except DispatchError as exc:
        raise ActionError(str(exc)) from None
    verb = {"stored": "stored in the local outbox", "delivered": f"delivered to {delivery.target}",
            "duplicate": "already sent earlier; not sent again"}.get(delivery.status, delivery.status)
    return Outcome(action, f"**{skill.name}**: {action.activity['type']} `{delivery.activity_id}` "
                           f"{verb}.")


def hold_tool(session, name: str, args: dict, paused: Any) -> Action:
    """An Action holding a model's tool call until the user confirms or cancels it."""
    return Action(uuid.uuid4().hex, getattr(paused, "skill", None) or "", "tool", {},
                  tool=name, args=dict(args), paused=paused)


def _decide_tool(session, pending: Action, ok: bool) -> Outcome:
    """Cancel: the call is answered "declined by the user". Confirm: it runs, once."""
    from lily_kernel.agent import loop
    if not ok:
        session.settle(pending, "cancelled")
        loop.decline(session, pending)
        return Outcome(pending, f"Cancelled: **{pending.tool}** did not run; the agent is told "
                                "it was declined by the user.")
    session.settle(pending, "confirmed")  # settled first: a second click finds nothing
    try:
        result = loop.run_confirmed(session, pending)
    except KeyboardInterrupt:
        loop.decline(session, pending, "Error: interrupted by the user while it ran")
        raise
    return Outcome(pending, f"**{pending.tool}** ran (confirmed).", result)


def decide(session, action: Action | None, ok: bool) -> Outcome:
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
        return Outcome(pending, f"Cancelled: **{pending.skill}** did nothing.")
    try:
        outcome = execute(session, pending)
    except ActionError as exc:
        raise ActionError(f"{exc}; the action is still waiting (/confirm to retry, "
                          "/cancel to drop it)") from None
    session.settle(pending, "executed")
    return outcome


def _fmt(value: Any) -> str:
    return "—" if value is None else f"`{json.dumps(value)}`"
