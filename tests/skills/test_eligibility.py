"""docs/loader.md: eligibility.ineligibility lists every failed rule, in a fixed order.

The function first tells whether every rule passes (the usual skill) without building
a reason; these tests check that every combination of failed rules still gets every
reason, in order, and that the tool policy is asked once per tool, in the rules' order.
"""
from __future__ import annotations

import itertools

from lily_kernel.skills.eligibility import Host, ToolReasons, WhichCache, ineligibility
from lily_kernel.skills.skill import Eligibility, Skill
from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

HOST = Host("linux", {"SET": "1", "EMPTY": ""}, "")  # an empty PATH: no binary is found


def _tools() -> ToolRegistry:
    tools = ToolRegistry()
    for name in ("read", "write", "run"):
        tools.register(lambda: "", name=name, description=name)
    return tools


POLICY = ToolPolicy(deny=frozenset({"write"}))

# rule -> (what the skill declares to break it, the reason's part)
RULES = {
    "os": ({"os": ("win32", "darwin")}, "requires OS win32 or darwin; this is linux"),
    "env": ({"env": ("SET", "EMPTY", "NOPE")},
            "requires environment variable(s) EMPTY, NOPE (unset or empty)"),
    "binaries": ({"binaries": ("nobin-a",)}, "requires binary nobin-a on PATH (not found)"),
    "any_binaries": ({"any_binaries": ("nobin-b", "nobin-c")},
                     "requires one of the binaries nobin-b, nobin-c on PATH (none found)"),
    "command_tool": ({"command_tool": "write"},
                     "its command_tool is unavailable: tool 'write' is denied by the tool policy"),
    "requires_tools": ({"requires_tools": ("read", "write", "nosuch")},
                       "requires tool 'write': tool 'write' is denied by the tool policy; "
                       "requires tool 'nosuch': tool 'nosuch' is not registered"),
    "notebook": ({"requires_tools": ("read_cells",)},
                 "needs a notebook (the Lily kernel or %load_ext lily) for its notebook tool "
                 "read_cells"),
}
PASSING = {"os": ("linux", "win32"), "env": ("SET",), "command_tool": "run",
           "requires_tools": ("read", "run")}


def _skill(declared: dict) -> Skill:
    elig = {k: declared[k] for k in ("os", "env", "binaries", "any_binaries") if k in declared}
    return Skill(name="s", source="workspace", path="/s", text="", body="",
                 eligibility=Eligibility(**elig), command_tool=declared.get("command_tool"),
                 requires_tools=declared.get("requires_tools", ()))


class _Asked(ToolReasons):
    """The real ToolReasons, recording which names it asked the policy, in order."""

    def __init__(self, tools: ToolRegistry, policy: ToolPolicy) -> None:
        super().__init__(tools, policy)
        self.asked: list[str] = []

    def __missing__(self, name: str) -> str | None:
        self.asked.append(name)
        return super().__missing__(name)


def test_every_combination_of_failed_rules_gets_every_reason_in_order():
    tools = _tools()
    for n in range(len(RULES) + 1):
        for failing in itertools.combinations(RULES, n):
            if "requires_tools" in failing and "notebook" in failing:
                continue  # one key; the two are checked together below
            declared = dict(PASSING)
            for rule in failing:
                declared.update(RULES[rule][0])
            expected = "; ".join(RULES[rule][1] for rule in failing) or None
            reasons = _Asked(tools, POLICY)
            got = ineligibility(_skill(declared), tools, POLICY, HOST, WhichCache(HOST.path),
                                reasons)
            assert got == expected, failing
            names = list(dict.fromkeys([declared["command_tool"], *declared["requires_tools"]]))
            assert reasons.asked == names, failing  # each once, in the rules' order


def test_a_passing_skill_is_eligible_and_a_notebook_tool_is_one_reason():
    tools = _tools()
    assert ineligibility(_skill(PASSING), tools, POLICY, HOST, WhichCache(HOST.path)) is None
    assert ineligibility(_skill({}), tools, POLICY, HOST, WhichCache(HOST.path)) is None
    both = _skill({"requires_tools": ("read_cells", "write", "run_python")})
    assert ineligibility(both, tools, POLICY, HOST, WhichCache(HOST.path)) == (
        "requires tool 'write': tool 'write' is denied by the tool policy; needs a notebook "
        "(the Lily kernel or %load_ext lily) for its notebook tools read_cells, run_python")
