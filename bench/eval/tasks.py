"""The eval suite: ordinary notebook tasks, each with a checkable answer.

A task is a fresh Lily kernel in a fresh workspace: its ``files`` are written first, its
``setup`` cells run (``%%python`` cells; a failing one is how a task gets a "last error"),
then its ``prompt`` cell goes to Lily exactly as a user would type it (prose, or a command
such as ``/fix``). Approval cards are confirmed with ``/confirm`` (the suite plays a user who
says yes). ``check`` then looks at what the user got (:class:`Outcome`): the answers, the tool
calls Lily journaled, the workspace and the notebook's variables, and says whether the task
succeeded and, when not, why in a few words.

The checks read structured facts (tool calls, files, variables) wherever a task has one, and
answer text only for what only text can show (the columns named, a number); an answer that is
a tool call printed as JSON does not contain the facts the checks look for.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DF_SETUP = ("%%python\nimport pandas as pd\n"
            "df = pd.DataFrame({'x': [1, 2, 3, 4, 5, 6, 7], 'y': [10, 20, 30, 40, 50, 60, 70],\n"
            "                   'label': ['a', 'b', 'c', 'd', 'e', 'f', 'g']})")
NOTES = ("Team notes, 3 March.\n"
         "The launch meeting moved to Thursday.\n"
         "The budget was approved: 12,000 EUR.\n"
         "Alice leads the launch; Bob writes the release notes.\n")
CITIES = "city,population\nOslo,709000\nLima,10092000\nBern,134000\nQuito,2800000\n"
APP = ("def load(path):\n"
       "    # TODO: handle empty input\n"
       "    with open(path) as f:\n"
       "        return f.read()\n\n\n"
       "def save(path, text):\n"
       "    # FIXME: write atomically\n"
       "    open(path, 'w').write(text)\n")


@dataclass
class Call:
    name: str
    args: Any
    result: str | None


@dataclass
class Outcome:
    """What one task produced, as the checks see it."""
    answers: list[str]                 # the assistant's texts, in order (journal)
    calls: list[Call]                  # the tool calls, in order (journal)
    errors: list[str]                  # request errors Lily reported (journal)
    workspace: Path
    python: Callable[[str], str]       # run a %%python cell in the task's kernel, its stdout
    cards: int = 0                     # approval cards confirmed

    @property
    def tools(self) -> list[str]:
        return [c.name for c in self.calls]

    @property
    def text(self) -> str:
        """Everything the user reads: the answers, any cell Lily proposed and the output of
        code it ran (shown in the cell)."""
        proposed = [str(c.args.get("code", "")) for c in self.calls
                    if c.name == "propose_cell" and isinstance(c.args, dict)]
        ran = [c.result or "" for c in self.calls if c.name == "run_python"]
        return "\n".join(self.answers + proposed + ran)

    @property
    def final(self) -> str:
        return next((a for a in reversed(self.answers) if a.strip()), "")

    def mentions(self, *words: str) -> list[str]:
        """The words (case-insensitive, as whole words) the user's text does NOT contain."""
        text = self.text
        return [w for w in words if not re.search(
            rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", text, re.IGNORECASE)]


Check = Callable[[Outcome], str | None]  # None: success; else why it failed, in a few words


@dataclass
class Task:
    name: str
    prompt: str
    check: Check
    setup: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    kind: str = "prose"
    # a task that changes the notebook: a cell Lily proposes (propose_cell) is run, as the
    # user would run it, before the check
    run_proposed: bool = False
    # files copied into the workspace as they are (a benchmark's table: bench/eval/dabench.py)
    copies: dict[str, Path] = field(default_factory=dict)


# -- check helpers -------------------------------------------------------------------------

def says(*words: str) -> Check:
    """The answer names every one of ``words``."""
    def check(o: Outcome) -> str | None:
        missing = o.mentions(*words)
        return f"answer lacks {', '.join(missing)}" if missing else None
    return check


def says_any(*words: str) -> Check:
    def check(o: Outcome) -> str | None:
        return None if len(o.mentions(*words)) < len(words) else f"answer names none of {words}"
    return check


def called(*names: str) -> Check:
    """Every tool in ``names`` was called (as a real call, not text)."""
    def check(o: Outcome) -> str | None:
        missing = [n for n in names if n not in o.tools]
        return f"never called {', '.join(missing)}" if missing else None
    return check


def called_any(*names: str) -> Check:
    """At least one tool in ``names`` was called (a data file read with ``read``, or with
    ``run_python``: issue 40 offers code first for a data file)."""
    def check(o: Outcome) -> str | None:
        return None if any(n in o.tools for n in names) else f"never called {' or '.join(names)}"
    return check


def all_of(*checks: Check) -> Check:
    def check(o: Outcome) -> str | None:
        for c in checks:
            why = c(o)
            if why:
                return why
        return None
    return check


def number(value: float) -> Check:
    """The answer holds ``value`` as a number (12000, 12,000 and 12000.0 alike)."""
    def check(o: Outcome) -> str | None:
        for raw in re.findall(r"-?\d[\d,]*(?:\.\d+)?", o.text):
            try:
                if abs(float(raw.replace(",", "")) - value) < 1e-6:
                    return None
            except ValueError:
                continue
        return f"answer lacks {value:g}"
    return check


def file_is(path: str, expect: Callable[[str], bool], what: str) -> Check:
    def check(o: Outcome) -> str | None:
        p = o.workspace / path
        if not p.exists():
            return f"{path} not written"
        return None if expect(p.read_text(encoding="utf-8", errors="replace")) else \
            f"{path} {what}"
    return check


def python_prints(code: str, expect: str, why: str) -> Check:
    def check(o: Outcome) -> str | None:
        out = o.python(code).strip()
        return None if out == expect else f"{why} (got {out[:60]!r})"
    return check


def loaded(skill: str) -> Check:
    def check(o: Outcome) -> str | None:
        for c in o.calls:
            if c.name == "load_skill" and isinstance(c.args, dict) and skill in str(c.args):
                return None
        return f"never loaded {skill}"
    return check


def any_answer() -> Check:
    def check(o: Outcome) -> str | None:
        return None if o.final.strip() else "no answer text"
    return check


def no_raw_call() -> Check:
    """The final answer is not a tool call printed as text."""
    def check(o: Outcome) -> str | None:
        final = o.final.strip()
        if re.search(r'"(name|function)"\s*:\s*"', final) or "<tool_call>" in final:
            return "final answer is a tool call as text"
        return None
    return check


# -- the tasks -----------------------------------------------------------------------------

NAME_ERROR = "%%python\nprices = [3, 4, 5]\ntotal = sum(prices)\nprint(totl)"
KEY_ERROR = "%%python\nitem = {'name': 'pen', 'price': 2}\nprint(item['Price'])"

TASKS: list[Task] = [
    Task("hello", "Say hello.", all_of(any_answer(), says_any("hello", "hi"), no_raw_call())),
    Task("columns", "What columns does df have?", all_of(says("x", "y", "label"), no_raw_call()),
         setup=[DF_SETUP]),
    Task("rows", "How many rows does df have?", all_of(number(7), no_raw_call()),
         setup=[DF_SETUP]),
    Task("variables", "Which variables are defined in my notebook?",
         all_of(called("list_variables"), says("df", "threshold", "prices")),
         setup=[DF_SETUP, "%%python\nthreshold = 42\nprices = [3.5, 4.25, 9.0]"]),
    Task("inspect", "What is the value of threshold?", all_of(number(42), no_raw_call()),
         setup=["%%python\nthreshold = 42\nname = 'demo'"]),
    Task("var_type", "What type of object is prices in my notebook?",
         all_of(says("list"), no_raw_call()),
         setup=["%%python\nprices = [3.5, 4.25, 9.0]\nrate = 0.2"]),
    Task("last_error", "What was the last error and how do I fix it?",
         all_of(called("last_error"), says("NameError"), says_any("total", "totl")),
         setup=[NAME_ERROR]),
    Task("fix", "/fix", all_of(called("last_error"), says("'price'")), setup=[KEY_ERROR],
         kind="command"),
    Task("read_cells", "What did my last cell compute?",
         all_of(says_any("45", "sum")), setup=["%%python\nresult = sum(range(10))\nprint(result)"]),
    Task("add_column", "Add a column z = x*2 to df.",
         python_prints("print(list(df['z']) == [v * 2 for v in df['x']] if 'z' in df else 'no z')",
                       "True", "df has no column z = x*2"),
         setup=[DF_SETUP], run_proposed=True),
    Task("mean", "What is the mean of column y in df?", all_of(number(40), no_raw_call()),
         setup=[DF_SETUP]),
    Task("largest_sum", "Which numeric column of df has the largest sum?",
         all_of(says("y"), no_raw_call()),
         setup=[DF_SETUP]),
    Task("run_code", "Run print(6*7) in the notebook for me.",
         all_of(called("run_python"), says("42"))),
    Task("notes_summary", "Read notes.txt and summarise it.",
         all_of(called("read"), says("Thursday", "Alice"), number(12000)), files={"notes.txt": NOTES}),
    Task("list_files", "What files are in this folder?",
         all_of(called("list"), says("notes.txt", "cities.csv")),
         files={"notes.txt": NOTES, "cities.csv": CITIES}),
    Task("csv_max", "Read cities.csv and tell me which city has the largest population.",
         all_of(called_any("read", "run_python"), says("Lima")), files={"cities.csv": CITIES}),
    Task("todos", "Are there any TODO or FIXME comments in app.py? Quote them.",
         all_of(says_any("handle empty input"), says_any("atomically")), files={"app.py": APP}),
    Task("write_new", "Create a file hello.txt containing exactly: hello from lily",
         file_is("hello.txt", lambda t: t.strip() == "hello from lily", "has other text")),
    Task("edit_file", "In settings.txt, change debug = true to debug = false.",
         file_is("settings.txt", lambda t: "debug = false" in t and "debug = true" not in t
                 and "port = 8080" in t, "not changed as asked"),
         files={"settings.txt": "debug = true\nport = 8080\n"}),
    Task("summary_to_file", "Read notes.txt and write a one-line summary of it to summary.txt.",
         all_of(called("read"), file_is("summary.txt",
                                         lambda t: any(w in t.lower() for w in
                                                       ("thursday", "12", "alice", "launch")),
                                         "does not summarise notes.txt")),
         files={"notes.txt": NOTES}),
    Task("plan_skill", "Use the plan skill to plan adding unit tests to my project.",
         all_of(loaded("plan_compiler"), says_any("step", "steps"), no_raw_call())),
    Task("plan_command", "/plan add a dark mode to the settings page",
         all_of(says_any("step", "steps", "phase", "phases"), says_any("dark")), kind="command"),
    Task("explore", "/explore df", all_of(called("inspect_variable"), says("label")),
         setup=[DF_SETUP], kind="command"),
    Task("fix_prose", "My last cell failed. Explain why in one sentence.",
         all_of(called("last_error"), says_any("Price", "KeyError")), setup=[KEY_ERROR]),
]

CONFIG = "[server]\nhost = localhost\nport = 8080\n"

#: Held out: written after issue 30's sixth session had changed Lily, to see how far the
#: changes carry to tasks they were not made for (``run_eval.py --held-out``; not in the
#: suite's success rate). bench/README.md has their first run.
HELD_OUT: list[Task] = [
    Task("set_port", "In config.ini, set port to 9090.",
         file_is("config.ini", lambda t: "port = 9090" in t and "host = localhost" in t,
                 "not changed as asked"), files={"config.ini": CONFIG}),
    Task("max_x", "What is the largest value in column x of df?",
         all_of(number(7), no_raw_call()), setup=[DF_SETUP]),
    Task("sum_y", "What is the sum of df['y']?", all_of(number(280), no_raw_call()),
         setup=[DF_SETUP]),
    Task("csv_rows", "How many cities are listed in cities.csv?",
         all_of(number(4), no_raw_call()), files={"cities.csv": CITIES}),
    Task("cell_printed", "What did my previous cell print?", says_any("hello world"),
         setup=["%%python\nprint('hello world')"]),
    Task("fix_typo", "Fix the typo 'helo' in greeting.txt so it says 'hello'.",
         file_is("greeting.txt", lambda t: t == "hello there\nbye\n", "not fixed"),
         files={"greeting.txt": "helo there\nbye\n"}),
    Task("dtype", "What dtype is column label in df?", says_any("object", "str", "string"),
         setup=[DF_SETUP]),
    Task("total_column", "Add a column total = x + y to df.",
         python_prints("print(list(df['total']) == [a + b for a, b in zip(df['x'], df['y'])] "
                       "if 'total' in df else 'no total')", "True", "df has no column total"),
         setup=[DF_SETUP], run_proposed=True),
]

def no_tool() -> Check:
    """No tool was called: the answer came without one."""
    def check(o: Outcome) -> str | None:
        return f"called {', '.join(o.tools)}" if o.tools else None
    return check


#: Requests that need no tool (issue 40 §1): answered in one step with the answer tool
#: (``run_eval.py --suite answer``). Written with the change, so not held out.
ANSWERED: list[Task] = [
    Task("greeting", "Good morning! How are you today?",
         all_of(any_answer(), no_raw_call(), no_tool())),
    Task("arithmetic", "What is 17 * 23?", all_of(number(391), no_raw_call(), no_tool())),
    Task("percent", "What is 15% of 80? Give the number only.",
         all_of(number(12), no_raw_call(), no_tool())),
    Task("thanks", "Thanks, that was helpful.", all_of(any_answer(), no_raw_call(), no_tool())),
]
#: Requests that need no tool (``--suite answer --held-out``). The first four were written
#: after the answer tool's place in the list changed (tools/offering.asked_first) and held out
#: from it; two of them failed, and led to the look-ups being offered only when they could
#: find something (notebook_tools.has_something), so they are not held out from that. The
#: last four were written after it.
ANSWERED_HELD_OUT: list[Task] = [
    Task("power", "What is 2 to the power of 10?", all_of(number(1024), no_raw_call(), no_tool())),
    Task("minutes", "How many minutes are in 3.5 hours? Just the number.",
         all_of(number(210), no_raw_call(), no_tool())),
    Task("hi", "Hi Lily!", all_of(any_answer(), no_raw_call(), no_tool())),
    Task("acronym", "What does CSV stand for?",
         all_of(says("comma"), no_raw_call(), no_tool())),
    Task("square_root", "What's the square root of 144?",
         all_of(number(12), no_raw_call(), no_tool())),
    Task("celsius", "Convert 100 degrees Fahrenheit to Celsius, rounded to one decimal.",
         all_of(number(37.8), no_raw_call(), no_tool())),
    Task("median_def", "In one sentence, what is a median?",
         all_of(says_any("middle"), no_raw_call(), no_tool())),
    Task("bye", "Great, see you tomorrow.", all_of(any_answer(), no_raw_call(), no_tool())),
]

BY_NAME = {t.name: t for t in TASKS + HELD_OUT + ANSWERED + ANSWERED_HELD_OUT}
