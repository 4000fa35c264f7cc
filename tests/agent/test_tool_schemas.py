"""Tool schemas derived from signatures (docs/agent.md#tool-schemas).

Written with ``from __future__ import annotations`` on purpose: every annotation
below is a string, which the hand-written builder turned into ``{}``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Literal

import pytest
from agent_support import World

from lily_kernel.agent import loop, request
from lily_kernel.tools.tool_registry import ToolRegistry, check_args, param_docs, schema_for

pytestmark = pytest.mark.usefixtures("no_machine_model")


def tag(paths: list[str], label: str, limit: int | None = None,
        mode: Literal["add", "remove"] = "add", weights: dict[str, float] | None = None) -> str:
    """Tag files.

    Args:
        paths: Files to tag, relative to the workspace.
        label (str): The tag to apply;
            lowercase letters only.
        limit: At most this many files.
        mode: Add or remove the tag.

    Returns:
        A summary line.
    """
    return "ok"


def test_future_annotations_give_real_types():
    s = schema_for(tag)
    props = s["properties"]
    assert s["type"] == "object" and s["required"] == ["paths", "label"]
    assert props["paths"]["type"] == "array" and props["paths"]["items"] == {"type": "string"}
    assert props["label"]["type"] == "string"
    assert props["limit"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["limit"]["default"] is None
    assert props["mode"]["enum"] == ["add", "remove"] and props["mode"]["default"] == "add"
    assert props["weights"]["anyOf"][0] == {"type": "object",
                                            "additionalProperties": {"type": "number"}}
    assert "title" not in json.dumps(s)  # pydantic's generated titles are noise for a model


def test_google_docstring_gives_descriptions():
    props = schema_for(tag)["properties"]
    assert props["paths"]["description"] == "Files to tag, relative to the workspace."
    assert props["label"]["description"] == "The tag to apply; lowercase letters only."
    assert props["mode"]["description"] == "Add or remove the tag."
    assert "description" not in props["weights"]


def test_numpy_and_sphinx_docstrings_give_descriptions():
    def numpy(path: str, depth: int = 1) -> str:
        """List a folder.

        Parameters
        ----------
        path : str
            The folder, relative
            to the workspace.
        depth : int, optional
            How deep to go.

        Returns
        -------
        str
        """

    def sphinx(path: str, depth: int = 1) -> str:
        """List a folder.

        :param path: The folder.
        :param int depth: How deep
            to go.
        :returns: the listing
        """
    assert param_docs(numpy.__doc__) == {"path": "The folder, relative to the workspace.",
                                         "depth": "How deep to go."}
    assert param_docs(sphinx.__doc__) == {"path": "The folder.", "depth": "How deep to go."}
    assert schema_for(numpy)["properties"]["depth"] == {"type": "integer", "default": 1,
                                                        "description": "How deep to go."}


def test_description_leaves_the_parameter_section_to_the_schema():
    reg = ToolRegistry()
    reg.register(tag)
    description = reg.get("tag").description
    assert description.startswith("Tag files.") and "Returns:" in description
    assert "Files to tag" not in description


def test_parameter_names_may_shadow_pydantic_attributes():
    def odd(json: str, copy: int = 0, model_config: bool = False, schema: str = "") -> str:
        return json
    s = schema_for(odd)
    assert list(s["properties"]) == ["json", "copy", "model_config", "schema"]
    assert check_args(s, {"json": "x", "copy": 2, "model_config": True}) is None


def test_unannotated_parameters_accept_anything():
    def loose(a, b=3):
        return a
    s = schema_for(loose)
    assert s["properties"] == {"a": {}, "b": {"default": 3}} and s["required"] == ["a"]
    assert check_args(s, {"a": [1, {"x": None}]}) is None


@pytest.mark.parametrize("args, problem", [
    ({"label": "x"}, "missing required argument(s): paths"),
    ({"paths": [], "label": "x", "colour": 1}, "unknown argument(s): colour (takes: paths, label, "
                                                "limit, mode, weights)"),
    ({"paths": "a.txt", "label": "x"}, "argument 'paths' must be of type array"),
    ({"paths": ["a", 2], "label": "x"}, "argument 'paths[1]': Input should be a valid string"),
    ({"paths": [], "label": "x", "limit": "3"}, "argument 'limit': Input should be a valid integer"),
    ({"paths": [], "label": "x", "limit": True}, "argument 'limit': Input should be a valid integer"),
    ({"paths": [], "label": "x", "mode": "toggle"}, "argument 'mode': Input should be 'add' or 'remove'"),
    ({"paths": [], "label": "x", "weights": {"a": "heavy"}},
     "argument 'weights['a']': Input should be a valid number"),
])
def test_arguments_are_validated_strictly(args, problem):
    assert check_args(schema_for(tag), args) == problem


@pytest.mark.parametrize("args", [
    {"paths": ["a"], "label": "x"},
    {"paths": [], "label": "x", "limit": None, "mode": "remove"},
    {"paths": [], "label": "x", "limit": 3, "weights": {"a": 1, "b": 0.5}},  # an int is a number
])
def test_good_arguments_pass(args):
    assert check_args(schema_for(tag), args) is None


def test_scalar_types_are_strict():
    def f(a: int, b: float = 1.0, c: bool = False, d: str | None = None):
        pass
    s = schema_for(f)
    assert check_args(s, {"a": 1, "b": 2, "c": True, "d": None}) is None
    assert check_args(s, {"a": 1.5}) == "argument 'a' must be of type integer"
    assert check_args(s, {"a": 1, "b": "2.0"}) == "argument 'b' must be of type number"
    assert check_args(s, {"a": 1, "c": 1}) == "argument 'c' must be of type boolean"
    assert check_args(s, {"a": 1, "d": 5}) == "argument 'd': Input should be a valid string"
    assert check_args(s, ["a"]) == "the arguments must be a JSON object"


def test_hand_written_flat_schemas_are_checked_too():
    schema = request.LOAD_SKILL["function"]["parameters"]
    assert check_args(schema, {"name": "plan_compiler"}) is None
    assert check_args(schema, {}) == "missing required argument(s): name"
    assert check_args(schema, {"name": 3}) == "argument 'name' must be of type string"
    assert check_args(schema, {"name": "x", "y": 1}) == "unknown argument(s): y (takes: name)"


def test_the_model_is_offered_the_derived_schema(tmp_path, server):
    """End to end: the request the ScriptedServer receives carries the derived schema, and a
    bad call is refused before the tool runs."""
    ran: list[list[str]] = []

    def count(paths: list[str], mode: Literal["lines", "words"] = "lines") -> int:
        """Count lines or words in files.

        Args:
            paths: Files in the workspace.
        """
        ran.append(paths)
        return len(paths)

    session = World(tmp_path).session(server)
    session.tools.register(count)
    server.add({"tool_calls": [{"name": "count", "arguments": {"paths": "a.txt"}, "id": "bad"},
                               {"name": "count", "arguments": {"paths": ["a", "b"]}, "id": "ok"}]},
               "two files")
    reply = loop.run(session, "count them")
    assert reply.text == "two files" and ran == [["a", "b"]]
    first = server.chat_requests()[0]
    spec = next(t["function"] for t in first["tools"] if t["function"]["name"] == "count")
    assert spec["description"] == "Count lines or words in files."
    assert spec["parameters"] == {
        "type": "object", "required": ["paths"],
        "properties": {"paths": {"type": "array", "items": {"type": "string"},
                                 "description": "Files in the workspace."},
                       "mode": {"type": "string", "enum": ["lines", "words"], "default": "lines"}}}
    results = {m["tool_call_id"]: m["content"] for m in server.chat_requests()[-1]["messages"]
               if m.get("role") == "tool"}
    # the error names the real signature and an example call (docs/agent.md#loop-hygiene)
    assert results == {"bad": "Error: count: argument 'paths' must be of type array; the "
                              'signature is count(paths: array, mode: "lines" | "words" = '
                              '"lines"); for example: {"name": "count", "arguments": '
                              '{"paths": []}}', "ok": "2"}


def test_pydantic_is_imported_only_when_a_schema_is_needed():
    code = ("import sys\nfrom lily_kernel.session.session import Session\n"
            "from lily_kernel.commands.runner import Runner\n"
            "s = Session(journal=False)\nr = Runner(lambda: s)\n"
            "list(r.command('/skills'))\nlist(r.command('/todos'))\n"
            "before = 'pydantic' in sys.modules\n"
            "s.tools.get('read').parameters\n"
            "print(before, 'pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"], out.stderr
