"""Typed skills at run time: validate → confirm → execute (docs/typed-skills.md#confirmation).

:func:`prepare` checks parameter values in code (types, constraints,
resolvers) and computes exactly what would happen: the config changes of an
``internal`` skill (old → new) or the ActivityStreams activity of an
``external`` one, with its id fixed now so a retry can never deliver twice.
Nothing changes until :func:`execute` runs it — after the user confirms (a
button, ``/confirm``), or at once for a programmatic ``/skill <id> {json}``
call that carries every required parameter.

An Action waits for the user's decision as pending work (``agent/pending.py``,
where a model's held tool call waits the same way), and ``agent/pending.decide``
confirms or cancels it.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from lily_kernel.errors import (
    AclError,
    ActionError,
    ConfigError,
    JSONInputError,
    ParamError,
    Uncertain,
)
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.typed_declaration import TypedSpec
from lily_kernel.typed import contacts
from lily_kernel.typed.values import validate

if TYPE_CHECKING:
    from pathlib import Path

    from lily_kernel.skills.snapshot import Snapshot
    from lily_kernel.typed.outbox import Outbox
    from lily_kernel.typed.registry import ConfigRegistry


class ActionHost(Protocol):
    """What a typed action needs of its session, which passes itself in (typed sits below
    session: docs/architecture.md#layers)."""

    @property
    def workspace(self) -> Path:
        """The workspace folder."""
        ...

    @property
    def snapshot(self) -> Snapshot:
        """The session's skills."""
        ...

    @property
    def config(self) -> ConfigRegistry:
        """The workspace's Config Registry."""
        ...

    @property
    def outbox(self) -> Outbox:
        """The workspace's outbox store."""
        ...

    @property
    def file_config(self) -> dict[str, Any]:
        """The workspace's lily.toml, as read."""
        ...

    @property
    def untrusted_note(self) -> str | None:
        """The line saying what an untrusted lily.toml did not get to set, if anything."""
        ...

    def keep(self, item: Action) -> None:
        """Hold ``item`` pending as it is now."""
        ...

DEFAULT_ACTOR = "https://localhost/users/lily"
TOKEN_VAR = "LILY_OUTBOX_TOKEN"


@dataclass(frozen=True)
class Action:
    """A typed skill's validated effect, computed before anything changes."""

    id: str
    skill: str
    kind: str  # internal | external
    params: dict[str, Any]
    changes: dict[str, Any] = field(default_factory=dict)  # internal: path -> new value
    old: dict[str, Any] = field(default_factory=dict)  # internal: path -> value now
    activity: dict[str, Any] | None = None  # external
    target: str = ""  # external: "local outbox" or the outbox URL
    uncertain: bool = False  # a delivery may have happened; only /confirm or /cancel end it

    def as_dict(self) -> dict[str, Any]:
        """The action as plain data, for the journal."""
        return {"id": self.id, "skill": self.skill, "kind": self.kind, "params": self.params,
                "changes": self.changes, "old": self.old, "activity": self.activity,
                "target": self.target, "uncertain": self.uncertain}


@dataclass(frozen=True)
class Outcome:
    """What carrying out an action did, in Markdown."""
    action: Action
    summary: str  # Markdown
    result: str | None = None  # a confirmed tool call: its result, for the agent to continue with


def spec_of(skill: Skill) -> TypedSpec:
    """The typed declaration of ``skill``; ActionError when it has none."""
    if skill.typed is None:
        raise ActionError(f"skill '{skill.name}' is not a typed skill")
    return skill.typed


def parse_json_params(text: str) -> dict[str, Any] | None:
    """The JSON object of a programmatic call, or None when ``text`` is not one."""
    from lily_kernel import safejson
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:  # bounded depth, digits and text: docs/limits-and-secrets.md#bad-input
        value = safejson.loads(text)
    except JSONInputError as exc:
        raise ActionError(f"the parameters are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ActionError("the parameters must be a JSON object")
    return value


def uncertain_block(session: ActionHost) -> str | None:
    """Why no new action may be held now: a delivery that may have happened is pending, and
    only /confirm or /cancel may end it (docs/limits-and-secrets.md#dispatch)."""
    held = getattr(session, "pending", None)
    if held is None or not held.uncertain:
        return None
    return (f"{held.skill}: activity {_activity_id(held)} may already have been delivered and "
            "is still pending; run /confirm to retry it (same id and Idempotency-Key) or "
            "/cancel to drop it, before a new action")


def prepare(session: ActionHost, skill: Skill, values: dict[str, Any]) -> Action:
    """Validate ``values`` for ``skill`` and compute its effect, changing nothing."""
    spec = spec_of(skill)
    blocked = uncertain_block(session)
    if blocked:
        raise ActionError(blocked)
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
        try:
            old = {path: session.config.get(path) for path in changes}
        except ConfigError as exc:  # e.g. a damaged config.sqlite
            raise ActionError(str(exc)) from None
        return Action(uuid.uuid4().hex, skill.name, "internal", params, changes, old)
    return Action(uuid.uuid4().hex, skill.name, "external", params,
                  activity=_activity(session, spec, params), target=_target(session))


def _activity_settings(session: ActionHost) -> dict[str, Any]:
    table = session.file_config.get("activitypub", {})
    return table if isinstance(table, dict) else {}


def _target(session: ActionHost) -> str:
    return _activity_settings(session).get("outbox") or "local outbox" + _withheld(session)


def _withheld(session: ActionHost) -> str:
    """`` (the line saying so)`` when an untrusted lily.toml's outbox is not used, else ''
    (docs/trust-boundary.md#workspace-trust)."""
    if any(w.table == "activitypub" for w in getattr(session, "withheld", ())):
        return f" ({session.untrusted_note})"
    return ""


def _activity(session: ActionHost, spec: TypedSpec, params: dict[str, Any]) -> dict[str, Any]:
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
                              summary=params.get("summary") if content_name != "summary" else None,
                              activity_id=new_activity_id(actor if actor != DEFAULT_ACTOR else None))
    except Exception as exc:  # DispatchError and friends: one readable line
        raise ActionError(str(exc)) from None


def execute(session: ActionHost, action: Action) -> Outcome:
    """Carry out ``action``. Internal: one transaction under the skill's ACL. External: deliver."""
    skill = session.snapshot.get(action.skill)
    if skill is None or skill.typed is None:
        raise ActionError(f"skill '{action.skill}' is no longer in this session's snapshot")
    spec = skill.typed
    if action.kind == "internal":
        scoped = session.config.scoped(skill.name, spec.acl_read, spec.acl_write)
        try:
            entries = scoped.write(action.changes)
        except (AclError, ConfigError) as exc:
            raise ActionError(str(exc)) from None
        if not entries:
            return Outcome(action, "Nothing to change: every setting already had that value.")
        rows = "\n".join(f"| `{e.path}` | {_fmt(e.old)} | {_fmt(e.new)} |" for e in entries)
        return Outcome(action, f"**{skill.name}** changed {len(entries)} setting"
                               f"{'s' if len(entries) != 1 else ''}:\n\n| setting | was | now |\n"
                               f"| --- | --- | --- |\n{rows}")
    from lily_kernel.errors import DispatchError
    assert action.activity is not None  # prepare() builds one for every external action
    url = _activity_settings(session).get("outbox")
    timeout, retries = _delivery_settings(session)
    try:
        delivery = session.outbox.deliver(action.activity, url=url,
                                          token=os.environ.get(TOKEN_VAR) if url else None,
                                          timeout=timeout, retries=retries)
    except DispatchError as exc:
        if exc.uncertain:
            raise Uncertain(str(exc)) from None
        raise ActionError(str(exc)) from None
    verb = {"stored": "stored in the local outbox" + _withheld(session),
            "delivered": f"delivered to {delivery.target}",
            "duplicate": "already sent earlier; not sent again"}.get(delivery.status, delivery.status)
    return Outcome(action, f"**{skill.name}**: {action.activity['type']} `{delivery.activity_id}` "
                           f"{verb}.")


def _delivery_settings(session: ActionHost) -> tuple[float, int]:
    """``[activitypub] timeout`` (seconds per attempt, default 10) and ``retries`` (default 2)."""
    table = _activity_settings(session)
    timeout, retries = table.get("timeout", 10.0), table.get("retries", 2)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= 600:
        raise ActionError(f"lily.toml [activitypub] timeout must be a number of seconds above "
                          f"0 and at most 600, not {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
        raise ActionError(f"lily.toml [activitypub] retries must be a whole number from 0 to "
                          f"10, not {retries!r}")
    return float(timeout), retries


def _activity_id(action: Action) -> str:
    return (action.activity or {}).get("id") or action.id


def held(session: ActionHost, action: Action, exc: Exception) -> ActionError:
    """Keep ``action`` pending as uncertain; the one line that says so."""
    session.keep(replace(action, uncertain=True))
    return ActionError(f"{exc}; it may have been delivered, so it stays pending: /confirm "
                       "retries it with the same id and Idempotency-Key, /cancel drops it")


def execute_now(session: ActionHost, action: Action) -> Outcome:
    """A programmatic call: run ``action`` at once; an uncertain delivery stays pending."""
    try:
        return execute(session, action)
    except Uncertain as exc:
        raise held(session, action, exc) from None


def _fmt(value: Any) -> str:
    return "—" if value is None else f"`{json.dumps(value)}`"
