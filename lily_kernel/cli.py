"""The ``lily`` command for skill authors and CI.

    lily skills list [--all] [--json]   the snapshot the kernel would take here
    lily skills check                   every diagnostic; exit 1 on errors
    lily skills info NAME               one skill, as /help shows it
    lily skills validate [--strict | --lily] PATH...
    lily skills install SOURCE [--user | --workspace] [--as NAME] [--sha256 HASH] [--allow-risky]
    lily skills remove NAME [--user | --workspace]
    lily kernel install [--user | --sys-prefix | --prefix P]
    lily run "/command ..."             run one command cell, as the kernel would
    lily logs [-q TEXT] | show | usage | export | replay | rm | prune   the journal (docs/logs.md)
    lily mcp list [--json]              start the configured MCP servers, list their tools
    lily mcp import FILE                a .mcp.json / mcp_settings.json as lily.toml tables
    lily acp                            Lily as an ACP agent on stdin/stdout (Zed, jupyter-ai)
    lily acp install-persona --python PATH   Lily as a persona in jupyter-ai's environment

Roots come from SKILLS_WORKSPACE_DIR, SKILLS_USER_DIR and SKILLS_BUNDLED_DIR,
as in the kernel. Exit codes: 0 fine, 1 problems found, 2 usage or loader error;
on a closed pipe (``lily skills list --json | head``) it stops quietly, with
141 as a shell reports a command ended by SIGPIPE.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from lily_kernel import __version__
from lily_kernel.commands import render, sanitize
from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.errors import (
    CommandError,
    ConfigError,
    LilyError,
    LoaderError,
    LogsError,
    error_line,
)
from lily_kernel.session import logs
from lily_kernel.skills.loader import build_snapshot
from lily_kernel.skills.paths import skill_roots, workspace_dir
from lily_kernel.skills.snapshot import Snapshot

if TYPE_CHECKING:
    from lily_kernel.skills.install import LilyCheck
    from lily_kernel.skills.remote import RemoteRoot


def _snapshot(args: argparse.Namespace) -> Snapshot:
    return _load()[0]


def _load() -> tuple[Snapshot, tuple[RemoteRoot, ...]]:
    """The snapshot a session here would take, with the MCP servers' skill roots."""
    from lily_kernel.tools.builtin_tools import register_builtins
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
    tools = ToolRegistry()
    register_builtins(tools, workspace_dir())
    remote = _mcp_skill_roots()
    return build_snapshot(skill_roots(), tools, ToolPolicy.from_env(), reserved=BUILTIN_NAMES,
                          remote=remote), remote


def _mcp_skill_roots() -> tuple[RemoteRoot, ...]:
    """The configured MCP servers' skill roots (``mcp:<server>``, docs/loader.md#mcp-roots)
    as a session here has them: its servers started (a workspace's only once it is trusted),
    each waited for within the session's bound, their skills checked as the session checks
    them (a workspace server's against /trust's record), then stopped. None configured: ()."""
    from lily_kernel.settings.model_settings import read_config_file, user_config_path
    from lily_kernel.tools.mcp import mcp_config
    workspace = workspace_dir()
    try:
        if not mcp_config.configured(workspace, read_config_file(workspace, user_config_path()),
                                     read_config_file(workspace)):
            return ()
    except ConfigError:
        return ()  # (the session would not start its servers either)
    from lily_kernel.session.session import Session
    hub = Session(journal=False, reserved_commands=BUILTIN_NAMES).mcp
    if hub is None:
        return ()
    try:
        return hub.skill_roots()
    finally:
        hub.close()


