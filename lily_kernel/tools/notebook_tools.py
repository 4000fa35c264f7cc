"""The notebook tools: what the agent may see of the notebook, and how it proposes code.

``list_variables``, ``inspect_variable``, ``read_cells``, ``last_error``,
``propose_cell`` and ``run_python`` are registered by the Jupyter faces (the
kernel and ``%load_ext lily``) and by ``lily acp`` when a Jupyter server started it
(:func:`register_answer`: :func:`answer` runs inside the notebook's kernel there,
acp/kernel_probe.py), never by the CLI, through the ordinary
:class:`ToolRegistry`, so the tool policy (allow/deny) applies as to any tool and
``run_python`` waits behind the confirmation card (``[tools] confirm``). This
module needs no Jupyter: a :class:`Notebook` (the face) supplies the namespace,
the cell history, the last error and the two actions. Registering is O(1);
nothing walks the namespace until the model calls a tool. Contracts:
docs/notebook-tools.md.
"""
from __future__ import annotations

import collections
import itertools
import re
import sys
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lily_kernel.errors import ToolError
from lily_kernel.redaction import SECRET_NAME
from lily_kernel.tools import bounded, images
from lily_kernel.tools.tool_registry import NOTEBOOK_TOOLS, Shown, ToolRegistry

LIST_SHOWN = 200            # variables named by one list_variables answer
LIST_CHARS = 8_000          # characters of one list_variables answer
INSPECT_CHARS = 4_000       # characters of one inspect_variable answer
INSPECT_SECONDS = 1.0       # time one inspect_variable may take (a slow __repr__ ends here)
CELLS_MAX = 20              # read_cells(last=...) at most
CELL_SOURCE_CHARS = 2_000   # characters of one cell's source
CELL_OUTPUT_CHARS = 1_500   # characters of one cell's output
CELL_LOOKBACK = 200         # cells an @In[n] mention looks back through
ERROR_CHARS = 4_000         # characters of last_error's traceback
RUN_OUTPUT_CHARS = 6_000    # characters of run_python's output given to the model
COLUMNS_LISTED = 12  # a DataFrame's column names list_variables shows (str labels only)
NO_FAILURE = "No cell has failed in this notebook session."  # last_error, before the last cell
STATS = ("min", "max", "mean", "sum")  # a numeric column's figures (inspect_variable)
STATS_MAX_ELEMENTS = 10_000_000  # ndarray min/max/mean only below this size (C loops ignore the bound)

IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "_", "__", "___",
                           "_oh", "_ih", "_dh", "_i", "_ii", "_iii"})
SECRET_RE = SECRET_NAME  # one rule for secret-looking names (redaction.py)
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CALLABLE_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                   types.BuiltinMethodType, type)
_SIZED = (list, tuple, dict, set, frozenset, str, bytes, bytearray, range)
NOT_SHARED = "(values are not shared: [notebook] share_values = false)"


@dataclass(frozen=True)
class Cell:
    """One executed cell: its execution count, source and text output."""
    count: int
    source: str
    output: str  # the cell's text output (streams, results, errors), plain
    figures: int = 0  # the figures it drew (their descriptions are in ``output``)
    images: tuple[str, ...] = ()  # its PNG/JPEG outputs, kept by hash (tools/images.py)


@dataclass(frozen=True)
class ErrorInfo:
    """The last failed cell (or run_python code): where, what and the traceback."""
    count: int | None
    source: str
    ename: str
    evalue: str
    traceback: str  # plain text
    hint: str = ""  # what the code meant, when Lily can tell (a column the frame lacks)


@dataclass(frozen=True)
class RunResult:
    """What run_python's code printed and showed, and its error if it failed."""
    output: str  # what the code printed and showed, as text
    error: ErrorInfo | None = None
    display: object | None = None  # the face's own record of it, shown where the user decided


class Notebook(Protocol):
    """What a Jupyter face gives the notebook tools."""

    def namespace(self) -> Mapping[str, Any]:
        """The user's names -> their values."""
        ...

    def hidden(self) -> Mapping[str, Any]:
        """The shell's own names -> their values."""
        ...

    def cells(self, last: int) -> list[Cell]:
        """The last ``last`` cells executed before the current request."""
        ...

    def last_error(self) -> ErrorInfo | None:
        """The last failed cell, if any."""
        ...

    def propose(self, code: str) -> bool:
        """Offer ``code`` as the next cell; False: no cell runs to take it (the face shows it)."""
        ...

    def run(self, code: str) -> RunResult:
        """Run ``code`` in the user's namespace (after the user's approval)."""
        ...


def is_secret(name: str) -> bool:
    """Whether a variable's name looks like it holds a secret (its value is never shared)."""
    return SECRET_RE.search(name) is not None


def clip(text: str, limit: int, tail: bool = False) -> str:
    """``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f"[… {len(text) - limit:,} characters cut …]"
    return (note + "\n" + text[-limit:]) if tail else (text[:limit] + "\n" + note)


def plain(text: str) -> str:
    """``text`` without ANSI escape sequences."""
    return ANSI_RE.sub("", text)


# -- shapes: one line, no user code run ----------------------------------------------------
#
# Only ``type()`` of a user object is looked at, and only types that are exactly a built-in,
# NumPy or pandas type are asked anything more: an ``isinstance`` could call a user
# ``__class__``, a ``len`` a user ``__len__`` (docs/notebook-tools.md#bounds).

_BUILTIN_TYPES = frozenset({str, bytes, bytearray, int, float, complex, bool, type(None),
                            list, tuple, dict, set, frozenset, range})


def _type_attr(t: type, attr: str) -> str:
    """``t.__name__``/``__qualname__``/``__module__`` read from ``type``'s own slots, never
    through a metaclass of the user's."""
    try:
        value = type.__dict__[attr].__get__(t, type)
    except Exception:
        return "?"
    return value if type(value) is str else "?"


