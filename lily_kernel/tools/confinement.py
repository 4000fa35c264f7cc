"""What a sandboxed child does to itself before it runs anything (docs/sandbox.md).

The parent (tools/sandbox.py) forks; the child calls :func:`confine` and only then runs the
model's code. Everything here is standard library and Linux system calls through ctypes:

- :func:`plan` (in the parent): the paths the child may read — the workspace, the Python
  installation, the system's libraries — each split around the user's secrets (every hidden
  entry of ``$HOME`` and of the workspace, Lily's data and configuration folders), because
  Landlock only grants: a folder that holds a secret is never granted whole, its other
  entries are; and the one folder it may write, the run's scratch folder.
- :func:`confine` (in the child): its own process group; every inherited descriptor closed
  but the result pipe; an environment with no key, token or Lily variable; rlimits (CPU,
  address space, tasks, file size, open files); ``PR_SET_NO_NEW_PRIVS``; no capability
  (a kernel run as root has them all); a Landlock domain
  (read-only where planned, read-write in the scratch folder, no execution anywhere, no TCP
  bind or connect, no abstract Unix socket or signal outside the domain); the seccomp
  filter of tools/syscall_filter.py (no socket, no new process, no exec, no ptrace, no
  change of a file's mode, owner, times or attributes — Landlock does not govern those —,
  no IPC object, no io_uring, no keyring, no namespace, nothing done to another process).

:func:`unavailable` says in one line why this machine cannot do it (not Linux, no Landlock
or an ABI below :data:`MIN_ABI`, an unknown CPU architecture for the filter).
"""
from __future__ import annotations

import ctypes
import os
import platform
import re
import signal
import stat
import struct
import sys
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from lily_kernel.redaction import SECRET_NAME
from lily_kernel.tools import syscall_filter

MIN_ABI = 6  # Landlock ABI 6 (Linux 6.12): scopes for abstract Unix sockets and signals

# Landlock (include/uapi/linux/landlock.h)
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_TRUNCATE = 1 << 14
_FS_ALL = (1 << 16) - 1  # every filesystem right up to IOCTL_DEV (ABI 5)
_NET_ALL = 0b11  # BIND_TCP, CONNECT_TCP (ABI 4)
_SCOPE_ALL = 0b11  # ABSTRACT_UNIX_SOCKET, SIGNAL (ABI 6)
_READ_DIR_RIGHTS = _FS_READ_FILE | _FS_READ_DIR
_SCRATCH_RIGHTS = _FS_ALL & ~_FS_EXECUTE
_LANDLOCK_NR = (444, 445, 446)  # create_ruleset, add_rule, restrict_self: one number everywhere

_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4


#: Environment variables the child keeps (when their name looks like no secret); every
#: other one, ``OPENAI_API_KEY`` and ``LILY_*`` included, is gone before the code runs.
KEPT_ENV = re.compile(r"PATH|LANG|LANGUAGE|LC_\w+|TZ|TERM|COLUMNS|LINES|PYTHON\w*|OMP_\w+|"
                      r"MKL_\w+|OPENBLAS_\w+|NUMEXPR_\w+|MPLBACKEND|VIRTUAL_ENV|CONDA_PREFIX")
#: Files of the system the child may read (the rest of /etc, /proc, /sys and /dev, /opt,
#: /run, /tmp and /home: no; the Python installation is added wherever it lies).
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/localtime",
               "/etc/timezone", "/etc/fonts", "/etc/matplotlibrc", "/etc/ld.so.cache",
               "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types",
               "/etc/os-release", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
               "/sys/devices/system/cpu", "/dev/urandom", "/dev/random", "/dev/zero")


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    seconds: float = 30.0  # wall clock, enforced by the parent (SIGKILL of the group)
    cpu_seconds: int = 30  # RLIMIT_CPU
    memory: int = 2 << 30  # bytes of address space beyond what the kernel already maps
    tasks: int = 32  # threads beyond the machine's count at the start (RLIMIT_NPROC)
    file_size: int = 64 << 20  # RLIMIT_FSIZE: the largest file written in the scratch folder
    open_files: int = 256  # RLIMIT_NOFILE
    result_bytes: int = 4 << 20  # the serialised result read from the child, at most


@dataclass(frozen=True)
class Plan:
    """What the child may reach: read-only paths (folders and files) and its scratch folder."""

    read: tuple[str, ...]
    scratch: str
    workspace: str
    matplotlib: str | None = None  # matplotlib's cache (its font list), read-only


# -- probing -----------------------------------------------------------------------------

