"""The sandboxed child's system-call filter (docs/sandbox.md#what-the-child-can-and-cannot-do).

Landlock (tools/confinement.py) governs paths, TCP and scopes; this seccomp filter closes
what it leaves open. A call of another architecture kills the child; the denied calls
fail with ``EPERM``; ``clone`` makes threads only; ``clone3`` fails with ``ENOSYS`` (the C
library falls back to ``clone``); a few calls act on the child itself only. Known for
x86-64 and arm64 (:data:`MACHINES`); elsewhere the sandbox is unavailable.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

# seccomp (include/uapi/linux/seccomp.h, filter.h, audit.h)
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06
_CLONE_THREAD = 0x00010000


@dataclass(frozen=True)
class _Machine:
    audit_arch: int
    clone: int
    clone3: int
    denied: Mapping[str, int]  # system call -> its number on this machine: EPERM
    self_only: Mapping[str, int]  # allowed only on the child itself (first argument 0)
    x32: bool = False  # x86_64: refuse the x32 numbering (bit 30) too


# What Landlock leaves open, closed here: processes, programs and sockets; ptrace and other
# processes' memory; file modes, owners, times and extended attributes (Landlock does not
# govern them); System V and POSIX IPC; other processes' priority, limits and CPUs;
# io_uring (a second way to every call), BPF, the keyring, namespaces.
_X86_64 = {
    "socket": 41, "fork": 57, "vfork": 58, "execve": 59, "ptrace": 101, "setpgid": 109,
    "setsid": 112, "mount": 165, "add_key": 248, "request_key": 249, "keyctl": 250,
    "unshare": 272, "perf_event_open": 298, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "pidfd_getfd": 438,
    "open_by_handle_at": 304, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93,
    "lchown": 94, "fchownat": 260, "fchmodat": 268, "fchmodat2": 452, "utime": 132,
    "utimes": 235, "futimesat": 261, "utimensat": 280, "setxattr": 188, "lsetxattr": 189,
    "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    "setxattrat": 463, "removexattrat": 466, "shmget": 29, "shmat": 30, "shmctl": 31,
    "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67, "msgget": 68, "msgsnd": 69,
    "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240, "mq_unlink": 241,
    "mq_timedsend": 242, "setpriority": 141, "ioprio_set": 251}
_AARCH64 = {
    "socket": 198, "execve": 221, "ptrace": 117, "setpgid": 154, "setsid": 157, "mount": 40,
    "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97, "perf_event_open": 241,
    "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280,
    "execveat": 281, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "pidfd_getfd": 438, "open_by_handle_at": 265, "fchmod": 52,
    "fchmodat": 53, "fchownat": 54, "fchown": 55, "fchmodat2": 452, "utimensat": 88,
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
    "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466, "msgget": 186, "msgctl": 187,
    "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191, "semtimedop": 192,
    "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197, "mq_open": 180,
    "mq_unlink": 181, "mq_timedsend": 182, "setpriority": 140, "ioprio_set": 30}
MACHINES = {
    "x86_64": _Machine(0xC000003E, 56, 435, _X86_64, {
        "prlimit64": 302, "sched_setparam": 142, "sched_setscheduler": 144,
        "sched_setaffinity": 203, "sched_setattr": 314}, x32=True),
    "aarch64": _Machine(0xC00000B7, 220, 435, _AARCH64, {
        "prlimit64": 261, "sched_setparam": 118, "sched_setscheduler": 119,
        "sched_setaffinity": 122, "sched_setattr": 274}),
}
MACHINES["arm64"] = MACHINES["aarch64"]


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Filter))]


def filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The seccomp filter: another architecture's calls kill; the denied calls fail with
    EPERM; ``clone`` only for a thread; ``clone3`` ENOSYS (the C library falls back to clone)."""
    m = MACHINES[machine]
    eperm = _RET_ERRNO | errno.EPERM
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, m.audit_arch), (_RET, 0, 0, _RET_KILL_PROCESS),
            (_LD_ABS, 0, 0, 0)]
    if m.x32:
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _RET_KILL_PROCESS)]
    for number in m.denied.values():
        prog += [(_JEQ, 0, 1, number), (_RET, 0, 0, eperm)]
    for number in m.self_only.values():  # the pid (first argument, low half) must be 0
        prog += [(_JEQ, 0, 4, number), (_LD_ABS, 0, 0, 16), (_JEQ, 1, 0, 0),
                 (_RET, 0, 0, eperm), (_RET, 0, 0, _RET_ALLOW)]
    prog += [(_JEQ, 0, 1, m.clone3), (_RET, 0, 0, _RET_ERRNO | errno.ENOSYS),
             (_JEQ, 0, 3, m.clone), (_LD_ABS, 0, 0, 16), (_JSET, 1, 0, _CLONE_THREAD),
             (_RET, 0, 0, eperm), (_RET, 0, 0, _RET_ALLOW)]
    return prog


def install(libc: ctypes.CDLL) -> None:
    """Install :func:`filter_program` for this machine on this (single-threaded) process."""
    prog = filter_program(platform.machine())
    filters = (_Filter * len(prog))(*(_Filter(*ins) for ins in prog))
    program = _Program(len(prog), filters)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_SECCOMP): {os.strerror(code)}")