def cmd_list(args: argparse.Namespace) -> int:
    """``lily skills list``: the snapshot's skills (and, with --all, what was left out)."""
    snap, remote = _load()
    if args.json:
        print(json.dumps(snap.as_dict(), indent=2, ensure_ascii=False))
    else:
        from lily_kernel.commands.results import SkillTable
        print(render.text(SkillTable(snap, show_all=args.all)))
        if args.all:  # where each source's skills come from (docs/loader.md#roots)
            print("\nRoots, highest precedence first:\n")
            rows = render.root_rows(snap) + [
                (r.source, f"MCP server '{r.server}'",
                 r.reason or f"{len(r.skills)} skill(s) listed")
                for r in remote]
            print(render.table(render.ROOT_COLUMNS, rows, width=100))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``lily skills check``: every diagnostic of a load; exit 1 when a skill was excluded."""
    snap = _snapshot(args)
    print(render.skills_heading(snap))
    for d in snap.diagnostics:
        where = f"{d.skill} ({d.source})" if d.skill else f"({d.source})"
        print(f"{d.kind}: {where}: {d.reason}" + (f" [{d.path}]" if d.path else ""))
    errors = sum(d.kind == "skill_error" for d in snap.diagnostics)
    ineligible = sum(d.kind == "ineligible" for d in snap.diagnostics)
    print(f"{errors} skill error(s), {ineligible} ineligible.")
    return 1 if errors else 0


def cmd_info(args: argparse.Namespace) -> int:
    """``lily skills info NAME``: one skill's help page."""
    from lily_kernel.commands.help import skill_help
    snap = _snapshot(args)
    skill = snap.get(args.name)
    if skill is None:
        diag = snap.exclusion(args.name)
        if diag:
            raise CommandError(f"skill '{args.name}' is excluded ({diag.kind}): {diag.reason}")
        raise CommandError(f"no skill named '{args.name}'.")
    print(render.text(skill_help(snap, skill)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """``lily skills validate``: check skill folders one by one."""
    from lily_kernel.skills.validator import validate, validate_lily, validate_strict
    if args.lily:
        from lily_kernel.tools.builtin_tools import register_builtins
        from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
        tools = ToolRegistry()
        register_builtins(tools, workspace_dir())
        policy = ToolPolicy.from_env()
    bad = notebook = 0
    for path in args.paths:
        if not os.path.exists(path):
            print(error_line(CommandError(f"{path}: no such file or folder.")), file=sys.stderr)
            bad += 1
            continue
        if args.lily:  # what a load here would say: errors and ineligibility fail, notes do not
            found = validate_lily(path, tools, policy, reserved=BUILTIN_NAMES)
            faults = [(k, r) for k, r in found if k != "note"]
            if faults and all(k == "ineligible" and _notebook_only(r) for k, r in faults):
                notebook += 1  # not a fault of the skill: the CLI has no notebook tools
                found = [("valid in a notebook" if k == "ineligible" else k, r) for k, r in found]
            else:
                bad += bool(faults)
            for kind, reason in found:
                print(f"{path}: {kind}: {reason}")
            continue
        warnings: list[str] = []
        if args.strict:  # a value type stricter than skills-ref's: a warning, exit 0
            problems, warnings = validate_strict(path)
        else:
            problems = validate(path, reserved=BUILTIN_NAMES)
        bad += bool(problems)
        for problem in problems:
            print(f"{path}: {problem}")
        for warning in warnings:
            print(f"{path}: warning: {warning}")
    rules = (" (strict Agent Skills rules)" if args.strict else
             " (what Lily would load here)" if args.lily else "")
    needs = f"; {notebook} of them need{'s' if notebook == 1 else ''} a notebook" if notebook else ""
    print(f"{len(args.paths) - bad} of {len(args.paths)} skill(s) valid{rules}{needs}.",
          file=sys.stderr)
    return 1 if bad else 0


def _lily_checker() -> LilyCheck:
    """``lily skills validate --lily`` for one folder, with this host's tools and policy."""
    from lily_kernel.skills.validator import validate_lily
    from lily_kernel.tools.builtin_tools import register_builtins
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
    tools = ToolRegistry()
    register_builtins(tools, workspace_dir())
    policy = ToolPolicy.from_env()
    return lambda folder: validate_lily(folder, tools, policy, reserved=BUILTIN_NAMES)


def cmd_skills_install(args: argparse.Namespace) -> int:
    """Scan, check and copy one skill into Lily's user or workspace root
    (docs/skills-compat.md#installing-skills); exit 1 when refused."""
    from lily_kernel.errors import InstallError
    from lily_kernel.skills.install import install
    try:
        done = install(args.source, _lily_checker(), "workspace" if args.workspace else "user",
                       name=args.name, sha256=args.sha256, allow_risky=args.allow_risky)
    except InstallError as exc:
        print(error_line(exc), file=sys.stderr)
        for finding in exc.findings:
            print(f"  {finding}", file=sys.stderr)
        return 1
    for finding in done.allowed:
        print(f"allowed (--allow-risky): {finding}")
    for note in done.notes:
        print(f"note: {note}")
    print(f"Installed skill '{done.name}' in {done.path}")
    return 0


def cmd_skills_remove(args: argparse.Namespace) -> int:
    """Delete one skill from Lily's user or workspace root."""
    from lily_kernel.errors import InstallError
    from lily_kernel.skills.install import remove
    target = "workspace" if args.workspace else "user" if args.user else None
    try:
        path = remove(args.name, target)
    except InstallError as exc:
        print(error_line(exc), file=sys.stderr)
        return 1
    print(f"Removed skill '{args.name}' from {path.parent}")
    return 0


def _notebook_only(reason: str) -> bool:
    """Is ``reason`` only that the skill needs a notebook (the CLI has no notebook tools)?"""
    from lily_kernel.skills.eligibility import NOTEBOOK_ONLY
    return reason.startswith(NOTEBOOK_ONLY) and ";" not in reason


def cmd_kernel_install(args: argparse.Namespace) -> int:
    """``lily kernel install``: install the kernelspec."""
    from lily_kernel.jupyter.install import install
    print(f"Installed kernelspec 'lily' in {install(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """One cell through the core, as the kernel runs it: a command, and for a skill request
    (``/plan ...``) the agent, when a model is configured (docs/architecture.md#one-cell)."""
    from lily_kernel.commands.results import ActionCard
    from lily_kernel.commands.runner import Runner
    from lily_kernel.session.session import Session
    runner = Runner(lambda: Session(journal=False, reserved_commands=BUILTIN_NAMES))
    if runner.session_error is not None:
        raise LoaderError(runner.session_error)  # exit 2, as for every command here
    for result in runner.command(args.command):
        print(render.text(result))
        if isinstance(result, ActionCard):
            runner.shown(result)  # printed: it waits (until this process ends)
    return 0


def cmd_acp(args: argparse.Namespace) -> int:
    """``lily acp``: serve the Agent Client Protocol on stdin/stdout (docs/front-ends.md#acp)."""
    try:
        from lily_kernel.acp.acp_server import serve
    except ImportError as exc:
        if exc.name not in ("acp", "pydantic") and not str(exc.name).startswith("acp."):
            raise
        raise CommandError("lily acp needs the Agent Client Protocol SDK: from a checkout, "
                           ".venv/bin/pip install -e '.[acp]'.") from None
    return serve()


def cmd_acp_install_persona(args: argparse.Namespace) -> int:
    """``lily acp install-persona``: Lily as a persona in jupyter-ai's own environment."""
    from lily_kernel.acp import persona_install
    path = persona_install.install(args.python)
    print(f"Installed the Lily persona in {path.parent} (it runs {persona_install.lily_executable()} acp).\n"
          "Restart JupyterLab. To make Lily the default persona, add to jupyter_server_config.py:\n"
          f"    c.PersonaManager.default_persona_id = \"{persona_install.PERSONA_ID}\"")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with Lily's error shape: one ``Error:`` line and exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{error_line(CommandError(f'{self.prog}: {message}; see {self.prog} --help.'))}\n")


# -- lily logs (docs/logs.md) ------------------------------------------------------------

def _logs_workspace(args: argparse.Namespace) -> Path:
    """The workspace ``lily logs`` reads: ``--workspace``, else the kernel's."""
    return Path(args.workspace) if getattr(args, "workspace", None) else workspace_dir()


def _read_logs(args: argparse.Namespace) -> logs.Logs:
    """The workspace's journal, read once; each problem line goes to stderr."""
    read = logs.Logs(_logs_workspace(args))
    _print_notes(read.notes)
    return read


def _print_notes(notes: logs.Notes) -> None:
    """Each problem line met while reading, on stderr."""
    for line in notes.all():
        print(f"lily logs: {line}", file=sys.stderr)


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def cmd_logs(args: argparse.Namespace) -> int:
    """``lily logs``: the sessions, newest first; with ``-q``, a full-text search."""
    since = logs.when(args.since) if args.since else None
    until = logs.when(args.until) if args.until else None
    if args.query is not None:
        from lily_kernel.session import logs_index
        notes = logs.Notes()
        hits = logs_index.search(_logs_workspace(args), args.query, notes, tool=args.tool,
                                 model=args.model, since=since, until=until,
                                 limit=args.n or 20)
        _print_notes(notes)
        foreign_of = _foreign_hits(_logs_workspace(args), hits)
        if args.json:
            print(json.dumps([{**h.as_dict(), "foreign": foreign_of(h.session) or None}
                              for h in hits], indent=2, ensure_ascii=False))
        else:
            hit_rows = [(h.session[:12] + (" (foreign)" if foreign_of(h.session) else ""),
                         logs.iso(h.t), h.kind + (f" {h.tool}" if h.tool else ""),
                         h.snippet) for h in hits]
            print(render.table(("session", "time", "where", "snippet"), hit_rows, width=100))
            print(f"{len(hits)} match(es).", file=sys.stderr)
        return 0
    read = _read_logs(args)
    rows = read.sessions()
    if args.model:
        rows = [s for s in rows if args.model in s.models]
    if args.tool:
        rows = [s for s in rows if args.tool in s.tools]
    if since is not None:
        rows = [s for s in rows if s.last >= since]
    if until is not None:
        rows = [s for s in rows if s.started <= until]
    if args.n:
        rows = rows[:args.n]
    if args.json:
        print(json.dumps([s.as_dict() for s in rows], indent=2, ensure_ascii=False))
        return 0
    print(render.table(
        ("id", "notebook/label", "started", "last activity", "requests", "tool calls",
         "tokens in", "tokens out", "models", "first request"),
        [(s.id[:12], s.label + (f" ({s.parent_kind} from {s.parent[:12]})" if s.parent else "")
          + (" (foreign)" if s.foreign else ""),
          logs.iso(s.started), logs.iso(s.last), str(s.requests),
          str(s.tool_calls), _count(s.tokens_in), _count(s.tokens_out), ", ".join(s.models),
          s.first)
         for s in rows]))
    marked = sum(1 for s in rows if s.foreign)
    if marked:
        print(f"{marked} session(s) marked (foreign): Lily cannot prove it wrote them for you; "
              "they are shown, never resumed (docs/logs.md#authenticity).", file=sys.stderr)
    return 0


def _foreign_hits(workspace: Path, hits: list[Any]) -> Callable[[str], str]:
    """Why each hit's session is foreign ("" when Lily wrote it for you), from the marks of
    its records in the files the hits name, without reading the whole journal again (the
    chain is checked where a session is listed or shown; docs/logs.md#authenticity)."""
    from lily_kernel.session import journal_auth
    try:
        key = journal_auth.load_key()
    except ConfigError as exc:
        problem = str(exc)
        return lambda session: problem
    folder = logs.journal_dir(workspace)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for name in sorted({h.file for h in hits if h.file}):
        for record in logs.read_file(folder / name, logs.Notes(),
                                     lambda r, raw: journal_auth.mark(r, raw, key)):
            by_session.setdefault(record["session_id"], []).append(record)
    checked = {sid: journal_auth.check_records(recs, key, chain=False)
               for sid, recs in by_session.items()}
    return lambda session: (getattr(checked.get(session), "reason", "")
                            if session in checked else "")


def _one_session(args: argparse.Namespace, strict: bool = True
                 ) -> tuple[logs.Logs, str, logs.SessionSummary, list[logs.Turn]]:
    """The session ``args.session`` names: the journal, its id, summary and turns. Its
    hash chain is checked (docs/logs.md#hash-chain): a break is refused with LogsError when
    ``strict`` (export, replay), else (show) said in one line on stderr."""
    read = logs.Logs(_logs_workspace(args))
    try:
        sid = read.resolve(args.session)
        try:
            records = read.checked(sid)
        except LogsError as exc:
            if strict:
                raise
            read.notes.add(str(exc).replace("; refusing to use it", ""))
            records = read.records(sid)
    finally:
        _print_notes(read.notes)
    return read, sid, read.summary(sid), logs.turns(records)


def cmd_logs_show(args: argparse.Namespace) -> int:
    """``lily logs show SESSION``: one session as a transcript."""
    from lily_kernel.commands import logs_export
    _, _, summary, turns = _one_session(args, strict=False)
    if args.n:
        cells = [i for i, t in enumerate(turns) if t.is_cell]
        turns = turns[cells[-args.n]:] if len(cells) > args.n else turns
    if getattr(args, "json", False):
        print(json.dumps({"session": summary.as_dict(), "turns": [t.as_dict() for t in turns]},
                         indent=2, ensure_ascii=False))
    else:
        print(logs_export.markdown(summary, turns, truncate=args.truncate), end="")
    return 0


def cmd_logs_usage(args: argparse.Namespace) -> int:
    """``lily logs usage``: token totals by model, session or day."""
    rows = logs.usage(_read_logs(args), args.by)
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
        return 0
    print(render.table((args.by, "calls", "tokens in", "tokens out", "unreported"),
                       [(r[args.by], str(r["calls"]), f"{r['tokens_in']:,}",
                         f"{r['tokens_out']:,}", str(r["unreported"])) for r in rows]))
    total_in = sum(r["tokens_in"] for r in rows)
    total_out = sum(r["tokens_out"] for r in rows)
    print(f"total: {total_in:,} in / {total_out:,} out over "
          f"{sum(r['calls'] for r in rows)} model call(s)")
    return 0


def _ask(question: str, yes: bool) -> bool:
    """True when ``yes``, else the answer to ``question`` on stdin (no answer: no)."""
    if yes:
        return True
    print(question + " [y/N] ", end="", flush=True)
    try:
        answer = input()
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _delete(args: argparse.Namespace, ids: list[str], what: str) -> int:
    """Delete the records of ``ids`` once the user agrees; the exit code."""
    from lily_kernel.session import logs_prune
    if not ids:
        print(f"No {what}: nothing deleted.")
        return 0
    shown = ", ".join(i[:12] for i in ids[:5]) + (" ..." if len(ids) > 5 else "")
    if not _ask(f"Delete every journal record of {len(ids)} session(s) ({shown})?", args.yes):
        print("Nothing deleted.")
        return 1
    dropped = logs_prune.remove(_logs_workspace(args), set(ids))
    print(f"Deleted {dropped} record(s) of {len(ids)} session(s).")
    return 0


def cmd_logs_rm(args: argparse.Namespace) -> int:
    """``lily logs rm SESSION``: delete one session's records (asks unless --yes)."""
    read = _read_logs(args)
    return _delete(args, [read.resolve(args.session)], "session")


def cmd_logs_prune(args: argparse.Namespace) -> int:
    """``lily logs prune --older-than 30d``: delete sessions idle for longer."""
    from lily_kernel.session import logs_prune
    seconds = logs.duration(args.older_than)
    return _delete(args, logs_prune.older_than(_read_logs(args), seconds),
                   f"session older than {args.older_than}")


def cmd_logs_export(args: argparse.Namespace) -> int:
    """``lily logs export SESSION --md FILE | --ipynb FILE``."""
    from lily_kernel.commands import logs_export
    if not (args.md or args.ipynb):
        raise LogsError("export needs --md FILE or --ipynb FILE")
    _, _, summary, turns = _one_session(args)
    if args.md:
        logs_export.write_text(Path(args.md), logs_export.markdown(summary, turns))
        print(f"Wrote {args.md}")
    if args.ipynb:
        logs_export.write_notebook(Path(args.ipynb), logs_export.notebook(summary, turns))
        print(f"Wrote {args.ipynb}")
    return 0


def cmd_logs_replay(args: argparse.Namespace) -> int:
    """``lily logs replay SESSION --to DIR``: a notebook and a scripted-model script that
    re-run the session under ``pytest --nbval`` (docs/logs.md#replay)."""
    from lily_kernel.commands import logs_replay
    read, sid, summary, _ = _one_session(args)
    if summary.foreign:
        print(f"Replaying a foreign journal ({summary.foreign}): nothing in it runs unless "
              "--include-code (docs/logs.md#authenticity).")
    nb_path, script_path, code = logs_replay.build(read, sid, Path(args.to), args.include_code,
                                                   args.with_workspace)
    print(f"Wrote {script_path}")
    if code:  # what the replay would run, read from the journal: the user decides
        print("The replay runs code the journal names; review it (docs/logs.md#replay-and-code):")
        for line in code:
            print(f"  {line}")
        print("  Written as cells (--include-code)." if args.include_code else
              "  Cells that are code are shown as Markdown, not run; after reviewing them, "
              "--include-code writes them as cells.")
    if not args.no_run:
        from lily_kernel.jupyter.replay_notebook import record_outputs
        problem = record_outputs(nb_path)
        if problem:
            print(f"Wrote {nb_path}, but the replay already differs: {problem}",
                  file=sys.stderr)
            return 1
    print(f"Wrote {nb_path}; check it with: pytest --nbval {nb_path}")
    return 0


def add_logs_parser(sub: Any) -> None:
    """The ``lily logs`` subcommands (docs/logs.md)."""
    cmd = sub.add_parser("logs", help="browse, search, export and replay the journal "
                         "(alone: list the sessions, as `lily logs list`)")
    cmd.add_argument("--workspace", metavar="DIR", help="the workspace (default: as the kernel)")

    def filters(p: argparse.ArgumentParser, **keep: Any) -> None:
        """The listing's and the search's options (``keep``: a subcommand's default=SUPPRESS,
        so ``lily logs -n 3 list`` and ``lily logs list -n 3`` are one)."""
        p.add_argument("-n", type=int, default=keep.get("default", 0), metavar="N",
                       help="at most N sessions (default all) or matches (default 20)")
        p.add_argument("--json", action="store_true", help="print JSON", **keep)
        for flags, metavar, text in (
                (("-q", "--query"), "TEXT", "full-text search"),
                (("-T", "--tool"), "TOOL", "only this tool's calls and results"),
                (("-m", "--model"), "MODEL", "only sessions that used MODEL"),
                (("--since",), "WHEN", "a date, date-time or duration ago (7d)"),
                (("--until",), "WHEN", "a date, date-time or duration ago")):
            p.add_argument(*flags, metavar=metavar, help=text, **keep)

    filters(cmd)
    cmd.set_defaults(func=cmd_logs)
    lsub = cmd.add_subparsers(dest="action")

    def child(name: str, help_text: str,
              func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = lsub.add_parser(name, help=help_text)
        p.add_argument("--workspace", metavar="DIR", default=argparse.SUPPRESS,
                       help="the workspace (default: as the kernel)")
        p.set_defaults(func=func)
        return p

    filters(child("list", "the sessions, newest first (with -q: a full-text search)",
                  cmd_logs), default=argparse.SUPPRESS)
    show = child("show", "one session as a transcript", cmd_logs_show)
    show.add_argument("session", metavar="SESSION", help="an id (or its start) or a label")
    show.add_argument("-n", type=int, default=0, metavar="N", help="only the last N cells")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    show.add_argument("-t", "--truncate", type=int, nargs="?", const=200, default=None,
                      metavar="CHARS", help="cut tool arguments and results (default 200)")
    use = child("usage", "token totals by model, session or day", cmd_logs_usage)
    use.add_argument("--by", choices=("model", "session", "day"), default="model",
                     help="what the totals are grouped by (default: model)")
    use.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    rm = child("rm", "delete one session's records", cmd_logs_rm)
    rm.add_argument("session", metavar="SESSION", help="an id (or its start) or a label")
    rm.add_argument("--yes", action="store_true", help="do not ask")
    prune = child("prune", "delete sessions idle for longer than a duration", cmd_logs_prune)
    prune.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 2w")
    prune.add_argument("--yes", action="store_true", help="do not ask")
    exp = child("export", "a session as Markdown or a notebook", cmd_logs_export)
    exp.add_argument("session", metavar="SESSION", help="an id (or its start) or a label")
    exp.add_argument("--md", metavar="FILE", help="write a Markdown transcript")
    exp.add_argument("--ipynb", metavar="FILE", help="write a notebook on the Lily kernel")
    rep = child("replay", "a session as a notebook + scripted model for pytest --nbval",
                cmd_logs_replay)
    rep.add_argument("session", metavar="SESSION", help="an id (or its start) or a label")
    rep.add_argument("--to", required=True, metavar="DIR",
                     help="the folder for the notebook and its scripted model")
    rep.add_argument("--no-run", action="store_true",
                     help="do not run it once to record its outputs (nbval then has none)")
    rep.add_argument("--include-code", action="store_true",
                     help="write the cells that run code (%%%%python, /confirm, ...) as cells")
    rep.add_argument("--with-workspace", action="store_true",
                     help="load the replayed workspace's skills, persona and lily.toml")




def cmd_mcp_list(args: argparse.Namespace) -> int:
    """Start the configured MCP servers here and list their state and tools (docs/mcp.md)."""
    from lily_kernel.commands.results import McpStatus
    from lily_kernel.session.session import Session
    session = Session(journal=False, reserved_commands=BUILTIN_NAMES)
    if session.config_error:
        print(error_line(ConfigError(session.config_error)), file=sys.stderr)
        return 2
    hub = session.mcp
    if hub is not None:
        hub.sync(session.tools)
    status = McpStatus(tuple(hub.status(session.tools, session.policy)) if hub else (),
                       tuple(hub.problems) if hub else ())
    if args.json:
        print(json.dumps({"servers": list(status.servers), "problems": list(status.problems)},
                         indent=2, ensure_ascii=False))
    else:
        print(render.text(status))
    if hub is not None:
        hub.close()
    return 1 if any(r["state"] == "failed" for r in status.servers) else 0


def cmd_mcp_serve(args: argparse.Namespace) -> int:
    """Serve this workspace's eligible skills by the MCP Skills extension (docs/mcp.md#serving-skills):
    the user's, the workspace's once it is trusted, the bundled ones."""
    import secrets

    from lily_kernel.settings import workspace_trust
    from lily_kernel.skills.paths import untrusted_roots
    from lily_kernel.skills.untrusted import Untrusted
    from lily_kernel.tools.builtin_tools import register_builtins
    from lily_kernel.tools.mcp import mcp_serve
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
    workspace = workspace_dir()
    tools = ToolRegistry()
    register_builtins(tools, workspace)
    roots = skill_roots()
    gated = untrusted_roots(roots)
    try:
        trusted = workspace_trust.is_trusted(workspace, os.environ)
    except ConfigError:
        trusted = False
    untrusted = Untrusted(gated, "the workspace is not trusted") if gated and not trusted \
        else None
    snap = build_snapshot(roots, tools, ToolPolicy.from_env(), reserved=BUILTIN_NAMES,
                          untrusted=untrusted)
    published = mcp_serve.capture(snap, everything=args.all)
    token = None
    if args.http:
        token = os.environ.get("LILY_MCP_TOKEN") or secrets.token_urlsafe(24)
        if not os.environ.get("LILY_MCP_TOKEN"):
            print(f"token: {token}", file=sys.stderr)
    names = ", ".join(p.entry["frontmatter"]["name"] for p in published) or "none"
    print(f"serving {len(published)} skills: {names}", file=sys.stderr)
    mcp_serve.serve(published, http=args.http, port=args.port, token=token,
                    announce=lambda url: print(url, file=sys.stderr, flush=True))
    return 0


def cmd_mcp_import(args: argparse.Namespace) -> int:
    """Print the lily.toml tables for a Claude Code / Cursor / notebook-intelligence
    ``.mcp.json`` or a jupyter-ai ``mcp_settings.json``."""
    from pathlib import Path

    from lily_kernel.errors import ConfigError
    from lily_kernel.tools.mcp.mcp_config import read_mcp_json, to_toml
    try:
        if not Path(args.file).is_file():
            raise ConfigError(f"{args.file}: no such file")
        print(to_toml(read_mcp_json(Path(args.file))), end="")
    except ConfigError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    return 0


def parser() -> argparse.ArgumentParser:
    """The ``lily`` command's argument parser."""
    p = _Parser(prog="lily", description="Lily: skills for Jupyter.")
    p.add_argument("--version", action="version", version=f"lily {__version__}")
    sub = p.add_subparsers(dest="group")

    skills = sub.add_parser("skills", help="inspect and validate skills")
    ssub = skills.add_subparsers(dest="action")
    lst = ssub.add_parser("list", help="list the skills the kernel would load here")
    lst.add_argument("--all", action="store_true", help="also list excluded skills and why")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=cmd_list)
    ssub.add_parser("check", help="print every diagnostic; exit 1 on skill errors").set_defaults(func=cmd_check)
    info = ssub.add_parser("info", help="show one skill")
    info.add_argument("name", help="the skill's name")
    info.set_defaults(func=cmd_info)
    val = ssub.add_parser("validate", help="validate skill folders")
    rules = val.add_mutually_exclusive_group()
    rules.add_argument("--strict", action="store_true",
                       help="the Agent Skills specification exactly (only its six fields)")
    rules.add_argument("--lily", action="store_true",
                       help="what Lily would load here: the loader's reasons, eligibility, notes")
    val.add_argument("paths", nargs="+", metavar="PATH", help="skill folders (or SKILL.md files)")
    val.set_defaults(func=cmd_validate)
    ins = ssub.add_parser("install", help="scan a skill and copy it into Lily's user or "
                          "workspace root")
    ins.add_argument("source", metavar="SOURCE",
                     help="a skill folder, a .zip or .tar.gz file, or git:URL[@ref][#subdir]")
    _add_target(ins)
    ins.add_argument("--as", dest="name", metavar="NAME", help="install under this name")
    ins.add_argument("--sha256", metavar="HASH", help="refuse an archive with another SHA-256")
    ins.add_argument("--allow-risky", action="store_true",
                     help="install despite findings of the scan (never a symlink leaving the "
                          "skill, a special file or an unsafe archive)")
    ins.set_defaults(func=cmd_skills_install)
    rem = ssub.add_parser("remove", help="delete an installed skill from the user or "
                          "workspace root")
    rem.add_argument("name", metavar="NAME", help="the installed skill's name")
    _add_target(rem)
    rem.set_defaults(func=cmd_skills_remove)

    kernel = sub.add_parser("kernel", help="the Jupyter kernel")
    ksub = kernel.add_subparsers(dest="action")
    inst = ksub.add_parser("install", help="install the 'lily' kernelspec")
    add_install_args(inst)
    inst.set_defaults(func=cmd_kernel_install)

    add_logs_parser(sub)

    run = sub.add_parser("run", help="run one /command cell as the kernel would (a skill request goes to the model)")
    run.add_argument("command", help='the cell, e.g. "/todos src"')
    run.set_defaults(func=cmd_run)

    acp = sub.add_parser("acp", help="Lily as an Agent Client Protocol agent over stdio "
                         "(jupyter-ai, Zed, JetBrains)", description=(
                             "`lily acp` itself runs Lily as an Agent Client Protocol agent on "
                             "stdin/stdout: it is the command a chat panel (jupyter-ai, Zed, "
                             "JetBrains) starts. `lily acp install-persona` installs Lily into "
                             "jupyter-ai's environment (docs/front-ends.md#acp)."))
    acp.set_defaults(func=cmd_acp)
    asub = acp.add_subparsers(dest="action")
    persona = asub.add_parser("install-persona", help="install Lily as a persona into "
                              "jupyter-ai's environment")
    persona.add_argument("--python", required=True, metavar="PATH",
                         help="the Python of jupyter-ai's environment")
    persona.set_defaults(func=cmd_acp_install_persona)

    mcp = sub.add_parser("mcp", help="MCP tool servers")
    msub = mcp.add_subparsers(dest="action", required=True)
    mlist = msub.add_parser("list", help="start the configured servers and list their tools")
    mlist.add_argument("--json", action="store_true", help="print one JSON object")
    mlist.set_defaults(func=cmd_mcp_list)
    mserve = msub.add_parser("serve", help="serve this workspace's skills to other agents "
                             "(the MCP Skills extension; stdio, or --http on 127.0.0.1)")
    mserve.add_argument("--http", action="store_true",
                        help="Streamable HTTP on 127.0.0.1 with a bearer token "
                             "(LILY_MCP_TOKEN, else a new one printed on stderr)")
    mserve.add_argument("--port", type=int, default=0, help="the HTTP port (default: any free)")
    mserve.add_argument("--all", action="store_true",
                        help="also serve skills marked disable-model-invocation")
    mserve.set_defaults(func=cmd_mcp_serve)
    mimp = msub.add_parser("import", help="print a .mcp.json's servers as lily.toml tables")
    mimp.add_argument("file", help="the .mcp.json file")
    mimp.set_defaults(func=cmd_mcp_import)

    policy = sub.add_parser("policy", help="the administrator's permission policy")
    psub = policy.add_subparsers(dest="action", required=True)
    pcheck = psub.add_parser("check", help="validate an administrator's policy file "
                             "(one Error: line per problem, exit 2)")
    pcheck.add_argument("file", help="the policy file (TOML)")
    pcheck.set_defaults(func=cmd_policy_check)
    _describe(p)
    return p


def _describe(p: argparse.ArgumentParser) -> None:
    """Every subcommand's ``--help`` says what it does: its one-line help as its description
    (unless it has its own)."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in action.choices.items():
                text = helps.get(name, "")
                if child.description is None and text:
                    child.description = text[0].upper() + text[1:] + "."
                _describe(child)


def cmd_policy_check(args: argparse.Namespace) -> int:
    """``lily policy check FILE``: every problem of an administrator's policy file, one
    ``Error:`` line each, exit 2; silent but for one line, exit 0, when it is valid
    (docs/permissions.md#the-administrators-policy)."""
    from pathlib import Path

    from lily_kernel.settings import admin_policy
    found = admin_policy.check(Path(args.file))
    for problem in found:
        print(error_line(ConfigError(f"{args.file}: {problem}")), file=sys.stderr)
    if found:
        return 2
    print(f"{args.file}: a valid administrator's policy.")
    return 0


def _add_target(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="Lily's user root (the default "
                       "for install): SKILLS_USER_DIR, else ~/.lily/skills")
    where.add_argument("--workspace", action="store_true", help="the workspace root: "
                       "SKILLS_WORKSPACE_DIR, else <workspace>/skills")


def add_install_args(p: argparse.ArgumentParser) -> None:
    """The kernelspec install options (``--user``, ``--sys-prefix``, ``--prefix``)."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument("--sys-prefix", action="store_true", help="install into sys.prefix (a venv)")
    where.add_argument("--prefix", metavar="PATH", help="install under PATH")


def main(argv: list[str] | None = None) -> int:
    """Run the ``lily`` command; return its exit code (0 fine, 1 problems, 2 usage/loader)."""
    p = parser()
    args = p.parse_args(argv)
    if getattr(args, "func", None) is None:  # `lily` alone, or a group without an action
        if args.group is None:
            p.print_help()
            return 0
        p.error(f"{args.group} needs an action")
    if args.func is cmd_acp:  # stdout carries the protocol: JSON, escaped already
        return _main(args)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _TerminalSafe(sys.stdout), _TerminalSafe(sys.stderr)
    try:
        return _main(args)
    finally:
        sys.stdout, sys.stderr = streams


class _TerminalSafe:
    """A text stream that shows, as escapes, every character a terminal would act on
    (sanitize.terminal_text): a model's answer, a notebook's name or a tool's result in
    ``lily run`` or ``lily logs`` cannot move the cursor, set the title or write the
    clipboard (docs/trust-boundary.md#display)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._stream.write(sanitize.terminal_text(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except LoaderError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    except LilyError as exc:  # a failed command: one line, as in a notebook
        print(error_line(exc), file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`lily skills list --json | head`): stop quietly, as Unix
        # tools do. stdout is pointed at devnull so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