def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or turned off."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(_LANDLOCK_NR[0]), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


def unsupported() -> str | None:
    """Why this machine cannot confine a child, in one line; None when it can."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux (Landlock); this is {sys.platform}"
    if platform.machine() not in syscall_filter.MACHINES:
        return f"the sandbox has no system-call filter for this machine ({platform.machine()})"
    abi = landlock_abi()
    if abi == 0:
        return "this Linux kernel has no Landlock (missing, or not in the lsm= boot list)"
    if abi < MIN_ABI:
        return (f"this Linux kernel's Landlock is ABI {abi}; the sandbox needs ABI {MIN_ABI} "
                "(Linux 6.12 or later)")
    return None


# -- the plan (in the parent) --------------------------------------------------------------

def secrets(workspace: str, env: Mapping[str, str]) -> set[str]:
    """What the child must not read (real paths): every hidden entry of the home folder and
    of the workspace (``~/.ssh``, ``~/.config``, ``~/.aws``, ``~/.netrc``, ``.lily/``,
    ``.env``, ``.git``), Lily's data and configuration folders, the XDG folders."""
    found: set[str] = set()
    for folder in {env.get("HOME") or None, os.path.expanduser("~"), workspace}:
        if folder:
            with suppress(OSError):
                found.update(e.path for e in os.scandir(folder) if e.name.startswith("."))
    for var in ("LILY_DATA_DIR", "LILY_POLICY_FILE", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "JUPYTER_RUNTIME_DIR",
                "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR", "SKILLS_USER_DIR"):
        if env.get(var):
            found.add(os.path.expanduser(env[var]))
    return {os.path.realpath(p) for p in found}


def _grants(path: str, hidden: set[str]) -> list[str]:
    """``path`` whole when no secret lies below it, else its entries each the same way (a
    link is skipped: a read through it is checked where it leads). A path inside a secret
    is granted when asked by name (the workspace or a ``.venv`` inside a hidden folder)."""
    return list(_split(path, {s for s in hidden if s.startswith(path.rstrip("/") + "/")}, 0))


def _split(path: str, inside: set[str], depth: int) -> Iterable[str]:
    if path in inside or depth > 8:
        return
    prefix = path.rstrip("/") + "/"
    if not any(s.startswith(prefix) for s in inside):
        yield path
        return
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if not entry.is_symlink():
            yield from _split(entry.path, inside, depth + 1)


def plan(workspace: Path, scratch: Path, env: Mapping[str, str] | None = None) -> Plan:
    """The paths a child of this process may read, and its scratch folder."""
    env = os.environ if env is None else env
    real = os.path.realpath(workspace)
    hidden = secrets(real, env)
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              *(p for p in sys.path if p)}
    read: list[str] = []
    for raw in python:
        read += _grants(os.path.realpath(raw), hidden)  # split where it holds $HOME
    read += _grants(real, hidden)
    read += [p for p in SYSTEM_READ if os.path.exists(p)]
    # matplotlib's font list, so a first plot in the child does not rebuild it (seconds)
    mpl = env.get("MPLCONFIGDIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache"), "matplotlib")
    mpl = os.path.realpath(os.path.expanduser(mpl))
    mpl_dir = mpl if os.path.isdir(mpl) else None
    return Plan(tuple(dict.fromkeys(p for p in [*read, *([mpl] if mpl_dir else [])]
                                    if os.path.exists(p))), str(scratch), real, mpl_dir)


# -- confining (in the child) --------------------------------------------------------------

def confine(the_plan: Plan, limits: Limits) -> None:
    """Confine this (forked, single-threaded) process, after :func:`keep_only`. Raises
    ``OSError``: then nothing may run."""
    try:
        _scrub_environment(the_plan)
        _set_limits(limits)
        libc = _libc()
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _oserror("prctl(PR_SET_NO_NEW_PRIVS)")
        _drop_capabilities(libc)
        _landlock(libc, the_plan)
        syscall_filter.install(libc)
        os.chdir(the_plan.workspace)
    except OSError as exc:
        raise OSError(exc.errno or 0, f"the sandbox could not start: {exc}") from exc


