"""A lean request: tools offered only when usable, schemas kept short (docs/agent.md#a-lean-request).

Every request pays for the tool schemas it offers, and a small model is pulled
towards whatever it is offered, so a tool is offered only when this request
can use it (the table in docs/agent.md#what-a-request-offers): ``load_skill``
while the request has no skill (under one, forced or loaded, its body is
already in the request); ``read_skill_file`` when the request's skill has a
``references/`` folder; ``propose_action`` when the request's skill is typed
and ``read_config`` when it is an internal one that reads settings; a built-in
tool that backs one skill (``scan_todos``, ``compile_plan``) only under that
skill; the notebook tools exist only in a notebook (the face registers them).
``[tools] offer`` narrows the set further. A registered tool's schema carries
the first paragraph of its description (the rest stays in its docstring) and
no empty ``required`` list; the small-model profile keeps its first sentence
and drops the parameters' descriptions, and a request under a skill that
names its tools (``requires_tools``) offers only those.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from lily_kernel.skills.skill import Skill

_DOC_REF = re.compile(r"\s*\((?:see )?docs/[^)]*\)")
_SMALL_DROPS = ("description", "title", "default")
_SENTENCE = re.compile(r"(?<!\.[a-z])[.!?](?=\s)")  # not the end of "e.g."


def brief(description: str) -> str:
    """The first paragraph of ``description``, on one line, without docs/ references."""
    first = description.strip().split("\n\n", 1)[0]
    return _DOC_REF.sub("", " ".join(first.split()))


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence."""
    found = _SENTENCE.search(text)
    return text[:found.start() + 1] if found else text


def spec(name: str, description: str | None, parameters: Mapping[str, Any],
         small: bool = False) -> dict[str, Any]:
    """A registered tool's schema as offered to the model (``small``: the small-model
    profile's, with the description's first sentence and no parameter descriptions)."""
    params = dict(parameters)
    if not params.get("required"):
        params.pop("required", None)
    text = brief(description or "") or name
    if small:  # the first sentence; only the required parameters, bare
        text = first_sentence(text)
        props = params.get("properties")
        if isinstance(props, dict):
            required = params.get("required") or ()
            params["properties"] = {
                k: {f: v for f, v in p.items() if f not in _SMALL_DROPS}
                if isinstance(p, dict) else p for k, p in props.items() if k in required}
    return {"type": "function", "function": {"name": name, "description": text,
                                             "parameters": params}}


#: Built-in tools that back one bundled skill (docs/agent.md#what-a-request-offers): offered
#: only when the request's skill is that one, or a skill whose ``command_tool`` names them.
SKILL_TOOLS = {"scan_todos": "todo_scan", "compile_plan": "plan_compiler"}
#: The small-model profile's fewer tools: these Lily tools only when the request's text asks
#: for what they do (:data:`SMALL_ASKED`) or under a skill that names them
#: (``requires_tools``), so that "Say hello." stays near 600 prompt tokens
#: (docs/agent.md#small-model-profile).
SMALL_LEAVES_OUT = frozenset({"write", "edit", "list", "read_cells", "run_python"})
#: A data file's name: the formats pandas reads (csv, tsv, json, parquet, Excel, feather,
#: HDF5, Stata, SPSS, SAS, pickle, ...): a question about one is answered by code.
DATA_SUFFIX = (r"\.(?:csv|tsv|json|jsonl|ndjson|parquet|pq|feather|arrow|orc|xlsx|xlsm|xls|"
               r"ods|h5|hdf5?|dta|sav|sas7bdat|xpt|pkl|pickle)")
DATA_FILE = rf"[\w-]+{DATA_SUFFIX}"
_EXTENSION = r"\.[A-Za-z][A-Za-z0-9]{1,4}"  # what makes a word a file's name (2-5 characters)
_FILES = re.compile(rf"\b(?:files?|folders?|director(?:y|ies)|[\w-]+{_EXTENSION}|"
                    rf"{DATA_FILE})\b", re.IGNORECASE)
_RUN = re.compile(r"\b(?:run|execute|evaluate|compute|calculate|data ?frames?|"
                  rf"{DATA_FILE})\b", re.IGNORECASE)
_CELLS = re.compile(r"\bcells?\b", re.IGNORECASE)
_CHANGE = re.compile(r"\b(?:change|replace|edit|modify|modifies|update|rename|fix|fixes|correct|"
                     r"remove|delete|insert|append|uncomment|set|turn)(?:s|d|ed|ing)?\b",
                     re.IGNORECASE)
#: Which words of a request bring which left-out tool back, all of a tool's patterns
#: matching (a file name such as notes.txt, "file", "folder"; "run", "execute", a data file's
#: name or "DataFrame"; "cell"; and for ``edit`` a file and a word of change: "change",
#: "replace", "fix", …).
SMALL_ASKED = {"read": (_FILES,), "write": (_FILES,), "edit": (_FILES, _CHANGE),
               "list": (_FILES,), "run_python": (_RUN,), "read_cells": (_CELLS,)}