_TYPE_NAME = type.__dict__["__name__"]


def type_name(obj: Any) -> str:
    """The name of ``obj``'s type, without running any of the user's code."""
    t = type(obj)
    if t in _BUILTIN_TYPES:
        return t.__name__
    try:
        value = _TYPE_NAME.__get__(t, type)
    except Exception:
        return "?"
    return value if type(value) is str else "?"


#: What ``share_values = false`` says of a type it does not name.
OWN_CLASS = "a class of the notebook's own (its name is not shared)"


def shared_type_name(t: type) -> str:
    """``t``'s name as the model may read it when values are not shared: a type's name can
    carry data (``type(secret, (), {})``), so only a built-in type, or the very object a
    loaded module publishes under that name (checked by identity), is named; any other is
    :data:`OWN_CLASS` (docs/notebook-tools.md#privacy-share_values)."""
    if t in _BUILTIN_TYPES:
        return t.__name__
    module, name = _type_attr(t, "__module__"), _type_attr(t, "__qualname__")
    mod = sys.modules.get(module) if module != "__main__" else None
    published = getattr(mod, "__dict__", None)
    if type(published) is dict and published.get(name) is t:
        return name
    return OWN_CLASS


def shared_error_name(ename: str) -> str:
    """An exception's class name as the model may read it when values are not shared: a
    built-in exception's (``KeyError``), else :data:`OWN_CLASS`."""
    import builtins
    found = builtins.__dict__.get(ename)
    return ename if isinstance(found, type) and issubclass(found, BaseException) else OWN_CLASS


def _classes() -> tuple[Any, Any, Any]:
    """Pandas' DataFrame and Series and NumPy's ndarray, when they are imported (or None)."""
    pd, np = sys.modules.get("pandas"), sys.modules.get("numpy")
    return (pd.__dict__.get("DataFrame") if pd is not None else None,
            pd.__dict__.get("Series") if pd is not None else None,
            np.__dict__.get("ndarray") if np is not None else None)


def _exact(obj: Any, module: str, name: str) -> bool:
    """Is ``obj`` exactly of type ``module.name`` (not a subclass), without importing it?"""
    mod = sys.modules.get(module)
    cls = mod.__dict__.get(name) if mod is not None else None
    return cls is not None and type(obj) is cls


def _library_type(t: type) -> bool:
    """A built-in type, or one of NumPy's or pandas' own (checked by identity, not name)."""
    if t in _BUILTIN_TYPES:
        return True
    name = _type_attr(t, "__name__")
    for module in ("numpy", "pandas"):
        mod = sys.modules.get(module)
        if mod is not None and mod.__dict__.get(name) is t:
            return True
    return False


def shape(obj: Any, classes: tuple[Any, Any, Any] | None = None, columns: bool = False) -> str:
    """``DataFrame 1,000×12``, ``ndarray float64 (3, 224, 224)``, ``list[37]``, ``str[1,204]``.
    ``classes``: :func:`_classes`, when the caller asks for many; ``columns`` (values may be
    shared): a DataFrame's first column names too (``DataFrame 7×3 [x, y, label]``); without
    it a class of the notebook's own is not named (:func:`shared_type_name`)."""
    t = type(obj)
    if t in _SIZED:
        return f"{t.__name__}[{len(obj):,}]"
    frame, series, ndarray = classes or _classes()
    if t is frame and t is not None:
        rows, cols = obj.shape
        names = [c for c in list(obj.columns[:COLUMNS_LISTED]) if type(c) is str] \
            if columns else []
        more = ", …" if names and cols > len(names) else ""
        return f"DataFrame {rows:,}×{cols:,}" + (f" [{', '.join(names)}{more}]" if names else "")
    if t is series and t is not None:
        return f"Series {obj.dtype} [{len(obj):,}]"
    if t is ndarray and t is not None:
        return f"ndarray {obj.dtype} {tuple(obj.shape)}"
    return type_name(obj) if columns else shared_type_name(t)


def _listed(name: Any, value: Any, hidden: Mapping[str, Any], include_callables: bool) -> bool:
    if type(name) is not str or name.startswith("_") or name in IPYTHON_NAMES:
        return False
    if name in hidden and hidden[name] is value:
        return False
    if issubclass(type(value), types.ModuleType):
        return False
    return include_callables or not issubclass(type(value), _CALLABLE_TYPES)


def variable_names(nb: Notebook) -> list[str]:
    """The names ``list_variables`` would show (no callables, no secret-looking names), for
    completing a skill's variable argument; runs no user code."""
    hidden = nb.hidden()
    return [name for name, value in list(nb.namespace().items())
            if _listed(name, value, hidden, False) and not is_secret(name)]


