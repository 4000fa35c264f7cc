"""The notebook tools: what the agent may see of the notebook, and how it proposes code.

``list_variables``, ``inspect_variable``, ``read_cells``, ``last_error``,
``propose_cell`` and ``run_python`` are registered by the Jupyter faces (the
kernel and ``%load_ext lily``), never by the CLI, through the ordinary
:class:`ToolRegistry`, so the tool policy (allow/deny) applies as to any tool and
``run_python`` waits behind the confirmation card (``[tools] confirm``). This
module needs no Jupyter: a :class:`Notebook` (the face) supplies the namespace,
the cell history, the last error and the two actions. Registering is O(1);
nothing walks the namespace until the model calls a tool. Contracts:
docs/notebook-tools.md.
"""
from __future__ import annotations

import re
import reprlib
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from lily_kernel.agent.tools import Shown, ToolError, ToolRegistry
from lily_kernel.agent import bounded

LIST_SHOWN = 200            # variables named by one list_variables answer
LIST_CHARS = 8_000          # characters of one list_variables answer
INSPECT_CHARS = 4_000       # characters of one inspect_variable answer
INSPECT_SECONDS = 1.0       # time one inspect_variable may take (a slow __repr__ ends here)
CELLS_MAX = 20              # read_cells(last=...) at most
CELL_SOURCE_CHARS = 2_000   # characters of one cell's source
CELL_OUTPUT_CHARS = 1_500   # characters of one cell's output
ERROR_CHARS = 4_000         # characters of last_error's traceback
RUN_OUTPUT_CHARS = 6_000    # characters of run_python's output given to the model
STATS_MAX_ELEMENTS = 10_000_000  # ndarray min/max/mean only below this size (C loops ignore the bound)

IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
SECRET_RE = re.compile(r"key|token|secret|passw|credential", re.IGNORECASE)
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CALLABLE_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                   types.BuiltinMethodType, type)
_SIZED = (list, tuple, dict, set, frozenset, str, bytes, bytearray, range)
NOT_SHARED = "(values are not shared: [notebook] share_values = false)"


@dataclass(frozen=True)
class Cell:
    count: int
    source: str
    output: str  # the cell's text output (streams, results, errors), plain


@dataclass(frozen=True)
class ErrorInfo:
    count: int | None
    source: str
    ename: str
    evalue: str
    traceback: str  # plain text


@dataclass(frozen=True)
class RunResult:
    output: str  # what the code printed and showed, as text
    error: ErrorInfo | None = None
    display: object | None = None  # the face's own record of it, shown where the user decided


class Notebook(Protocol):
    """What a Jupyter face gives the notebook tools."""

    def namespace(self) -> Mapping[str, Any]: ...
    def hidden(self) -> Mapping[str, Any]: ...  # the shell's own names -> their values
    def cells(self, last: int) -> list[Cell]: ...  # executed before the current request
    def last_error(self) -> ErrorInfo | None: ...
    def propose(self, code: str) -> None: ...
    def run(self, code: str) -> RunResult: ...


def is_secret(name: str) -> bool:
    return SECRET_RE.search(name) is not None


