"""What ``lily acp`` runs inside a notebook's own kernel to answer a notebook tool
(docs/front-ends.md#notebook-tools-through-a-jupyter-server).

This module is never imported there: ``lily acp`` sends its source text, with the source
of ``tools/notebook_tools.py`` and ``tools/bounded.py``, in one silent ``execute_request``
whose ``user_expressions`` entry evaluates :func:`probe` (acp/notebook_server.py). So the
answer is computed where the objects live, by the very functions the Lily kernel uses:
the same rules (private, IPython and secret-looking names refused, no code of the
notebook's own classes run, ``share_values``) and the same bounds. Nothing lands in the
user's namespace nor in the kernel's ``sys.modules``: each call builds the modules in a
private namespace, and their ``lily_kernel`` imports are answered by small stand-ins. A
silent request changes no execution count and no history.

Only :meth:`KernelNotebook.run` (``run_python``, after the user allowed it) runs code in
the user's namespace, as the Lily kernel's does. What this module imports of IPython it
imports in the kernel, inside functions: ``lily acp`` itself imports none of it.
"""
from __future__ import annotations

import builtins
import json
import re
import sys
import traceback
import types
from collections.abc import Mapping
from typing import Any

#: The Lily modules the shipped sources import, each answered here by a stand-in; a test
#: checks that notebook_tools.py and bounded.py import no other module of Lily's.
STAND_INS = ("lily_kernel.errors", "lily_kernel.redaction", "lily_kernel.tools",
             "lily_kernel.tools.bounded", "lily_kernel.tools.images",
             "lily_kernel.tools.tool_registry")
#: The attribute of the shell where the last failed ``run_python`` code is kept (the next
#: call's ``last_error`` reports it, as in the Lily kernel).
RUN_ERROR = "_lily_acp_run_error"


class _Shown:
    """Stands in for tool_registry.Shown (a plain class: a dataclass of a module outside
    ``sys.modules`` cannot be made)."""

    def __init__(self, text: str, display: object | None = None) -> None:
        self.text, self.display = text, display


class _ToolRegistry:
    """Stands in for the registry: the probe never registers a tool."""