def list_variables(nb: Notebook, include_callables: bool = False, share: bool = True) -> str:
    """The list_variables tool: the user's variables with their types and shapes (and, when
    values may be shared, a DataFrame's column names)."""
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
    classes = _classes()
    for name in shown[older:]:  # the most recently defined ones
        try:
            lines.append(f"{name}: {shape(ns[name], classes, share)}")
        except Exception:
            lines.append(f"{name}: {_named(ns.get(name), share)}")
    head = (f"{len(shown)} variable{'s' if len(shown) != 1 else ''}"
            + (f" ({older:,} older ones not listed; inspect_variable takes any name)" if older else "")
            + (f"; {secret} hidden (their names look like secrets)" if secret else "")
            + ("" if include_callables else "; functions and classes left out"))
    return clip("\n".join([head + ":" if lines else head, *lines]), LIST_CHARS)


# -- inspect ------------------------------------------------------------------------------
#
# inspect_variable runs no code the user defined: values are shown only when their type is
# exactly a built-in, NumPy or pandas one (:func:`safe_repr`); an object of the user's own
# class shows its type and the plain attributes of its instance dict, read statically. A
# thread cannot be killed and a user ``__repr__`` can swallow every exception sent to stop
# it, so not calling it is the only bound that always holds; the time bound
# (:mod:`bounded`) stays for the library code that does run (a huge ``to_string``).

MAX_INT_BITS = 1024  # a larger int is shown by its size (its decimal form could take long)
REPR_ITEMS = 10
REPR_CHARS = 200


def safe_repr(value: Any, level: int = 3) -> str:
    """A short repr of ``value`` that runs none of the user's code."""
    t = type(value)
    if t in (str, bytes, bytearray):
        text = repr(value[:REPR_CHARS])
        return text + ("…" if len(value) > REPR_CHARS else "")
    if t is int and value.bit_length() > MAX_INT_BITS:
        return f"<int of {value.bit_length():,} bits>"
    if t in (int, float, complex, bool, type(None), range):
        return repr(value)
    if t in (list, tuple, set, frozenset, dict):
        if level <= 0:
            return "[…]" if t is list else "(…)" if t is tuple else "{…}"
        if t is dict:
            items = [f"{safe_repr(k, level - 1)}: {safe_repr(v, level - 1)}"
                     for k, v in itertools.islice(dict.items(value), REPR_ITEMS)]
        else:
            items = [safe_repr(v, level - 1) for v in itertools.islice(value, REPR_ITEMS)]
        more = ", …" if len(value) > REPR_ITEMS else ""
        inner = ", ".join(items) + more
        if t is list:
            return f"[{inner}]"
        if t is tuple:
            return f"({inner}{',' if len(value) == 1 else ''})"
        if t is dict:
            return "{" + inner + "}"
        name = _type_attr(t, "__name__")
        return f"{name}({{{inner}}})" if value else f"{name}()"
    if _library_type(t):  # a NumPy or pandas scalar (C or library code)
        text = repr(value)
        return text[:REPR_CHARS] + ("…" if len(text) > REPR_CHARS else "")
    return f"<{_type_attr(t, '__module__')}.{_type_attr(t, '__qualname__')} object>"


def _object_dtype(dtype: Any) -> bool:
    """A NumPy ``object`` dtype: its values can be anything, the notebook's own objects
    too (pandas' string and other extension dtypes hold library values)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(dtype, np.dtype) and dtype.kind == "O"


def _plain_column(values: Any) -> bool:
    """Whether an object column's values are all of library types (so pandas formats them
    without calling the user's code)."""
    return all(_library_type(type(v)) for v in values)


def _named(obj: Any, share: bool) -> str:
    return type_name(obj) if share else shared_type_name(type(obj))


