"""Tab completion and inspection for command cells (pure: no Jupyter imports).

Both work on the first line of a command cell only: the command word after
``/`` (built-ins and the snapshot's aliases), and the argument of ``/skill``,
``/help`` (skills and commands), ``/agent`` (agents) and ``/model`` (the endpoint's models,
then the settings).
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from lily_kernel.commands import table
from lily_kernel.commands.help import command_help, skill_help
from lily_kernel.commands.results import HelpPage
from lily_kernel.session.session import Session
from lily_kernel.skills.skill import Skill

Variables = Callable[[], Iterable[str]]  # the notebook's variable names (a face gives them)


def takes_variable(skill: Skill) -> bool:
    """Does the skill's first argument name a notebook variable? Its ``argument-hint`` says
    so (``<variable>``, ``[dataframe variable]``): Tab completes the notebook's variables and
    a name that does not exist fails before the model is called (docs/commands.md#variables-as-arguments)."""
    hint = getattr(skill, "argument_hint", None) or ""
    return "variable" in hint.lower()


def _endpoint_models(session: Session) -> list[str]:
    """The models the configured endpoint lists (asked once: agent/endpoint_info.py)."""
    from lily_kernel.agent import endpoint_info
    info = endpoint_info.of_session(session)
    return list(info.models or ()) if info else []


def _model_settings() -> list[str]:
    from lily_kernel.settings.model_settings import ModelConfig
    return [f"{f.name}=" for f in fields(ModelConfig) if f.name != "model"]


@dataclass(frozen=True)
class Completion:
    """Completion matches for the text between ``start`` and ``end``."""
    start: int
    end: int
    matches: tuple[str, ...]


def _first_line(code: str, cursor: int) -> tuple[int, str] | None:
    """(offset of the command line, text of that line up to the cursor), if the cursor is on it."""
    offset = 0
    for line in code.splitlines(keepends=True):
        if line.strip():
            break
        offset += len(line)
    end = code.find("\n", offset)
    end = len(code) if end == -1 else end
    if not (offset <= cursor <= end):
        return None
    stripped = code[offset:cursor].lstrip()
    if not stripped.startswith("/"):
        return None
    return cursor - len(stripped), stripped


def _command_words(session: Session) -> list[str]:
    snap = session.snapshot
    return sorted(set(table.BUILTIN_NAMES) | {a for a, name in snap.aliases.items()
                                                  if snap.skill(name).user_invocable})


def _runnable(session: Session) -> list[str]:
    """Skills the user may run: not those marked ``user-invocable: false``, which Claude
    Code hides from its ``/`` menu (docs/skills-compat.md#claude-code-conventions)."""
    return [s.name for s in session.snapshot.skills if s.user_invocable]


def complete(session: Session, code: str, cursor: int,
             variables: Variables | None = None) -> Completion | None:
    """What Tab offers at ``cursor`` in a command cell; ``variables`` lists the notebook's
    variables where the face has a notebook."""
    mention = _MENTION_AT.search(code[:cursor])
    if mention is not None and not code.lstrip().startswith("/"):
        return _mention(session, mention.group(1), cursor, variables)
    found = _first_line(code, cursor)
    if found is None:
        return None
    start, text = found
    if " " not in text:
        word = text[1:]
        return Completion(start, cursor, tuple("/" + w for w in _command_words(session)
                                               if w.startswith(word)))
    head, _, rest = text.partition(" ")
    if head == "/model":  # any number of key=value settings
        arg = rest.split(" ")[-1]
        if "=" in arg:
            return Completion(cursor, cursor, ())
        choices = _model_settings()
        if not any("=" not in w for w in rest.split(" ")[:-1]):  # no model named yet
            choices = _endpoint_models(session) + choices
        return Completion(cursor - len(arg), cursor,
                          tuple(o for o in choices if o.startswith(arg)))
    if " " in rest.strip() or rest.endswith("  "):
        return Completion(cursor, cursor, ())
    arg = rest.lstrip()
    arg_start = cursor - len(arg)
    options: list[str] = []
    skill = _skill_of(session, head[1:])
    if skill is not None and variables is not None and takes_variable(skill):
        options = sorted(variables())
    if options:
        pass
    elif head == "/skill":
        options = _runnable(session)
    elif head == "/help":
        options = session.snapshot.names() + ["/" + w for w in _command_words(session)]
    elif head == "/agent":
        options = session.agents()
    elif head == "/skills":
        options = ["--all"]
    return Completion(arg_start, cursor, tuple(o for o in options if o.startswith(arg)))


_MENTION_AT = re.compile(r"(?:^|(?<=[\s(\[{'\"]))@([\w.\-/\[\]]*)\Z")
_MAX_FILES = 200  # names a folder offers after @


def _mention(session: Session, word: str, cursor: int,
             variables: Variables | None) -> Completion:
    """Tab after ``@`` in a request: the notebook's variables, workspace files (a folder's
    entries after ``@folder/``), ``error``, ``figure`` and the cell forms
    (docs/notebook-tools.md#mentions)."""
    options = ["error", "figure", "In[", "cell[-1]"]
    if variables is not None:
        options += sorted(variables())
    folder, _, _ = word.rpartition("/")
    base = session.workspace / folder if folder else session.workspace
    try:
        with os.scandir(base) as entries:
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in entries
                           if not e.name.startswith("."))[:_MAX_FILES]
    except OSError:
        names = []
    options += [f"{folder}/{n}" if folder else n for n in names]
    return Completion(cursor - len(word), cursor,
                      tuple(dict.fromkeys(o for o in options if o.startswith(word))))


def _skill_of(session: Session, alias: str) -> Skill | None:
    snap = session.snapshot
    return snap.skill(snap.aliases[alias]) if alias in snap.aliases else None


def _word_at(line: str, pos: int) -> tuple[int, str]:
    """The whitespace-delimited word of ``line`` around ``pos`` and its index (0 = command)."""
    words = line.split()
    offset = 0
    for i, w in enumerate(words):
        begin = line.index(w, offset)
        end = begin + len(w)
        if begin <= pos <= end:
            return i, w
        offset = end
    return -1, ""


def inspect(session: Session, code: str, cursor: int) -> HelpPage | None:
    """A HelpPage for the command, alias or skill under the cursor, or None."""
    lines = code.lstrip("\n").split("\n", 1)
    line = lines[0]
    lead = len(code) - len(code.lstrip("\n"))
    if not line.lstrip().startswith("/") or cursor > lead + len(line):
        return None
    index, word = _word_at(line, max(cursor - lead, 0))
    snap = session.snapshot
    first = line.split()[0][1:]
    if index == 0 or (index == -1 and cursor - lead <= len(line.split()[0])):
        if first in table.BY_NAME:
            return command_help(table.BY_NAME[first])
        if first in snap.aliases:
            return skill_help(snap, snap.skill(snap.aliases[first]))
        return None
    if index == 1 and first in ("skill", "help") and snap.get(word) is not None:
        return skill_help(snap, snap.skill(word))
    # In the input of a skill (after an alias, or after `/skill NAME`): that skill's page,
    # which shows its argument-hint (docs/skills-compat.md#claude-code-conventions).
    words = line.split()
    if first in snap.aliases and cursor - lead > len(words[0]):
        return skill_help(snap, snap.skill(snap.aliases[first]))
    if first == "skill" and len(words) > 1 and snap.get(words[1]) is not None \
            and cursor - lead > line.index(words[1]) + len(words[1]):
        return skill_help(snap, snap.skill(words[1]))
    return None