def asked_for(text: str) -> frozenset[str]:
    """The tools the request ``text`` asks for (:data:`SMALL_ASKED`): those of
    :data:`SMALL_LEAVES_OUT` come back, and all of them come first in the small profile."""
    return frozenset(name for name, words in SMALL_ASKED.items()
                     if all(w.search(text) for w in words))


_DATA_END = re.compile(rf"{DATA_SUFFIX}\b", re.IGNORECASE)
_WORD = re.compile(r"\S+")
_NOT_IN_NAME = re.compile(r"^.*[^\w .\-/]")  # a name starts after a quote, "(", "=", ":"
NAME_WORDS = 4  # the most words a data file's name is looked up with


def data_files(text: str, workspace: Path) -> list[str]:
    """The data files (:data:`DATA_FILE`) ``text`` names that ``workspace`` holds, each once,
    in order. A request naming one is a question about its data, answered by computing on
    it: the small profile's required steps then admit only ``run_python``
    (agent/small_steps.py), and the file's first lines are attached (tools/data_preview.py).
    A name may hold dots and spaces (``Qrob_Chr05.tree_table.csv``, ``veracruz 2016.csv``):
    before each data suffix the name is the longest run of up to :data:`NAME_WORDS` words,
    from after any quote or bracket, that names a file the workspace holds."""
    found: dict[str, None] = {}
    for end in _DATA_END.finditer(text):
        head = text[max(0, end.start() - 300):end.start()]
        starts = [w.start() for w in _WORD.finditer(head)][-NAME_WORDS:]
        if not starts or head[-1:].isspace():
            continue
        for start in starts:  # the longest name first
            name = _NOT_IN_NAME.sub("", head[start:] + end.group(0)).strip()
            if name and not name.startswith("/") and ".." not in name.split("/") and \
                    _is_file(workspace / name):  # in the workspace, named from it
                found.setdefault(name)
                break
    return list(found)


#: The tools that work on a workspace file's text: a request naming one it holds first admits
#: these (``list`` shows names, and the name is already known).
FILE_TOOLS = frozenset({"read", "edit", "write"})
#: a file's name as :data:`SMALL_ASKED` sees one (:data:`_EXTENSION`), maybe in a folder
_NAMED = re.compile(rf"(?<![\w/.-])([\w-][\w/.-]*{_EXTENSION})(?![\w-])")


def other_files(text: str, workspace: Path) -> list[str]:
    """The files other than data files (``app.py``, ``notes/todo.md``) that ``text`` names and
    ``workspace`` holds, each once, in order: a request naming one is about that file's
    text, so the small profile's required steps admit only the :data:`FILE_TOOLS` it asks
    for (agent/small_steps.py) — before the file was read an answer is a guess, and a notebook
    tool cannot see it (the 1.5B model proposed a cell for "Are there any TODO comments in
    app.py?"). A name is a word with a dot and an extension, relative, without ``..``."""
    found: dict[str, None] = {}
    for match in _NAMED.finditer(text):
        name = match.group(1)
        if _DATA_END.fullmatch(PurePath(name).suffix) or ".." in name.split("/") or \
                name in found:
            continue
        if _is_file(workspace / name):
            found.setdefault(name)
    return list(found)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long, a folder we may not enter
        return False


#: English function words of four letters or more: they say nothing of what a request is
#: about, so they never tie one to a skill (:func:`names_a_skill`).
FUNCTION_WORDS = frozenset({
    "about", "above", "after", "again", "also", "although", "among", "another", "anything",
    "because", "been", "before", "being", "below", "between", "both", "could", "does",
    "doing", "done", "down", "during", "each", "either", "else", "even", "ever", "every",
    "from", "further", "have", "having", "here", "into", "just", "like", "made", "make",
    "many", "more", "most", "much", "must", "neither", "never", "once", "only", "other",
    "over", "same", "should", "since", "some", "still", "such", "than", "that", "their",
    "them", "then", "there", "these", "they", "this", "those", "though", "through", "thus",
    "under", "unless", "until", "upon", "very", "want", "were", "what", "whatever", "when",
    "where", "whether", "which", "while", "whom", "whose", "will", "with", "within",
    "without", "would", "your", "yours"})
_LETTERS = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class SkillWords:
    """What the skills index says, for :func:`names_a_skill`: the names' words, and the
    index's content words as their first four and five letters."""
    names: frozenset[str]
    four: frozenset[str]
    five: frozenset[str]
    whole_four: frozenset[str]  # the content words of exactly four letters