def _describe(obj: Any, share: bool) -> str:
    kind = _named(obj, share)
    if _exact(obj, "pandas", "DataFrame") and not share:  # labels are keys of the value
        rows, cols = obj.shape
        kinds = collections.Counter(str(t) for t in obj.dtypes.tolist())
        return (f"DataFrame {rows:,} rows × {cols:,} columns; dtypes: "
                + ", ".join(f"{t} ×{n}" for t, n in kinds.most_common()))
    if _exact(obj, "pandas", "DataFrame"):
        rows, cols = obj.shape
        out = [f"DataFrame {rows:,} rows × {cols:,} columns", "columns (dtype):"]
        out += [f"  {c if type(c) is str else safe_repr(c)}: {t}"
                for c, t in list(obj.dtypes.items())[:50]]
        if cols > 50:
            out.append(f"  … {cols - 50} more columns")
        if share and not all(_library_type(type(c)) for c in obj.columns):
            out.append("values: not shown (a column label is an object of the notebook's "
                       "own classes; Lily runs none of their code)")
        elif share:
            head = obj.head(5)
            plain_objects = all(_plain_column(head[c].to_numpy()) for c, t in obj.dtypes.items()
                                if _object_dtype(t))
            typed = [c for c, t in list(obj.dtypes.items())[:50] if not _object_dtype(t)]
            nulls = obj[typed].isna().sum() if typed else {}
            out.append("nulls per column: " + (", ".join(
                f"{c if type(c) is str else safe_repr(c)}={int(n)}" for c, n in nulls.items())
                or "(object columns are not counted)"))
            out += _column_stats(obj, typed)
            if plain_objects:
                out += ["head():", head.to_string(max_cols=20, max_colwidth=40)]
            else:
                out.append("head(): not shown (a column holds objects of the notebook's own "
                           "classes; Lily runs none of their code)")
        return "\n".join(out)
    if _exact(obj, "pandas", "Series"):
        name = obj.name if type(obj.name) is str else safe_repr(obj.name)
        out = [f"Series {name if share else '(its name is not shared)'}: {len(obj):,} values, "
               f"dtype {obj.dtype}"]
        if share:
            head = obj.head(5)
            if not _object_dtype(obj.dtype):
                out.append(f"nulls: {int(obj.isna().sum())}")
            if obj.dtype.kind in "iuf" and 0 < len(obj) <= STATS_MAX_ELEMENTS:
                out.append(_stats_text(obj.agg(list(STATS))))
            if not _object_dtype(obj.dtype) or _plain_column(head.to_numpy()):
                out += ["head():", head.to_string(max_rows=5)]
        return "\n".join(out)
    if _exact(obj, "numpy", "ndarray"):
        out = [f"ndarray shape {tuple(obj.shape)}, dtype {obj.dtype}, {obj.size:,} elements"]
        if share and obj.size and obj.dtype.kind in "biuf":
            if obj.size <= STATS_MAX_ELEMENTS:
                out.append(f"min {obj.min()!s}, max {obj.max()!s}, mean {obj.mean()!s}")
            else:
                out.append(f"(min/max/mean skipped above {STATS_MAX_ELEMENTS:,} elements)")
        return "\n".join(out)
    t = type(obj)
    if t in (str, bytes, bytearray):
        head = f"{kind} of length {len(obj):,}"
        return head + (f"; starts: {safe_repr(obj[:300])}" if share else "")
    if t in (list, tuple, set, frozenset, dict):
        head = f"{kind} of length {len(obj):,}"
        if not share:
            return head
        if t is dict:
            shown = [f"  {safe_repr(k)}: {safe_repr(v)}"
                     for k, v in itertools.islice(dict.items(obj), REPR_ITEMS)]
        else:
            shown = [f"  {safe_repr(v)}" for v in itertools.islice(obj, REPR_ITEMS)]
        return "\n".join([head + (", first items:" if shown else ""), *shown])
    if not share:
        return kind
    head = f"{_type_attr(t, '__module__')}.{_type_attr(t, '__qualname__')}"
    if _library_type(t):
        return f"{head}: {safe_repr(obj)}"
    # The user's own class: its plain attributes, read without calling anything of its own.
    attrs = _instance_dict(obj)
    if type(attrs) is not dict or not attrs:
        return f"{head} (its repr is not run: Lily runs no code of the notebook's own classes)"
    fields = [f"  {k}: {safe_repr(v)}" for k, v in itertools.islice(attrs.items(), REPR_ITEMS)
              if type(k) is str]
    return "\n".join([f"{head}, attributes (its repr is not run):", *fields])


def _column_stats(frame: Any, typed: list[Any]) -> list[str]:
    """Each numeric column's min, max, mean and sum (a question about a frame is most often
    one of these); none above :data:`STATS_MAX_ELEMENTS` values."""
    numeric = [c for c in typed if frame[c].dtype.kind in "iuf"][:20]
    if not numeric or frame.shape[0] * len(numeric) > STATS_MAX_ELEMENTS:
        return []
    stats = frame[numeric].agg(list(STATS))
    return ["numeric columns:", *(
        f"  {c if type(c) is str else safe_repr(c)}: {_stats_text(stats[c])}" for c in numeric)]


def _stats_text(values: Any) -> str:
    """``min 10, max 70, mean 40, sum 280``: each figure named (a small model read the bare
    ``10, 70, 40, 280`` under a header wrongly)."""
    return ", ".join(f"{k} {float(values[k]):.6g}" for k in STATS)


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """``obj``'s instance ``__dict__`` through the interpreter's own slot descriptor, found
    in its class's MRO without any attribute lookup of the user's; None when the class
    defines ``__dict__`` itself (a property could run code) or has none."""
    try:
        for klass in type.__dict__["__mro__"].__get__(type(obj), type):
            slot = type.__dict__["__dict__"].__get__(klass, type).get("__dict__")
            if slot is None:
                continue
            if type(slot) is not types.GetSetDescriptorType:
                return None
            value = slot.__get__(obj, type(obj))
            return value if type(value) is dict else None
    except Exception:
        return None
    return None


def refusal(nb: Notebook, name: str) -> str | None:
    """Why inspect_variable will not show ``name`` (list_variables' rules), or None."""
    if name in IPYTHON_NAMES or name.startswith("_"):
        return (f"'{name}' is one of IPython's own names or a private one (In, Out, _, __, "
                f"___, _N, _oh, _ih, _dh, exit, quit, get_ipython and names starting with "
                f"'_' are not shown, as in list_variables)")
    if is_secret(name):
        return f"'{name}' looks like a secret; Lily does not show it to the model"
    hidden = nb.hidden()
    ns = nb.namespace()
    if name in hidden and name in ns and hidden[name] is ns[name]:
        return f"'{name}' is one of the shell's own names, not a variable of yours"
    return None


#: A folder's entries, (name, is_folder), within the workspace's boundary (a session's
#: ``files.list``): how the notebook tools tell a file's name from a variable's.
ListDir = Callable[[str], list[tuple[str, bool]]]
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,8}$")


