"""The ``lily`` command for skill authors and CI.

    lily skills list [--all] [--json]   the snapshot the kernel would take here
    lily skills check                   every diagnostic; exit 1 on errors
    lily skills info NAME               one skill, as /help shows it
    lily skills validate [--strict | --lily] PATH...
    lily kernel install [--user | --sys-prefix | --prefix P]
    lily run "/command ..."             run one command cell, as the kernel would
    lily mcp list [--json]              start the configured MCP servers, list their tools
    lily mcp import FILE                a .mcp.json / mcp_settings.json as lily.toml tables

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

from lily_kernel.commands import render
from lily_kernel.skills.loader import LoaderError, build_snapshot
from lily_kernel.skills.paths import skill_roots, workspace_dir
from lily_kernel.errors import error_line
from lily_kernel.commands.results import CommandError


def _snapshot(args: argparse.Namespace):
    from lily_kernel.agent.builtin_tools import register_builtins
    from lily_kernel.agent.tools import ToolPolicy, ToolRegistry
    tools = ToolRegistry()
    register_builtins(tools, workspace_dir())
    return build_snapshot(skill_roots(), tools, ToolPolicy.from_env())


def cmd_list(args: argparse.Namespace) -> int:
    snap = _snapshot(args)
    if args.json:
        print(json.dumps(snap.as_dict(), indent=2, ensure_ascii=False))
    else:
        from lily_kernel.commands.results import SkillTable
        print(render.text(SkillTable(snap, show_all=args.all)))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
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
    from lily_kernel.commands.help import skill_help
    snap = _snapshot(args)
    skill = snap.get(args.name)
    if skill is None:
        diag = snap.exclusion(args.name)
        if diag:
            print(f"Error: skill '{args.name}' is excluded ({diag.kind}): {diag.reason}",
                  file=sys.stderr)
        else:
            print(f"Error: no skill named '{args.name}'.", file=sys.stderr)
        return 1
    print(render.text(skill_help(snap, skill)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from lily_kernel.skills.validator import validate, validate_lily
    if args.lily:
        from lily_kernel.agent.builtin_tools import register_builtins
        from lily_kernel.agent.tools import ToolPolicy, ToolRegistry
        tools = ToolRegistry()
        register_builtins(tools, workspace_dir())
        policy = ToolPolicy.from_env()
    bad = 0
    for path in args.paths:
        if args.lily:  # what a load here would say: errors and ineligibility fail, notes do not
            found = validate_lily(path, tools, policy)
            bad += any(kind != "note" for kind, _ in found)
            for kind, reason in found:
                print(f"{path}: {kind}: {reason}")
            continue
        problems = validate(path, strict=args.strict)
        bad += bool(problems)
        for problem in problems:
            print(f"{path}: {problem}")
    rules = (" (strict Agent Skills rules)" if args.strict else
             " (what Lily would load here)" if args.lily else "")
    print(f"{len(args.paths) - bad} of {len(args.paths)} skill(s) valid{rules}.", file=sys.stderr)
    return 1 if bad else 0


def cmd_kernel_install(args: argparse.Namespace) -> int:
    from lily_kernel.jupyter.install import install
    print(f"Installed kernelspec 'lily' in {install(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """One cell through the core, as the kernel runs it: a command, and for a skill request
    (``/plan ...``) the agent, when a model is configured (docs/architecture.md#one-cell)."""
    from lily_kernel.commands.runner import Runner
    from lily_kernel.session.session import Session
    runner = Runner(lambda: Session(journal=False))
    if runner.session_error is not None:
        raise LoaderError(runner.session_error)  # exit 2, as for every command here
    try:
        for result in runner.command(args.command):
            print(render.text(result))
    except CommandError as exc:
        print(exc.line(), file=sys.stderr)
        return 1
    return 0


def cmd_mcp_list(args: argparse.Namespace) -> int:
    """Start the configured MCP servers here and list their state and tools (docs/mcp.md)."""
    from lily_kernel.commands.results import McpStatus
    from lily_kernel.session.session import Session
    session = Session(journal=False)
    if session.config_error:
        print(f"Error: {session.config_error}", file=sys.stderr)
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


def cmd_mcp_import(args: argparse.Namespace) -> int:
    """Print the lily.toml tables for a Claude Code / Cursor / notebook-intelligence
    ``.mcp.json`` or a jupyter-ai ``mcp_settings.json``."""
    from pathlib import Path

    from lily_kernel.errors import ConfigError
    from lily_kernel.mcp.config import read_mcp_json, to_toml
    try:
        if not Path(args.file).is_file():
            raise ConfigError(f"{args.file}: no such file")
        print(to_toml(read_mcp_json(Path(args.file))), end="")
    except ConfigError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lily", description="Lily: skills for Jupyter.")
    sub = p.add_subparsers(dest="group", required=True)

    skills = sub.add_parser("skills", help="inspect and validate skills")
    ssub = skills.add_subparsers(dest="action", required=True)
    lst = ssub.add_parser("list", help="list the skills the kernel would load here")
    lst.add_argument("--all", action="store_true", help="also list excluded skills and why")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=cmd_list)
    ssub.add_parser("check", help="print every diagnostic; exit 1 on skill errors").set_defaults(func=cmd_check)
    info = ssub.add_parser("info", help="show one skill")
    info.add_argument("name")
    info.set_defaults(func=cmd_info)
    val = ssub.add_parser("validate", help="validate skill folders")
    rules = val.add_mutually_exclusive_group()
    rules.add_argument("--strict", action="store_true",
                       help="the Agent Skills specification exactly (only its six fields)")
    rules.add_argument("--lily", action="store_true",
                       help="what Lily would load here: the loader's reasons, eligibility, notes")
    val.add_argument("paths", nargs="+", metavar="PATH")
    val.set_defaults(func=cmd_validate)

    kernel = sub.add_parser("kernel", help="the Jupyter kernel")
    ksub = kernel.add_subparsers(dest="action", required=True)
    inst = ksub.add_parser("install", help="install the 'lily' kernelspec")
    add_install_args(inst)
    inst.set_defaults(func=cmd_kernel_install)

    run = sub.add_parser("run", help="run one /command cell as the kernel would (a skill request goes to the model)")
    run.add_argument("command")
    run.set_defaults(func=cmd_run)

    mcp = sub.add_parser("mcp", help="MCP tool servers")
    msub = mcp.add_subparsers(dest="action", required=True)
    mlist = msub.add_parser("list", help="start the configured servers and list their tools")
    mlist.add_argument("--json", action="store_true", help="print one JSON object")
    mlist.set_defaults(func=cmd_mcp_list)
    mimp = msub.add_parser("import", help="print a .mcp.json's servers as lily.toml tables")
    mimp.add_argument("file")
    mimp.set_defaults(func=cmd_mcp_import)
    return p


def add_install_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument("--sys-prefix", action="store_true", help="install into sys.prefix (a venv)")
    where.add_argument("--prefix", metavar="PATH", help="install under PATH")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except LoaderError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`lily skills list --json | head`): stop quietly, as Unix
        # tools do. stdout is pointed at devnull so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