def _oserror(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def keep_only(keep: int, scratch: str) -> int:
    """In the child, first: its own process group; every inherited descriptor closed (the
    kernel's ZeroMQ sockets, its files) but the result pipe, moved to 3 and returned; 0
    reads /dev/null, 1 and 2 write a file in the scratch folder."""
    os.setpgid(0, 0)
    fd = os.dup2(keep, 3, inheritable=False) if keep != 3 else keep
    os.closerange(4, 1 << 20)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    out = os.open(os.path.join(scratch, ".stdio"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for extra in {null, out} - {0, 1, 2, 3}:
        os.close(extra)
    return fd


def _scrub_environment(the_plan: Plan) -> None:
    """Only :data:`KEPT_ENV` names stay (never one that looks like a secret), in
    ``os.environ``, ``posix.environ`` and the C library's own; home and temp: scratch."""
    scratch = the_plan.scratch
    kept = {k: v for k, v in os.environ.items()
            if KEPT_ENV.fullmatch(k) and not SECRET_NAME.search(k)}
    kept.update(HOME=scratch, TMPDIR=scratch, XDG_CACHE_HOME=scratch,
                MPLCONFIGDIR=the_plan.matplotlib or scratch,
                # no new processes here: joblib (scikit-learn) is told so, instead of
                # finding out and printing a warning into every run's output
                JOBLIB_MULTIPROCESSING="0")
    os.environ.clear()  # unsetenv for each: the C library's copy too
    _libc().clearenv()
    _wipe_environment_block()
    os.environ.update(kept)
    import posix
    posix.environ.clear()
    posix.environ.update({k.encode(): v.encode() for k, v in kept.items()})
    import tempfile
    tempfile.tempdir = the_plan.scratch


def _wipe_environment_block() -> None:
    """Zero the process's original environment strings (at the top of its stack, where
    ``/proc/self/environ`` reads): cleared from ``os.environ`` and the C library, they would
    still be in the copied memory, one pointer walk from ``program_invocation_name``."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # from field 3 (state) on
    start, end = int(fields[50 - 3]), int(fields[51 - 3])  # env_start, env_end
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)


def _set_limits(limits: Limits) -> None:
    import resource  # not on Windows, where this module is imported and never confines
    with open("/proc/self/statm", "rb") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    with open("/proc/loadavg", "rb") as f:
        tasks = int(f.read().split()[3].split(b"/")[1])  # every task of the machine now
    cpu = max(1, int(limits.cpu_seconds))
    for which, soft, hard in ((resource.RLIMIT_CPU, cpu, cpu + 1),
                              (resource.RLIMIT_AS, mapped + limits.memory, None),
                              (resource.RLIMIT_NPROC, tasks + limits.tasks, None),
                              (resource.RLIMIT_FSIZE, limits.file_size, None),
                              (resource.RLIMIT_NOFILE, limits.open_files, None),
                              (resource.RLIMIT_CORE, 0, None)):
        _, old_hard = resource.getrlimit(which)
        top = old_hard if old_hard != resource.RLIM_INFINITY else soft if hard is None else hard
        resource.setrlimit(which, (min(soft, top), min(hard or soft, top)))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file too large: EFBIG, not death


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """No capability left (a kernel run as root has them all: CAP_DAC_OVERRIDE, CAP_SYS_ADMIN,
    CAP_LINUX_IMMUTABLE…); a user's kernel has none and this changes nothing."""
    header = struct.pack("=Ii", _CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two (effective, permitted, inheritable) sets, all zero
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        raise _oserror("capset")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(libc: ctypes.CDLL, the_plan: Plan) -> None:
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    create, add, restrict = _LANDLOCK_NR
    attr = struct.pack("=QQQ", _FS_ALL, _NET_ALL, _SCOPE_ALL)
    ruleset = syscall(ctypes.c_long(create), ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)),
                      ctypes.c_uint32(0))
    if ruleset < 0:
        raise _oserror("landlock_create_ruleset")
    try:
        for path in the_plan.read:
            _allow(syscall, add, ruleset, path, _READ_DIR_RIGHTS, _FS_READ_FILE)
        _allow(syscall, add, ruleset, "/dev/null", 0,
               _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE)
        _allow(syscall, add, ruleset, the_plan.scratch, _SCRATCH_RIGHTS, 0)
        if syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _oserror("landlock_restrict_self")
    finally:
        os.close(ruleset)


def _allow(syscall: object, add: int, ruleset: int, path: str, dir_rights: int,
           file_rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since the plan: nothing to grant
    try:
        rights = dir_rights if stat.S_ISDIR(os.fstat(fd).st_mode) else file_rights
        if not rights:
            return
        rule = _PathBeneath(rights, fd)
        if syscall(ctypes.c_long(add), ctypes.c_int(ruleset),  # type: ignore[operator]
                   ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise _oserror(f"landlock_add_rule({path})")
    finally:
        os.close(fd)