def _workspace_file(list_dir: ListDir | None, name: str) -> str | None:
    """The workspace file ``name`` means, or None: a name with a slash or a suffix that is
    a file there (``notes.txt``, ``data/cities.csv``), or a bare name that is the stem of
    exactly one file at the workspace's top (``cities`` for ``cities.csv``)."""
    if list_dir is None:
        return None
    path = name.strip().removeprefix("./")
    try:
        if "/" in path or _SUFFIX.search(path):
            folder, _, leaf = path.rpartition("/")
            return path if (leaf, False) in list_dir(folder or ".") else None
        if not path.isidentifier():
            return None
        stems = [n for n, folder in list_dir(".") if not folder and n.rsplit(".", 1)[0] == path
                 and "." in n]
    except (ToolError, OSError):
        return None
    return stems[0] if len(stems) == 1 else None


def _not_a_variable(nb: Notebook, name: str, ns: Mapping[str, Any],
                    list_dir: ListDir | None = None) -> str:
    """Why ``name`` is not shown, and the call that would work: an expression such as
    ``df['y']`` or ``df.y`` names the variable it starts with, a workspace file's name the
    ``read`` tool (docs/agent.md#loop-hygiene)."""
    file = _workspace_file(list_dir, name)
    if file is not None:
        what = "is a file" if file == name.strip() else f"is not a variable; {file} is a file"
        return (f"'{name}' {what} in the workspace, not a notebook variable: read it with "
                f'read(path="{file}")')
    head = re.match(r"\s*([A-Za-z_]\w*)", name)
    if head and head.group(1) != name and head.group(1) in ns \
            and refusal(nb, head.group(1)) is None:
        var = head.group(1)
        return (f"'{name}' is an expression, not a variable name: inspect_variable takes one "
                f"variable's name and shows its parts (a DataFrame's columns, a dict's keys); "
                f'call inspect_variable(name="{var}")')
    return (f"no variable named '{name}' in the notebook (see list_variables); "
            'inspect_variable takes a variable\'s name, e.g. inspect_variable(name="df")')


def inspect_variable(nb: Notebook, name: str, share: bool = True,
                     list_dir: ListDir | None = None) -> str:
    """The inspect_variable tool: one variable's type, size and a bounded preview."""
    if not isinstance(name, str):
        raise ToolError("name must be a string")
    reason = refusal(nb, name)
    if reason:
        raise ToolError(reason)
    ns = nb.namespace()
    label = name
    if name not in ns:
        column = _column_of(nb, name, ns)
        if column is None:
            raise ToolError(_not_a_variable(nb, name, ns, list_dir))
        frame, key = column
        label = f"{frame}[{key!r}]"
        value = ns[frame][key]
        lead = f"'{name}' is not a variable; it is column {key!r} of the DataFrame {frame}.\n"
    else:
        value, lead = ns[name], ""
    done, text = bounded.call(lambda: _describe(value, share), INSPECT_SECONDS)
    if not done:
        return f"{lead}{label}: {_named(value, share)} (… timed out: over {INSPECT_SECONDS:g} s)"
    if isinstance(text, BaseException):
        return (f"{lead}{label}: {_named(value, share)} — could not be summarised "
                f"({_named(text, share)})")
    return clip(f"{lead}{label}: {text}" + ("" if share else f"\n{NOT_SHARED}"), INSPECT_CHARS)