def clip(text: str, limit: int, tail: bool = False) -> str:
    """``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f"[… {len(text) - limit:,} characters cut …]"
    return (note + "\n" + text[-limit:]) if tail else (text[:limit] + "\n" + note)


def plain(text: str) -> str:
    return ANSI_RE.sub("", text)


# -- shapes: one line, no user code run ----------------------------------------------------

def _module_class(obj: Any, module: str, name: str) -> bool:
    """Is ``obj`` an instance of ``module.name``, without importing ``module``?"""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def shape(obj: Any) -> str:
    """``DataFrame 1,000×12``, ``ndarray float64 (3, 224, 224)``, ``list[37]``, ``str[1,204]``."""
    kind = type(obj).__name__
    if _module_class(obj, "pandas", "DataFrame"):
        rows, cols = obj.shape
        return f"DataFrame {rows:,}×{cols:,}"
    if _module_class(obj, "pandas", "Series"):
        return f"Series {obj.dtype} [{len(obj):,}]"
    if _module_class(obj, "numpy", "ndarray"):
        return f"ndarray {obj.dtype} {tuple(obj.shape)}"
    if isinstance(obj, _SIZED) and type(obj).__len__ in (t.__len__ for t in _SIZED):
        return f"{kind}[{len(obj):,}]"
    return kind


def _listed(name: str, value: Any, hidden: Mapping[str, Any], include_callables: bool) -> bool:
    if name.startswith("_") or name in IPYTHON_NAMES:
        return False
    if name in hidden and hidden[name] is value:
        return False
    if isinstance(value, types.ModuleType):
        return False
    if not include_callables and isinstance(value, _CALLABLE_TYPES):
        return False
    return True


def list_variables(nb: Notebook, include_callables: bool = False) -> str:
    ns = nb.namespace()
    hidden = nb.hidden()
    shown: list[str] = []
    secret = 0
    for name, value in list(ns.items()):
        if not _listed(name, value, hidden, include_callables):
            continue
        if is_secret(name):
            secret += 1
            continue
        shown.append(name)
    lines = []
    older = max(0, len(shown) - LIST_SHOWN)
    for name in shown[older:]:  # the most recently defined ones
        try:
            lines.append(f"{name}: {shape(ns[name])}")
        except Exception:  # noqa: BLE001 - an odd object still gets its name and type
            lines.append(f"{name}: {type(ns.get(name)).__name__}")
    head = (f"{len(shown)} variable{'s' if len(shown) != 1 else ''}"
            + (f" ({older:,} older ones not listed; inspect_variable takes any name)" if older else "")
            + (f"; {secret} hidden (their names look like secrets)" if secret else "")
            + ("" if include_callables else "; functions and classes left out"))
    return clip("\n".join([head + ":" if lines else head, *lines]), LIST_CHARS)


# -- inspect ------------------------------------------------------------------------------

_repr = reprlib.Repr()
_repr.maxstring = 200
_repr.maxother = 200
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 10
_repr.maxlevel = 3


def _describe(obj: Any, share: bool) -> str:
    kind = type(obj).__name__
    if _module_class(obj, "pandas", "DataFrame"):
        rows, cols = obj.shape
        out = [f"DataFrame {rows:,} rows × {cols:,} columns", "columns (dtype):"]
        out += [f"  {c!s}: {t}" for c, t in list(obj.dtypes.items())[:50]]
        if cols > 50:
            out.append(f"  … {cols - 50} more columns")
        if share:
            nulls = obj.isna().sum()
            out.append("nulls per column: " + ", ".join(
                f"{c!s}={int(n)}" for c, n in list(nulls.items())[:50]))
            out += ["head():", obj.head(5).to_string(max_cols=20, max_colwidth=40)]
        return "\n".join(out)
    if _module_class(obj, "pandas", "Series"):
        out = [f"Series {obj.name!s}: {len(obj):,} values, dtype {obj.dtype}"]
        if share:
            out.append(f"nulls: {int(obj.isna().sum())}")
            out += ["head():", obj.head(5).to_string(max_rows=5)]
        return "\n".join(out)
    if _module_class(obj, "numpy", "ndarray"):
        out = [f"ndarray shape {tuple(obj.shape)}, dtype {obj.dtype}, {obj.size:,} elements"]
        if share and obj.size and obj.dtype.kind in "biuf":
            if obj.size <= STATS_MAX_ELEMENTS:
                out.append(f"min {obj.min()!s}, max {obj.max()!s}, mean {obj.mean()!s}")
            else:
                out.append(f"(min/max/mean skipped above {STATS_MAX_ELEMENTS:,} elements)")
        return "\n".join(out)
    if isinstance(obj, (str, bytes, bytearray)):
        head = f"{kind} of length {len(obj):,}"
        return head + (f"; starts: {_repr.repr(obj[:300])}" if share else "")
    if isinstance(obj, (list, tuple, set, frozenset, dict)):
        head = f"{kind} of length {len(obj):,}"
        if not share:
            return head
        items = list(obj.items())[:10] if isinstance(obj, dict) else list(obj)[:10]
        shown = [f"  {_repr.repr(k)}: {_repr.repr(v)}" if isinstance(obj, dict) else f"  {_repr.repr(v)}"
                 for k, v in (items if isinstance(obj, dict) else enumerate(items))]
        return "\n".join([head + (", first items:" if shown else ""), *shown])
    head = f"{type(obj).__module__}.{type(obj).__qualname__}"
    return head + (f": {_repr.repr(obj)}" if share else "")


def inspect_variable(nb: Notebook, name: str, share: bool = True) -> str:
    ns = nb.namespace()
    if is_secret(name):
        raise ToolError(f"'{name}' looks like a secret; Lily does not show it to the model")
    if name not in ns:
        raise ToolError(f"no variable named '{name}' in the notebook (see list_variables)")
    value = ns[name]
    done, text = bounded.call(lambda: _describe(value, share), INSPECT_SECONDS)
    if not done:
        return f"{name}: {type(value).__name__} — too slow to show (over {INSPECT_SECONDS:g} s)"
    if isinstance(text, BaseException):
        return f"{name}: {type(value).__name__} — could not be summarised ({type(text).__name__})"
    return clip(f"{name}: {text}" + ("" if share else f"\n{NOT_SHARED}"), INSPECT_CHARS)


# -- cells and errors -----------------------------------------------------------------------

def read_cells(nb: Notebook, last: int = 5, share: bool = True) -> str:
    if last < 1:
        raise ToolError("last must be at least 1")
    cells = nb.cells(min(last, CELLS_MAX))
    if not cells:
        return "No cells have run yet in this notebook."
    out = []
    for cell in cells:
        out.append(f"--- cell [{cell.count}] ---\n{clip(cell.source.rstrip(), CELL_SOURCE_CHARS)}")
        if cell.output.strip():
            out.append("--- output ---\n" + (clip(plain(cell.output).rstrip(), CELL_OUTPUT_CHARS)
                                           if share else NOT_SHARED))
    note = f" (at most {CELLS_MAX})" if last > CELLS_MAX else ""
    return f"The last {len(cells)} executed cell(s){note}, oldest first:\n" + "\n".join(out)


def format_error(err: ErrorInfo, share: bool = True) -> str:
    where = f"cell [{err.count}]" if err.count is not None else "run_python code"
    out = [f"The last failed cell: {where}", "--- source ---", clip(err.source.rstrip(), CELL_SOURCE_CHARS)]
    if share:
        out += [f"--- error ---\n{err.ename}: {clip(plain(err.evalue), 1_000)}",
                "--- traceback ---", clip(plain(err.traceback).rstrip(), ERROR_CHARS, tail=True)]
    else:
        out += [f"--- error ---\n{err.ename}", NOT_SHARED]
    return "\n".join(out)


def last_error(nb: Notebook, share: bool = True) -> str:
    err = nb.last_error()
    if err is None:
        return "No cell has failed in this notebook session."
    return format_error(err, share)


# -- acting ---------------------------------------------------------------------------------

def propose_cell(nb: Notebook, code: str) -> str:
    if not code.strip():
        raise ToolError("code is empty")
    nb.propose(code)
    return ("Proposed as a new cell below the current one; nothing ran. The user reads, edits "
            "and runs it.")


def run_python(nb: Notebook, code: str, share: bool = True) -> Shown:
    """Run ``code`` like a cell: the model's text, and the output for the face to show."""
    if not code.strip():
        raise ToolError("code is empty")
    result = nb.run(code)
    if not share:
        return Shown("The code ran" + (f" and raised {result.error.ename}." if result.error
                                       else " without an error.") + f" {NOT_SHARED}",
                     result.display)
    text = clip(plain(result.output).rstrip(), RUN_OUTPUT_CHARS, tail=True)
    status = (f"The code ran and raised {result.error.ename}: {plain(result.error.evalue)[:500]}"
              if result.error else "The code ran without an error.")
    return Shown(f"{status}\n--- output ---\n{text}" if text else f"{status} It printed nothing.",
                 result.display)


