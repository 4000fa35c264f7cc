"""What one request offers the model and runs for it (docs/agent.md#built-in-model-tools).

:class:`Request` is one request's state while the loop (``agent/loop.py``) runs it: the
tools it offers — ``load_skill`` (the body from the snapshot, never the disk; the first
one declares the request's skill, a second different one is refused),
``read_skill_file`` (files under the loaded skill's ``references/``),
``propose_action`` and ``read_config`` (a loaded typed skill), and the session's
registered tools as the gate leaves them — and how each call runs: checked, decided by
the gate (tools/gate.py: runs, runs in the sandbox, asks with a card, or refused with an
``Error:`` the model can read), executed, then redacted and capped. The offered
list and the system message are built once while nothing they depend on changed
(docs/agent.md#a-lean-request).
"""
from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lily_kernel import redaction
from lily_kernel.agent import budget, hygiene, pending, prompt, small_steps, workspace_rules
from lily_kernel.agent.pending import PendingItem
from lily_kernel.errors import ActionError, ToolError
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.substitution import with_skill_dir
from lily_kernel.tools import gate, offering
from lily_kernel.tools.tool_registry import Tool, check_args
from lily_kernel.tools.workspace_fs import WorkspaceFS, split

if TYPE_CHECKING:
    from lily_kernel.session.session import (
        Session,  # type hints only: agent sits below session and commands
    )
    from lily_kernel.skills.snapshot import Snapshot


log = logging.getLogger(__name__)


def _one_argument(name: str, description: str, argument: str,
                  kind: str = "string") -> dict[str, Any]:
    """A built-in tool's schema: one required argument of JSON type ``kind``."""
    return offering.spec(name, description, {"type": "object",
                                         "properties": {argument: {"type": kind}},
                                         "required": [argument]})


LOAD_SKILL = _one_argument("load_skill", "Read a skill's instructions.", "name")
READ_SKILL_FILE = _one_argument("read_skill_file", "Read a file of the loaded skill, e.g. "
                                "references/guide.md.", "path")
PROPOSE_ACTION = _one_argument("propose_action", "Propose parameters for the loaded typed "
                               "skill; the user confirms.", "parameters", "object")
READ_CONFIG = _one_argument("read_config", "Read a setting (dotted path) of the loaded typed "
                            "skill.", "path")
_BUILTIN = {s["function"]["name"]: s for s in (LOAD_SKILL, READ_SKILL_FILE, PROPOSE_ACTION,
                                                READ_CONFIG, small_steps.ANSWER_TOOL)}
RESERVED = set(_BUILTIN)  # and the small profile's answer (agent/small_steps.py)
_READ_ONLY_BUILTINS = {"read_skill_file", "read_config"}


#: Per session (by id; the entry holds its snapshot, policy and tool registry): the last
#: offered tool list and what it was built from (the active skill, the registry's version).
_SPECS_CACHE: dict[int, tuple[tuple[object, ...],
                              tuple[str | None, bool, frozenset[str], bool, bool,
                                    frozenset[str]], int,
                              list[dict[str, Any]]]] = {}
#: The last system message built and what it was built from (persona, snapshot).
_SYSTEM_CACHE: list[tuple[object, object, object, dict[str, Any]]] = []


def system_message(session: Session) -> dict[str, Any]:
    """The system message for ``session`` now: the same dict while its persona and snapshot
    are the same objects (both frozen), so neither the skills index nor its token count is
    rebuilt per request. Callers never change it."""
    persona, snap = session.persona, session.snapshot
    rules = workspace_rules.read(session.workspace, session.environ)  # cached by the files
    for cached_persona, cached_snap, cached_rules, message in _SYSTEM_CACHE:
        if cached_persona is persona and cached_snap is snap and cached_rules is rules:
            return message
    message = {"role": "system", "content": prompt.system_prompt(persona, snap,
                                                                 workspace_rules=rules.text)}
    _SYSTEM_CACHE[:] = [(persona, snap, rules, message), *_SYSTEM_CACHE[:7]]
    return message