_COLUMN = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\[\s*(['\"])(.+?)\2\s*\]|\.([A-Za-z_]\w*))\s*")


def _column_of(nb: Notebook, name: str, ns: Mapping[str, Any]) -> tuple[str, str] | None:
    """The DataFrame column ``name`` means, as (variable, column), or None: ``df['y']``,
    ``df["y"]`` or ``df.y`` of a DataFrame variable, or a bare ``y`` that is a column of
    exactly one DataFrame variable (a small model asked for "the mean of column y in df"
    calls ``inspect_variable("y")``). Only frames whose column labels are all library
    values are looked in, so no code of the notebook's own runs (docs/agent.md#loop-hygiene)."""
    found = _COLUMN.fullmatch(name)
    if found:
        key = found.group(3) or found.group(4)
        frames = [found.group(1)] if found.group(1) in ns and \
            refusal(nb, found.group(1)) is None else []
    elif name.isidentifier():
        key, frames = name, variable_names(nb)
    else:
        return None
    hits = [v for v in frames if _exact(ns.get(v), "pandas", "DataFrame")
            and all(_library_type(type(c)) for c in ns[v].columns) and key in ns[v].columns]
    return (hits[0], key) if len(hits) == 1 else None


# -- cells and errors -----------------------------------------------------------------------

def read_cells(nb: Notebook, last: int = 5, share: bool = True) -> str:
    """The read_cells tool: the last ``last`` executed cells, sources and outputs."""
    if last < 1:
        raise ToolError("last must be at least 1")
    cells = nb.cells(min(last, CELLS_MAX))
    if not cells:
        return "No cells have run yet in this notebook."
    out = [_cell_text(cell, share) for cell in cells]
    note = f" (at most {CELLS_MAX})" if last > CELLS_MAX else ""
    return f"The last {len(cells)} executed cell(s){note}, oldest first:\n" + "\n".join(out)


def read_cell(nb: Notebook, number: int, share: bool = True) -> str:
    """One cell, for an ``@In[3]`` / ``@cell[-1]`` mention (tools/mentions.py): ``number``
    is its execution count, or counted back from the last cell when 0 or below."""
    cells = nb.cells(CELL_LOOKBACK)
    if number <= 0:
        cell = cells[number - 1] if -number < len(cells) else None
    else:
        cell = next((c for c in cells if c.count == number), None)
    if cell is None:
        raise ToolError(f"no cell {'In[' + str(number) + ']' if number > 0 else f'cell[{number}]'} "
                        f"among the last {CELL_LOOKBACK} executed cells")
    return _cell_text(cell, share)


def read_figure(nb: Notebook, share: bool = True) -> str:
    """The last cell that drew a figure, for an ``@figure`` mention (tools/mentions.py):
    its source and output, where the figure's description is; its image for a model with
    vision."""
    cell = next((c for c in reversed(nb.cells(CELL_LOOKBACK)) if c.figures or c.images), None)
    if cell is None:
        raise ToolError(f"no figure among the last {CELL_LOOKBACK} executed cells")
    return _cell_text(cell, share)


def _cell_text(cell: Cell, share: bool) -> str:
    """One cell as the model reads it; its images are offered too (tools/images.py), unless
    values are not shared."""
    text = f"--- cell [{cell.count}] ---\n{clip(cell.source.rstrip(), CELL_SOURCE_CHARS)}"
    if cell.output.strip():
        text += "\n--- output ---\n" + (clip(plain(cell.output).rstrip(), CELL_OUTPUT_CHARS)
                                        if share else NOT_SHARED)
    if share:
        images.offer_kept(cell.images)
    return text


def format_error(err: ErrorInfo, share: bool = True) -> str:
    """A failed cell as the model reads it: where, the source and the traceback."""
    where = f"cell [{err.count}]" if err.count is not None else "run_python code"
    out = [f"The last failed cell: {where}", "--- source ---", clip(err.source.rstrip(), CELL_SOURCE_CHARS)]
    if share:
        out += [f"--- error ---\n{err.ename}: {clip(plain(err.evalue), 1_000)}",
                "--- traceback ---", clip(plain(err.traceback).rstrip(), ERROR_CHARS, tail=True)]
    else:
        out += [f"--- error ---\n{shared_error_name(err.ename)}", NOT_SHARED]
    return "\n".join(out)


def last_error(nb: Notebook, share: bool = True) -> str:
    """The last_error tool: the last failed cell; when none failed, a line saying so and
    the last cell that ran (a small model asked "what did my last cell compute?" calls
    last_error, and then answers from that cell)."""
    err = nb.last_error()
    if err is not None:
        return format_error(err, share)
    cells = nb.cells(1)
    if not cells:
        return f"{NO_FAILURE} No cell has run yet."
    return f"{NO_FAILURE} The last cell that ran:\n{_cell_text(cells[-1], share)}"


# -- acting ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProposedCell:
    """A cell proposed while no cell ran (after a card's button): the face shows it."""

    code: str


def propose_cell(nb: Notebook, code: str) -> Shown:
    """Put ``code`` in a new cell for the user; returned for the face when no cell takes it."""
    if not code.strip():
        raise ToolError("code is empty")
    delivered = nb.propose(code)
    return Shown("Proposed as a new cell below the current one; nothing ran. The user reads, "
                 "edits and runs it.", None if delivered else ProposedCell(code))


class SandboxNotebook(Notebook, Protocol):
    """A face that can also run code in the sandbox (tools/sandbox.py, docs/sandbox.md)."""

    def run_sandboxed(self, code: str, replay: Sequence[str] = ()) -> RunResult:
        """Run ``code`` against a copy of the user's namespace, confined: nothing changes.
        ``replay``: code run first, silently (the request's earlier runs)."""
        ...


def run_python(nb: Notebook, code: str, share: bool = True, sandboxed: bool = False,
               replay: Sequence[str] = ()) -> Shown:
    """Run ``code`` like a cell: the model's text, and the output for the face to show;
    ``sandboxed``: in the sandbox (the face's ``run_sandboxed``), never in the notebook,
    after ``replay`` (the request's earlier sandboxed runs) ran there silently.
    Code that raised is told by :func:`raised`."""
    if not code.strip():
        raise ToolError("code is empty")
    if sandboxed:
        runner = getattr(nb, "run_sandboxed", None)
        if runner is None:
            raise ToolError("this notebook cannot run code in the sandbox")
        result: RunResult = runner(code, replay=tuple(replay)) if replay else runner(code)
    else:
        result = nb.run(code)
    ran = ("The code ran in the sandbox (nothing it changed reaches the notebook; it may "
           "write files only under $TMPDIR)" if sandboxed else "The code ran")
    if not share:
        return Shown(ran + (f" and raised {shared_error_name(result.error.ename)}."
                            if result.error
                                       else " without an error.") + f" {NOT_SHARED}",
                     result.display)
    text = clip(plain(result.output).rstrip(), RUN_OUTPUT_CHARS, tail=True)
    status = (raised(result.error, code, " in the sandbox" if sandboxed else "")
              if result.error else f"{ran} without an error.")
    return Shown(f"{status}\n--- output ---\n{text}" if text else f"{status} It printed nothing.",
                 result.display)


PROPOSED_NOTE = ("(The code is proposed as a cell below the request, not run there; the user "
                 "runs it to change the notebook.)")


#: How run_python's result starts when the code raised, wherever it ran ("The code ran in
#: the sandbox and raised …"); agent/small_steps.py counts them.
RAISED = re.compile(r"The code ran(?: in [\w ]{1,40})? and raised ")
# a frame of the code itself (``in <module>``, or a SyntaxError's), and the source it quotes
_CODE_FRAME = re.compile(r'^\s*File "[^"]*", line (\d+)(?:, in <module>)?$(?:\n {4}(\S.*)$)?',
                         re.M)


def raised(error: ErrorInfo, code: str = "", where: str = "") -> str:
    """What run_python tells the model of code that raised: the exception's last line, the
    line of the code that raised (the traceback's last frame of that code: the source line
    it quotes, else line N of ``code``), and that it may call run_python again with
    corrected code; then the error's hint (a column the frame lacks, and those it has).
    ``where``: " in the sandbox"."""
    what = f"{error.ename}: {plain(error.evalue)[:500]}" if error.evalue else error.ename
    frames = _CODE_FRAME.findall(plain(error.traceback))
    number, quoted = (int(frames[-1][0]), frames[-1][1].strip()) if frames else (0, "")
    lines = code.splitlines()
    if not quoted and 0 < number <= len(lines):
        quoted = lines[number - 1].strip()
    line = f"\nThe line that raised (line {number}): {quoted[:300]}" if quoted else ""
    hint = f"\n{plain(str(error.hint))[:1_000]}" if error.hint else ""
    return (f"The code ran{where} and raised {what}{line}{hint}\nFix the code and call "
            "run_python again with the corrected code, or answer if this already answers the "
            "request.")


def exec_cell(shell: Any, source: str, filename: str, display: Callable[[Any], Any]) -> None:
    """Run ``source`` (magics already transformed; ``filename``: its file in IPython's
    cache, ``shell.compile.cache(source)``) in ``shell``'s namespace as a cell runs: its
    last expression, when not None, goes to ``display``. Both faces' ``run`` use it (the
    Lily kernel's and, inside a notebook's own kernel, ``lily acp``'s)."""
    import ast
    tree = ast.parse(source)
    tail = tree.body[-1] if tree.body else None
    last = tail if isinstance(tail, ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, filename, "exec"), shell.user_global_ns, shell.user_ns)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), filename, "eval"),
                     shell.user_global_ns, shell.user_ns)
        if value is not None:
            display(value)