def skill_words(index: Iterable[tuple[str, str]]) -> SkillWords:
    """:class:`SkillWords` of the skills index's ``(name, line)`` pairs (agent/prompt.py)."""
    names: set[str] = set()
    words: set[str] = set()
    for name, line in index:
        names.update(w for w in _LETTERS.findall(name.lower()) if len(w) > 1)
        words.update(_content(line))
    return SkillWords(frozenset(names), frozenset(w[:4] for w in words),
                      frozenset(w[:5] for w in words if len(w) >= 5),
                      frozenset(w for w in words if len(w) == 4))


def _content(text: str) -> set[str]:
    return {w for w in _LETTERS.findall(text.lower()) if len(w) >= 4 and w not in FUNCTION_WORDS}


def names_a_skill(text: str, index: SkillWords) -> bool:
    """Does the request ``text`` say anything the skills index says? It does when it holds a
    skill's name word (``git``, ``plan``), or a content word (four letters or more, not a
    function word) that shares its first five letters with one of the index's, or, for a
    four-letter word on either side, is the other's start ("plan" and "planning",
    "summarise" and "summary"). The small profile offers ``load_skill`` only then: a small
    model calls what it is offered, and a skill that shares no word with the request is
    not one it asks for ("Thanks, that was helpful.")."""
    words = _LETTERS.findall(text.lower())
    if index.names.intersection(words):
        return True
    return any(w in index.four if len(w) == 4 else
               w[:5] in index.five or w[:4] in index.whole_four for w in _content(text))


def asked_first(specs: list[dict[str, Any]], asked: frozenset[str],
                answer: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """``specs`` with the tools the request asks for first, ``run_python`` leading them (code
    computes what the others only show), each group in its own order, and ``answer`` (the
    small profile's answer tool) last — or first, when the request asks for none of them.
    A request that asks for a tool's work is answered after that work; one that asks for
    none (a greeting, "What is 15% of 80?") may be answered at once, and a small model
    leans to what is listed first (with the answer last, the 1.5B model proposed a cell to
    compute 15% of 80). Listed between the asked tools and the rest, the answer drew the
    1.5B model to answer with a tool's description after a ``list``."""
    ordered = sorted(specs, key=lambda s: (s["function"]["name"] not in asked,
                                           s["function"]["name"] != "run_python"))
    if any(s["function"]["name"] in asked for s in ordered):
        return [*ordered, *(answer or ())]
    return [*(answer or ()), *ordered]


def call_format(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``response_format`` that admits only one call to one of ``tools``, as the JSON object
    ``{"name": …, "arguments": {…}}`` (docs/agent.md#small-model-profile): each alternative
    names one tool and takes its parameters' schema."""
    calls = [{"type": "object", "properties": {
        "name": {"const": t["function"]["name"]},
        "arguments": t["function"].get("parameters") or {"type": "object"}},
        "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    return {"type": "json_schema",
            "json_schema": {"name": "tool_call", "schema": {"anyOf": calls}}}


def backs(name: str, skill: Skill | None) -> bool:
    """Does tool ``name`` back the request's skill (``compile_plan`` under plan_compiler)? Its
    schema is then offered whole in the small profile too: the skill's input is its
    argument."""
    return skill is not None and name in (skill.command_tool, *_backed(skill.name))


def _backed(skill_name: str) -> list[str]:
    return [tool for tool, skill in SKILL_TOOLS.items() if skill == skill_name]


def registered_offered(name: str, origin: str, skill: Skill | None, small: bool,
                       asked: frozenset[str] = frozenset()) -> bool:
    """Is the registered tool ``name`` (from ``origin``) offered to a request whose skill is
    ``skill`` and whose text asks for ``asked`` (:func:`asked_for`)? The policy and
    ``[tools] offer`` are checked besides this."""
    if origin == "builtin" and name in SKILL_TOOLS:  # only under its skill, and there always
        return skill is not None and name in (skill.command_tool, *_backed(skill.name))
    if small and skill is not None and skill.requires_tools:  # only what the skill names
        return name in skill.requires_tools or name == skill.command_tool
    return not (small and origin in ("builtin", "notebook") and name in SMALL_LEAVES_OUT
                and name not in asked)


def builtin_specs(skill: Skill | None, load_skill: dict[str, Any],
                  read_skill_file: dict[str, Any], propose_action: dict[str, Any],
                  read_config: dict[str, Any]) -> list[dict[str, Any]]:
    """The built-in model tools a request whose skill is ``skill`` can use."""
    if skill is None:  # under a skill, its body is already in the request
        return [load_skill]
    out = [read_skill_file] if skill.source.startswith("mcp:") or \
        (Path(skill.path) / "references").is_dir() else []
    if skill.typed is not None:
        out.append(propose_action)
        if skill.typed.kind == "internal" and skill.typed.acl_read:
            out.append(read_config)
    return out