def _shim(name: str, **values: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(values)
    return module


def _module(name: str, source: str, importer: Any) -> types.ModuleType:
    """``source`` run as module ``name`` (listed in ``sys.modules`` only while it runs:
    dataclasses look their module up there), its imports through ``importer``."""
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = {**vars(builtins), "__import__": importer}
    sys.modules[name] = module
    try:
        exec(compile(source, f"<lily acp: {name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def load(sources: Mapping[str, str], secret_pattern: str, secret_flags: int,
         notebook_tools: tuple[str, ...]) -> types.ModuleType:
    """``notebook_tools`` built from its source, its Lily imports answered by stand-ins."""

    class ToolError(Exception):
        """A tool's refusal, for the model (lily_kernel.errors.ToolError's stand-in)."""

    shims: dict[str, types.ModuleType] = {
        "lily_kernel.errors": _shim("lily_kernel.errors", ToolError=ToolError),
        "lily_kernel.redaction": _shim("lily_kernel.redaction",
                                       SECRET_NAME=re.compile(secret_pattern, secret_flags)),
        "lily_kernel.tools.tool_registry": _shim(
            "lily_kernel.tools.tool_registry", NOTEBOOK_TOOLS=notebook_tools, Shown=_Shown,
            ToolRegistry=_ToolRegistry)}

    def importer(name: str, globals: Any = None, locals: Any = None,
                 fromlist: Any = (), level: int = 0) -> Any:
        if name in shims:
            return shims[name]
        return builtins.__import__(name, globals, locals, fromlist, level)

    bounded = _module("_lily_acp_bounded", sources["bounded"], importer)
    # a cell's images stay in the kernel: none is offered to the model from here
    images = _shim("lily_kernel.tools.images", offer_kept=lambda hashes: None)
    shims["lily_kernel.tools"] = _shim("lily_kernel.tools", bounded=bounded, images=images)
    return _module("_lily_acp_notebook_tools", sources["notebook_tools"], importer)


def probe(shell: Any, request: str, sources: Mapping[str, str]) -> str:
    """One tool call in this kernel: ``request`` (JSON: tool, args, share and the secret
    rule) answered as JSON: ``{"text": ...}``, or ``{"refused": ...}`` for the tool's own
    refusal, or ``{"failed": type, "message": ...}``."""
    asked = json.loads(request)
    tools = load(sources, asked["secret_pattern"], asked["secret_flags"],
                 tuple(asked["notebook_tools"]))
    share = bool(asked["share"])
    listing = asked.get("listing") or {}

    def list_dir(folder: str) -> list[tuple[str, bool]]:  # the workspace, listed by lily acp
        return [(str(name), bool(is_folder)) for name, is_folder in listing.get(folder, [])]

    try:
        result = tools.answer(KernelNotebook(shell, tools), asked["tool"], asked["args"], share,
                              list_dir if listing else None)
    except tools.ToolError as exc:
        return json.dumps({"refused": str(exc)})
    except Exception as exc:  # the model reads its type (and, when values are shared, why)
        return json.dumps({"failed": type(exc).__name__,
                           "message": str(exc)[:500] if share else ""})
    return json.dumps({"text": result if isinstance(result, str) else result.text})


class KernelNotebook:
    """The notebook tools' view of this kernel's IPython shell (notebook_tools.Notebook):
    the user's namespace, the history's cells and errors, and ``run``."""

    def __init__(self, shell: Any, tools: types.ModuleType) -> None:
        self.shell, self.tools = shell, tools

    def namespace(self) -> Mapping[str, Any]:
        """The user's namespace."""
        names: Mapping[str, Any] = self.shell.user_ns
        return names

    def hidden(self) -> Mapping[str, Any]:
        """The names IPython put in the namespace itself."""
        names: Mapping[str, Any] = self.shell.user_ns_hidden
        return names

    def cells(self, last: int) -> list[Any]:
        """The last ``last`` executed cells, from IPython's history (a silent request, as
        this one, is not among them)."""
        hm = self.shell.history_manager
        if hm is None:
            return []
        current, raw = self.shell.execution_count, hm.input_hist_raw
        return [self.tools.Cell(n, raw[n] if n < len(raw) else "", _output_text(hm, n))
                for n in range(max(1, current - last), current)]

    def last_error(self) -> Any:
        """The last failed cell, or the last failed ``run_python`` code when it came later."""
        found: tuple[int, Any] | None = None
        hm = self.shell.history_manager
        raw = hm.input_hist_raw if hm is not None else []
        stored = getattr(hm, "exceptions", None) or {}
        if stored:  # IPython 9 keeps each failed cell's error
            n = max(stored)
            info = stored[n]
            trace = info.get("traceback") or []
            found = (n, self.tools.ErrorInfo(
                n, raw[n] if n < len(raw) else "", str(info.get("ename", "")),
                str(info.get("evalue", "")),
                "\n".join(trace) if isinstance(trace, list) else str(trace)))
        else:  # IPython 8: the last traceback shown, and the cell its code came from
            exc = getattr(sys, "last_value", None)
            if exc is not None:
                n = _cell_of(self.shell, exc)
                found = (n or 0, _error_info(self.tools, n, raw[n] if n and n < len(raw)
                                             else "", exc))
        ran = getattr(self.shell, RUN_ERROR, None)
        if ran is not None and (found is None or ran[0] > found[0]):
            return ran[1]
        return found[1] if found is not None else None

    def propose(self, code: str) -> bool:
        """Never asked: ``lily acp`` shows a proposed cell in the chat itself."""
        return False

    def run(self, code: str) -> Any:
        """Run ``code`` in the user's namespace like a cell (magics, the last expression
        shown), capturing what it prints and shows, as the Lily kernel's run_python does."""
        from IPython.core import inputtransformer2
        from IPython.utils.capture import capture_output
        display: Any = __import__("IPython.display", fromlist=["display"]).display
        transformer: Any = inputtransformer2.TransformerManager
        shell, error = self.shell, None
        with capture_output(display=True) as captured:
            try:
                source = transformer().transform_cell(code)
                self.tools.exec_cell(shell, source, shell.compile.cache(source), display)
            except Exception as exc:
                error = _error_info(self.tools, None, code, exc)
                setattr(shell, RUN_ERROR, (shell.execution_count, error))
                print(error.traceback.rstrip(), file=sys.stderr)
        parts = [captured.stdout, captured.stderr,
                 *(str(out.data.get("text/plain", "")) for out in captured.outputs)]
        return self.tools.RunResult("\n".join(p.rstrip("\n") for p in parts if p), error)


def _output_text(hm: Any, n: int) -> str:
    """Cell ``n``'s text output: IPython 9 keeps its streams and results; IPython 8 its
    result's repr. A failed cell ends with its error line."""
    parts: list[str] = []
    outputs = getattr(hm, "outputs", None)
    if outputs is not None:
        for out in outputs.get(n, ()):
            bundle = out.bundle
            if out.output_type in ("out_stream", "err_stream"):
                parts.append("".join(bundle.get("stream", [])))
            else:
                text = bundle.get("text/plain")
                parts.append("".join(text) if isinstance(text, list) else str(text or ""))
    else:
        parts.append(hm.output_hist_reprs.get(n, ""))
    exc = getattr(hm, "exceptions", {}).get(n)
    if exc:
        parts.append(f"{exc.get('ename')}: {exc.get('evalue')}")
    return "\n".join(p.rstrip("\n") for p in parts if p)


def _cell_of(shell: Any, exc: BaseException) -> int | None:
    """The execution count of the cell that ran when ``exc`` was raised (IPython's compiler
    maps each cell's file name to its count; a function of an earlier cell comes later)."""
    names = getattr(shell.compile, "_filename_map", {})
    tb = exc.__traceback__
    found = names.get(getattr(exc, "filename", None)) if isinstance(exc, SyntaxError) else None
    while tb is not None and found is None:  # the first cell frame: the cell that ran
        found = names.get(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return found if isinstance(found, int) and found > 0 else None


def _error_info(tools: types.ModuleType, count: int | None, source: str,
                exc: BaseException) -> Any:
    tb = exc.__traceback__
    while tb is not None and ("IPython" in tb.tb_frame.f_code.co_filename.replace("\\", "/")
                              .split("/") or tb.tb_frame.f_code.co_filename.startswith("<lily")):
        tb = tb.tb_next  # IPython's frames and the probe's own are not the user's
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return tools.ErrorInfo(count, source, type(exc).__name__, str(exc), text)