# -- registration ---------------------------------------------------------------------------

READ_ONLY = {"readOnlyHint": True}
NAMES = NOTEBOOK_TOOLS
#: The look-ups that find nothing in a notebook without variables or without a failed cell
#: (:func:`has_something`): the small profile offers them only when they could.
LOOK_UPS = frozenset({"list_variables", "inspect_variable", "last_error"})
#: ``run_python`` in the sandbox (docs/sandbox.md): registered owner-only beside it by a face
#: that can sandbox (:class:`SandboxNotebook`), never offered to the model; the gate runs a
#: model's ``run_python`` call through it when its outcome is ``Sandboxed``.
SANDBOXED = "run_python_sandboxed"


def _guarded(tool: str, share: bool, fn: Callable[[], str]) -> str:
    """``fn()``; with share_values = false, a failure names only its type: its message could
    carry a value from the user's objects (docs/notebook-tools.md#privacy-share_values)."""
    if share:
        return fn()
    try:
        return fn()
    except ToolError:
        raise
    except Exception as exc:
        raise ToolError(f"{tool} failed ({shared_type_name(type(exc))}) {NOT_SHARED}") from None


#: What a registered notebook tool calls: ``(tool, args, share)`` -> its result. In a notebook
#: face it is :func:`answer` on the face's :class:`Notebook`; in ``lily acp`` it sends the same
#: call to :func:`answer` inside the notebook's own kernel (acp/kernel_probe.py).
Answer = Callable[[str, Mapping[str, Any], bool], "str | Shown"]


def answer(nb: Notebook, tool: str, args: Mapping[str, Any], share: bool,
           list_dir: ListDir | None = None) -> str | Shown:
    """One notebook tool's result on ``nb``: the same rules and bounds wherever it runs;
    ``list_dir`` (the session's ``files.list``) lets a file's name be told from a variable's.
    :data:`SANDBOXED` is ``run_python`` run in the sandbox (the gate's ``Sandboxed``)."""
    if tool == "list_variables":
        include = bool(args.get("include_callables", False))
        return _guarded(tool, share, lambda: list_variables(nb, include, share))
    if tool == "inspect_variable":
        return _guarded(tool, share, lambda: inspect_variable(nb, args["name"], share,
                                                                list_dir))
    if tool == "read_cells":
        return _guarded(tool, share, lambda: read_cells(nb, int(args.get("last", 5)), share))
    if tool == "last_error":
        return _guarded(tool, share, lambda: last_error(nb, share))
    if tool == "read_cell":
        return _guarded(tool, share, lambda: read_cell(nb, int(args["number"]), share))
    if tool == "read_figure":
        return _guarded(tool, share, lambda: read_figure(nb, share))
    if tool == "propose_cell":
        return propose_cell(nb, args["code"])
    if tool in ("run_python", SANDBOXED):
        replay = args.get("replay") or () if tool == SANDBOXED else ()
        return run_python(nb, args["code"], share, sandboxed=tool == SANDBOXED,
                          replay=[str(c) for c in replay])
    raise ToolError(f"'{tool}' is not a notebook tool")


def has_something(nb: Notebook, tool: str) -> bool:
    """Could a call of look-up ``tool`` find anything in ``nb`` now? ``list_variables`` and
    ``inspect_variable``: a variable it would list (callables included); ``last_error``: a
    failed cell; any other tool: yes. Runs no user code."""
    if tool in ("list_variables", "inspect_variable"):
        hidden = nb.hidden()
        return any(_listed(name, value, hidden, True)
                   for name, value in list(nb.namespace().items()))
    if tool == "last_error":
        return nb.last_error() is not None
    return True