#: The last skills indexes' words (:func:`offering.skill_words`), by snapshot (frozen).
_SKILL_WORDS: list[tuple[object, offering.SkillWords]] = []


def skill_words(snap: Snapshot) -> offering.SkillWords:
    """The words of ``snap``'s skills index: its listed lines and the names it omits."""
    for cached, words in _SKILL_WORDS:
        if cached is snap:
            return words
    listed, omitted = prompt.index_plan(snap)
    words = offering.skill_words([*listed, *((name, "") for name in omitted)])
    _SKILL_WORDS[:] = [(snap, words), *_SKILL_WORDS[:7]]
    return words


class Request:
    """The state of one request while the loop runs: what it offers, what it used."""

    def __init__(self, session: Session, skill: str | None, text: str | None = None) -> None:
        """``text``: the request's (its first message); None for any request (``/model``'s
        budget: every tool a request may be offered)."""
        self.session = session
        self.skill = skill
        self.asked = offering.asked_for(text or "")  # the small profile's tools this text asks for
        # names a data file the workspace holds: its required steps compute (small_steps.py)
        self.data_files = offering.data_files(text or "", session.workspace)
        self.computes = bool(self.data_files)
        self.leads = self._leads(text or "")  # what its required steps admit
        # says something the skills index says: the small profile offers load_skill only then
        self.names_a_skill = text is None or \
            offering.names_a_skill(text, skill_words(session.snapshot))
        self.any_request = text is None
        self.tools_used: list[str] = []
        self.proposal: PendingItem | None = None
        self.proposal_call: str | None = None  # the propose_action call that offered it
        self.shown: list[object] = []  # what tools returned for the face (a proposed cell)
        self.cut_results = 0  # tool results cut at [limits] tool_result_chars
        # identical calls answered since the last call that may change something: their
        # results (docs/agent.md#loop-hygiene)
        self.answered: dict[str, str] = {}
        self.held: gate.Asks | None = None  # the gate's answer for the call a card holds
        self.note: Callable[[str], object] = lambda line: None  # a footer line (agent/loop.py)
        self.raised = 0  # run_python calls whose code raised (small_steps.RUN_ATTEMPTS)
        # the code of this request's sandboxed runs that ended without an error: each later
        # one runs them first, so what they defined is there (docs/sandbox.md#one-requests-runs)
        self.built: list[str] = []

    def _leads(self, text: str) -> frozenset[str]:
        """The tools this request's required steps admit when offered
        (small_steps.required_call): ``run_python`` when it names a data file the workspace
        holds; when it names another file there and no skill is forced, the file tools it
        asks for and ``load_skill`` (offered when it names a skill). Else any tool."""
        if self.computes:
            return frozenset({small_steps.RETRIED})
        files = self.asked & offering.FILE_TOOLS
        if files and self.skill is None and offering.other_files(text, self.session.workspace):
            return files | {LOAD_SKILL["function"]["name"]}
        return frozenset()

    @functools.cached_property
    def idle(self) -> frozenset[str]:
        """The registered tools that could find nothing now (``Tool.usable``: a notebook
        look-up in a notebook without variables or without a failed cell), read once a
        request. The small profile does not offer them to a request without a skill: a
        small model calls what it is offered ("What does CSV stand for?" went to
        ``inspect_variable("csv")`` in an empty notebook), and a call that can find nothing
        answers nothing (docs/agent.md#small-model-profile)."""
        if self.any_request:  # /model's budget: every tool a request may be offered
            return frozenset()
        return frozenset(t.name for t in self.session.tools
                         if t.usable is not None and not t.usable())

    # -- tools offered to the model -----------------------------------------
    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools offered: only those this request can use now (docs/agent.md#a-lean-request).

        The same list object while nothing it depends on changed (the snapshot, the request's
        skill, the policy, the registered tools, the profile): built once, not per step, and
        the token counter's cache knows it by identity. Callers never change it."""
        session = self.session
        key = (session.snapshot, session.policy, session.tools)
        small = budget.profile_of(session.model_config) == "small"
        hit = _SPECS_CACHE.get(id(session))
        shape = (self.skill, small, self.asked, self.computes, self.names_a_skill,
                 self.idle if small else frozenset())
        if hit is not None and hit[1] == shape and hit[2] == session.tools.version and \
                all(a is b for a, b in zip(hit[0], key, strict=True)):
            return hit[3]
        specs = self._build_specs(small)
        if len(_SPECS_CACHE) > 8:  # a bound: a process rarely runs more sessions at once
            _SPECS_CACHE.clear()
        # the entry holds the session's objects alive, so no id is reused while it is kept
        _SPECS_CACHE[id(session)] = (key, shape, session.tools.version, specs)
        return specs

    def _build_specs(self, small: bool) -> list[dict[str, Any]]:
        session = self.session
        skill = session.snapshot.get(self.skill) if self.skill else None
        specs = offering.builtin_specs(skill, LOAD_SKILL, READ_SKILL_FILE, PROPOSE_ACTION,
                                       READ_CONFIG)
        if small and not self.names_a_skill:  # no skill is what this request asks for
            specs = [s for s in specs if s is not LOAD_SKILL]
        for tool in session.tools:
            if tool.name in RESERVED or gate.unusable(session, tool.name) is not None:
                continue
            if small and skill is None and tool.name in self.idle:
                continue
            if offering.registered_offered(tool.name, tool.origin, skill, small, self.asked):
                specs.append(offering.spec(tool.name, tool.description, tool.parameters,
                                           small and not offering.backs(tool.name, skill)))
        specs = [s for s in specs if session.policy.offered(s["function"]["name"])]
        answer = [] if skill is not None and skill.requires_tools else [small_steps.ANSWER_TOOL]
        if small and self.computes and skill is None:  # a question on a data file: code
            code = [s for s in specs if s["function"]["name"] == small_steps.RETRIED]
            specs = code or specs  # answers it; the look-up tools compute nothing
        return offering.asked_first(specs, self.asked, answer) if small else specs

    # -- executing one call ----------------------------------------------------
    def needs_confirmation(self, name: str, args: dict[str, Any]) -> bool:
        """Is this a valid call the gate says asks first (tools/gate.py)? Its
        :class:`~gate.Asks` is kept in :attr:`held` for the card. A call it refuses, or with
        bad arguments, is answered by :meth:`execute`. While another item waits, it is
        refused (a :class:`ToolError`): never replaced."""
        if name in RESERVED or self.session.tools.get(name) is None:
            return False  # not a registered tool: execute() answers
        try:
            said = self.decide(name, args)[3]
        except ToolError:
            return False  # refused, or an argument error: execute() answers
        if not isinstance(said, gate.Asks):
            return False
        refusal = pending.waiting_refusal(self.session, self.proposal)
        if refusal:
            raise ToolError(refusal)
        self.held = said
        return True

    def decide(self, name: str, args: dict[str, Any]
               ) -> tuple[Tool, dict[str, Any], str, gate.Outcome | str]:
        """The model's call of registered tool ``name``: the tool, its fitted arguments and
        note, and what the gate decides (a str: the answer, nothing to run); ToolError when
        it is refused or its arguments do not fit."""
        session = self.session
        refused = gate.unusable(session, name, gate.Route.MODEL)
        tool = session.tools.get(name)
        if refused is not None or tool is None:
            raise ToolError(refused.reason if refused else f"{name}: no such tool")
        args, note = fit_arguments(tool, args)
        problem = check_args(tool.parameters, args)
        if problem:
            raise ToolError(f"{name}: {problem}; {hygiene.usage(name, tool.parameters)}")
        if gate.changes_nothing(tool, args):
            return tool, args, note, (f"no change: {args.get('path', 'the file')} already "
                                      "holds exactly this content; nothing was written")
        said = gate.decide(session, name, args, gate.Route.MODEL)
        if isinstance(said, gate.Refused):
            raise ToolError(said.reason)
        return tool, args, note, said

    def aliases(self, offered: list[str]) -> dict[str, str]:
        """An offered Lily or notebook tool's Python function name (``list_files`` for
        ``list``), when it names no tool, skill or other offered tool's function: the tool
        (docs/agent.md#loop-hygiene). MCP tools have none (their function is Lily's)."""
        found: dict[str, list[str]] = {}
        for name in offered:
            tool = self.session.tools.get(name)
            if tool is None or tool.origin == "mcp":
                continue
            func = getattr(tool.func, "__wrapped__", tool.func)
            alias = str(getattr(func, "__name__", "")).lstrip("_")
            if alias.isidentifier() and alias != name:
                found.setdefault(alias, []).append(name)
        return {alias: names[0] for alias, names in found.items() if len(names) == 1
                and alias not in _BUILTIN and alias not in self.session.tools
                and self.session.snapshot.get(alias) is None}

    def schema_of(self, name: str) -> dict[str, Any] | None:
        """The parameters' schema of tool ``name`` (a built-in model tool's too), or None."""
        if name in _BUILTIN:
            schema: dict[str, Any] = _BUILTIN[name]["function"]["parameters"]
            return schema
        tool = self.session.tools.get(name)
        return None if tool is None else tool.parameters

    def repeated(self, name: str, args: dict[str, Any]) -> str | None:
        """The answer to a call identical to one already answered in this request (since
        the last call that may change something), or None: it is not run again. A repeat
        of code that raised spends an attempt (small_steps.RUN_ATTEMPTS), as code that
        raised does: the step went to code that could not answer."""
        if (refused := small_steps.retry_refused(name, self.raised)) is not None:
            return refused
        key = hygiene.call_key(name, args)
        if name == "load_skill" or key not in self.answered:
            return None  # a load_skill again answers "already loaded" itself
        if not small_steps.raised_by(name, self.answered[key]):
            return hygiene.already_answered(name, args)
        self.raised += 1
        return small_steps.retry_refused(name, self.raised) or \
            hygiene.already_answered(name, args, raised=True)

    def recall(self, messages: list[dict[str, Any]]) -> None:
        """Take back what this request's ``messages`` (resumed after a card) did: the calls
        answered, so identical ones stay repeats, and the attempts spent on code."""
        for made in small_steps.calls_made(messages):
            self.remember(*made)
        self.raised += small_steps.repeats_of_raised(messages)

    def attempts_left(self) -> bool:
        """May ``run_python`` still run in this request (small_steps.RUN_ATTEMPTS)?"""
        return self.raised < small_steps.RUN_ATTEMPTS

    def remember(self, name: str, args: dict[str, Any], result: str) -> None:
        """Keep ``result`` as the answer to this call; a call that may change something
        (not read-only) forgets every earlier one first."""
        tool = self.session.tools.get(name)
        read_only = name in _READ_ONLY_BUILTINS or (
            name not in RESERVED and tool is not None
            and bool(tool.annotations.get("readOnlyHint")))
        if not read_only:
            self.answered.clear()
        self.answered[hygiene.call_key(name, args)] = result
        self.raised += small_steps.raised_by(name, result)

    def execute(self, name: str, args: dict[str, Any]) -> str:
        """The tool result text, redacted then capped; refusals and tool failures start with
        'Error:'. Every result and error passes the live-secret redaction before it reaches
        the endpoint, the journal or the screen (docs/limits-and-secrets.md#secrets)."""
        env = self.session.environ
        try:
            return self._cap(redaction.redact(self._execute(name, args), env))
        except ToolError as exc:
            return redaction.redact(f"Error: {exc}", env)

    def _execute(self, name: str, args: dict[str, Any]) -> str:
        if name not in _BUILTIN and self.session.tools.get(name) is None \
                and self.session.snapshot.get(name) is not None:
            # a skill's name called as a tool: the request's own skill answers what to call
            # instead; another skill loads as load_skill would (docs/agent.md#loop-hygiene)
            return self.already_loaded(name) if name == self.skill else \
                self.load_skill({"name": name})
        if name == "load_skill":
            return self.load_skill(args)
        if name == "read_skill_file":
            return self.read_skill_file(args)
        if name == "propose_action":
            return self.propose_action(args)
        if name == "read_config":
            return self.read_config(args)
        if name == small_steps.ANSWER:  # alone in its step it is the answer (agent/loop.py)
            raise ToolError(small_steps.NOT_ALONE)
        return self.call_tool(name, args)

    def _cap(self, text: str) -> str:
        """Every tool result, built-in or registered, kept to [limits] tool_result_chars
        (docs/limits-and-secrets.md#caps)."""
        text, cut = pending.cap(text, self.session.limits.tool_result_chars)
        self.cut_results += cut
        return text

    def load_skill(self, args: dict[str, Any]) -> str:
        """``load_skill``: the skill's body from the snapshot; the first declares the
        request's skill, a second different one is refused."""
        _check_builtin("load_skill", args)
        name = args["name"]
        if self.skill is not None and self.skill == name:
            return self.already_loaded(name)
        snap = self.session.snapshot
        skill = snap.get(name)
        if skill is None:
            raise ToolError(f"no skill named '{name}' in this session (the skills index and its "
                            "note name every skill you may load)")
        if skill.disable_model_invocation and self.skill != name:
            raise ToolError(f"skill '{name}' can only be run by the user, with /skill {name}")
        if self.skill is not None and self.skill != name:
            raise ToolError(f"this request already uses skill '{self.skill}'; Lily allows one "
                            f"skill per request, so '{name}' is refused")
        self.skill = name
        note = ""
        if skill.invocation_mode == "tool_dispatch":
            note = (f"\n\n(This skill runs the tool '{skill.command_tool}' with the user's "
                    "input; call it if it is offered to you.)")
        if skill.typed is not None:
            note = ("\n\n(A typed skill: extract the parameters from the request, then call "
                    "propose_action with them. Lily checks them in code and asks the user to "
                    "confirm; do not claim anything was done before that.)")
        if skill.path in snap.held:  # an MCP server's: read and verified now (mcp_skills)
            from lily_kernel.tools.mcp.mcp_skills import for_model
            return f"# Skill: {name}\n\n{for_model(self.session, skill, None)}{note}"
        body = with_skill_dir(skill.body.strip(), skill.path)  # docs/skills-compat.md#claude-code-conventions
        return f"# Skill: {name}\n\n{body}{note}"

    def already_loaded(self, name: str) -> str:
        """The answer to loading, or calling as a tool, the request's own skill: not the
        body again, but the skill's tools this request offers and an example call of the
        first (``requires_tools``, then ``command_tool``)."""
        text = (f"Skill '{name}' is already loaded: its instructions are above in this "
                "request; it is not a tool. Follow them now; do not load it again.")
        skill = self.session.snapshot.get(name)
        offered = {s["function"]["name"] for s in self.tool_specs()}
        tools = [t for t in dict.fromkeys([*(skill.requires_tools if skill else ()),
                                           *([skill.command_tool] if skill and
                                             skill.command_tool else [])]) if t in offered]
        if tools:
            schema = self.schema_of(tools[0]) or {}
            text += (f" Call its tool{'s' if len(tools) > 1 else ''} ({', '.join(tools)}), "
                     f"first {tools[0]}: {hygiene.example(tools[0], schema)}")
        return text

    def _typed_skill(self) -> Skill:
        if self.skill is None:
            raise ToolError("load a typed skill with load_skill first")
        skill = self.session.snapshot.get(self.skill)
        if skill is None or skill.typed is None:
            raise ToolError(f"the loaded skill '{self.skill}' is not a typed skill")
        return skill

    def propose_action(self, args: dict[str, Any]) -> str:
        """``propose_action``: the loaded typed skill's action, checked in code and offered
        for the user's confirmation (docs/typed-skills.md#confirmation)."""
        from lily_kernel.typed import actions
        _check_builtin("propose_action", args)
        skill = self._typed_skill()
        refusal = pending.waiting_refusal(self.session, self.proposal)
        if refusal:  # a new proposal never replaces one that waits
            raise ToolError(refusal)
        try:
            action = actions.prepare(self.session, skill, args["parameters"])
        except ActionError as exc:
            raise ToolError(str(exc)) from None
        self.session.offer(action)
        self.proposal = action
        return (f"Proposed {skill.name} with {json.dumps(action.params)}. The user now sees a "
                "confirmation card (Confirm / Cancel, or /confirm and /cancel); nothing has "
                "happened yet. Tell the user briefly what will happen once they confirm.")

    def read_config(self, args: dict[str, Any]) -> str:
        """``read_config``: one setting the loaded typed skill may read, as JSON."""
        _check_builtin("read_config", args)
        from lily_kernel.typed.actions import spec_of  # typed skills load on first use
        skill = self._typed_skill()
        spec = spec_of(skill)
        scoped = self.session.config.scoped(skill.name, spec.acl_read, spec.acl_write)
        try:
            return json.dumps(scoped.read(args["path"]))
        except (PermissionError, ValueError) as exc:
            raise ToolError(str(exc)) from None

    def read_skill_file(self, args: dict[str, Any]) -> str:
        """``read_skill_file``: a file under the loaded skill's ``references/``."""
        _check_builtin("read_skill_file", args)
        if self.skill is None:
            raise ToolError("load a skill with load_skill before reading its files")
        skill = self.session.snapshot.get(self.skill)
        if skill is None:
            raise ToolError(f"the loaded skill '{self.skill}' is no longer loaded")
        if skill.path in self.session.snapshot.held:  # only a file its manifest lists
            from lily_kernel.tools.mcp.mcp_skills import for_model
            return for_model(self.session, skill, str(args["path"]))
        parts = split(args["path"])  # the file boundary, rooted at the skill's references/
        if parts[:1] == ("references",):
            parts = parts[1:]
        refs = WorkspaceFS(Path(skill.path) / "references", name="references",
                           read_bytes=self.session.limits.read_bytes)
        return refs.read("/".join(parts))

    def call_tool(self, name: str, args: dict[str, Any]) -> str:
        """A registered tool the gate lets run now (tools/gate.py), with arguments its
        schema accepts: as is, or in the sandbox (the footer says so)."""
        tool, args, note, said = self.decide(name, args)
        if isinstance(said, str):
            return said
        if isinstance(said, gate.Asks):  # needs_confirmation held it first
            raise ToolError(f"not run: {name} waits for the user's confirmation")
        self.tools_used.append(name)
        log.debug("tool call %s (%s, %s)", name, tool.origin, type(said).__name__)
        builds = isinstance(said, gate.Sandboxed) and name == small_steps.RETRIED
        if builds and self.built:  # the earlier runs' names, as in a kernel (docs/sandbox.md)
            args = {**args, "replay": list(self.built)}
        out = gate.run(tool, args, said)  # a tool's own failure is information for the model
        if isinstance(said, gate.Sandboxed):
            self.note(said.note)
        if builds and not small_steps.raised_by(name, out.text):
            self.built.append(str(args["code"]))
        if out.display is not None:
            self.shown.append(out.display)
        return f"{note}\n{out.text}" if note else out.text


def _check_builtin(name: str, args: dict[str, Any]) -> None:
    """A built-in model tool's arguments checked; the error names its signature."""
    schema = _BUILTIN[name]["function"]["parameters"]
    problem = check_args(schema, args)
    if problem:
        raise ToolError(f"{name}: {problem}; {hygiene.usage(name, schema)}")


def fit_arguments(tool: Tool, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A tool that takes no arguments is run without those it was given, and says so
    (the note put before its result); other tools' arguments are checked as they are."""
    if args and not (tool.parameters.get("properties") or {}):
        return {}, (f"(Note: {tool.name} takes no arguments; it ran without "
                    f"{', '.join(sorted(args))}.)")
    return args, ""


def offered_tools(session: Session) -> list[dict[str, Any]]:
    """The tool schemas a request of ``session`` offers the model now (for ``/model``)."""
    return Request(session, None).tool_specs()