# -- registration ---------------------------------------------------------------------------

READ_ONLY = {"readOnlyHint": True}
NAMES = ("list_variables", "inspect_variable", "read_cells", "last_error", "propose_cell",
         "run_python")


def register(registry: ToolRegistry, nb: Notebook, share_values: Callable[[], bool]) -> None:
    """Add the six notebook tools, bound to ``nb``; ``share_values()`` is read at each call."""

    @registry.register(name="list_variables", origin="notebook", annotations=READ_ONLY)
    def _list_variables(include_callables: bool = False) -> str:
        """List the user's notebook variables: name, type and a one-line shape (e.g. DataFrame
        1,000×12). Leaves out private names, modules, and functions/classes unless
        include_callables; names that look like secrets are counted, never shown."""
        return list_variables(nb, include_callables)

    @registry.register(name="inspect_variable", origin="notebook", annotations=READ_ONLY)
    def _inspect_variable(name: str) -> str:
        """A bounded summary of one notebook variable: for a DataFrame its columns, dtypes,
        nulls and head(); for an array its shape, dtype and min/max/mean; for containers and
        strings their length and first items."""
        return inspect_variable(nb, name, share_values())

    @registry.register(name="read_cells", origin="notebook", annotations=READ_ONLY)
    def _read_cells(last: int = 5) -> str:
        """The sources and text outputs of the last executed notebook cells (oldest first)."""
        return read_cells(nb, last, share_values())

    @registry.register(name="last_error", origin="notebook", annotations=READ_ONLY)
    def _last_error() -> str:
        """The last failed notebook cell: its source, the exception and the traceback."""
        return last_error(nb, share_values())

    @registry.register(name="propose_cell", origin="notebook",
                       annotations={"readOnlyHint": False, "destructiveHint": False})
    def _propose_cell(code: str) -> str:
        """Put Python code into a new cell below the current one, for the user to read, edit
        and run. Nothing runs."""
        return propose_cell(nb, code)

    @registry.register(name="run_python", origin="notebook", ask=True,
                       annotations={"readOnlyHint": False, "destructiveHint": True,
                                    "openWorldHint": True})
    def _run_python(code: str) -> Shown:
        """Run Python code in the notebook's namespace, like a cell. The user sees the code on
        a confirmation card first; it runs only if they confirm. Returns its output."""
        return run_python(nb, code, share_values())