def register(registry: ToolRegistry, nb: Notebook, share_values: Callable[[], bool],
             list_dir: ListDir | None = None) -> None:
    """Add the six notebook tools, bound to ``nb``; ``share_values()`` is read at each call;
    ``list_dir`` (the session's ``files.list``) lets a file's name be told from a variable's.
    Their results and errors pass the live-secret redaction in the agent loop, like every
    tool's (docs/limits-and-secrets.md#secrets)."""
    sandboxed = (SANDBOXED,) if callable(getattr(nb, "run_sandboxed", None)) else ()
    register_answer(registry,
                    lambda tool, args, share: answer(nb, tool, args, share, list_dir),
                    share_values, (*NAMES, "read_cell", "read_figure", *sandboxed),
                    lambda tool: has_something(nb, tool))


def register_answer(registry: ToolRegistry, run: Answer, share_values: Callable[[], bool],
                    names: Collection[str] = (*NAMES, "read_cell", "read_figure"),
                    usable: Callable[[str], bool] | None = None) -> None:
    """Add the notebook tools in ``names``, each answered by ``run`` (:data:`Answer`); with
    :data:`SANDBOXED` among them (the face runs a sandbox), ``run_python``'s sandboxed form
    is that tool, which the gate runs when its outcome is ``Sandboxed`` (tools/gate.py).
    ``usable(tool)``: could the look-up find anything now (:func:`has_something`); without
    it, the look-ups are always offered."""

    def _text(result: str | Shown) -> str:
        return result.text if isinstance(result, Shown) else result

    def _shown(result: str | Shown) -> Shown:
        return result if isinstance(result, Shown) else Shown(result)

    def add(fn: Callable[..., Any], **keywords: Any) -> None:
        name = fn.__name__.lstrip("_")
        if name in names:
            if usable is not None and name in LOOK_UPS:
                keywords["usable"] = lambda: usable(name)
            registry.register(fn, name=name, origin="notebook", **keywords)

    def _list_variables(include_callables: bool = False) -> str:
        """The notebook's variables: name, type, shape.

        Leaves out private names, modules, and functions/classes unless
        include_callables; names that look like secrets are counted, never shown."""
        return _text(run("list_variables", {"include_callables": include_callables},
                         share_values()))

    def _inspect_variable(name: str) -> str:
        """Summarise one notebook variable.

        For a DataFrame its columns, dtypes, nulls, numeric columns' min/max/mean/sum and
        head(); a column's name (``y``, ``df['y']``) shows that column; for an array its
        shape, dtype and min/max/mean; for containers and strings their length and first
        items."""
        return _text(run("inspect_variable", {"name": name}, share_values()))

    def _read_cells(last: int = 5) -> str:
        """What the last cells ran and printed, oldest first."""
        return _text(run("read_cells", {"last": last}, share_values()))

    def _last_error() -> str:
        """The last failed cell: source, exception, traceback."""
        return _text(run("last_error", {}, share_values()))

    def _read_cell(number: int) -> str:
        """One executed cell by its number (0 and below count back from the last)."""
        return _text(run("read_cell", {"number": number}, share_values()))

    def _read_figure() -> str:
        """The last cell that drew a figure: its source and the figure's description."""
        return _text(run("read_figure", {}, share_values()))

    def _propose_cell(code: str) -> Shown:
        """Add a code cell below for the user to run."""
        return _shown(run("propose_cell", {"code": code}, share_values()))

    def _run_python(code: str) -> Shown:
        """Run Python code like a cell: the notebook's variables are live and workspace
        files are read by their names (pd.read_csv('data.csv')); returns its output.

        The user sees the code on a confirmation card first; it runs only if they confirm."""
        return _shown(run("run_python", {"code": code}, share_values()))

    def _run_python_sandboxed(code: str, replay: list[str] | None = None) -> Shown:
        """Run Python code in the sandbox: a confined copy of the kernel that reads the
        notebook's variables and the workspace, and changes nothing; ``replay``, code run
        there first and silently (a request's earlier runs)."""
        args: dict[str, Any] = {"code": code, **({"replay": list(replay)} if replay else {})}
        return _shown(run(SANDBOXED, args, share_values()))

    def _sandboxed_then_proposed(code: str, replay: list[str] | None = None) -> Shown:
        """run_python as the gate's ``Sandboxed`` runs it (tools/gate.py): in the sandbox,
        after the request's earlier sandboxed runs (``replay``, agent/request.py), then the
        code proposed as a cell under the request, never run by itself
        (docs/permissions.md#the-sandbox)."""
        ran = _run_python_sandboxed(code, replay)
        proposed = _shown(run("propose_cell", {"code": code}, share_values()))
        return Shown(f"{ran.text}\n{PROPOSED_NOTE}",
                     proposed.display if proposed.display is not None else ran.display)

    for reader in (_list_variables, _inspect_variable, _read_cells, _last_error):
        add(reader, annotations=READ_ONLY)
    add(_read_cell, annotations=READ_ONLY, owner_only=True)
    add(_read_figure, annotations=READ_ONLY, owner_only=True)
    add(_propose_cell, annotations={"readOnlyHint": False, "destructiveHint": False})
    add(_run_python, ask=True, annotations={"readOnlyHint": False, "destructiveHint": True,
                                            "openWorldHint": True},
        sandboxed=_sandboxed_then_proposed if SANDBOXED in names else None)
    add(_run_python_sandboxed, annotations=READ_ONLY, owner_only=True)
