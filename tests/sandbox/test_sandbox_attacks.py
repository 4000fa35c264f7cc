"""Attacks on the sandbox (docs/sandbox.md#what-the-child-can-and-cannot-do), each run as the
model's code would be: the child prints MARK first (the ``run`` fixture checks it), then
tries; the test judges what reached this process, the disk, the network or the secrets.
"""
from __future__ import annotations

import ctypes
import os
import platform
import signal
import socket
import threading
from pathlib import Path

import pytest
from sandbox_support import FAKE_KEY, MARK, children, needs_sandbox, open_fds

from lily_kernel.tools import sandbox, sandboxed_code

pytestmark = needs_sandbox


def tried(result: sandboxed_code.CodeResult) -> list[str]:
    """The lines the attack printed after MARK."""
    assert result.status is sandbox.Status.DONE, result
    return result.output.splitlines()[1:]


ATTEMPT = """
def attempt(name, fn):
    try:
        fn()
        print(name, 'DONE')
    except BaseException as exc:
        print(name, 'refused', type(exc).__name__)
"""


# -- writes outside the scratch folder ------------------------------------------------------

def test_no_write_outside_the_scratch_folder_by_any_python_route(run, world):
    target = world.outside / "planted.py"
    victim = world.workspace / "data.csv"
    code = ATTEMPT + f"""
import os, shutil, pathlib
attempt('open', lambda: open({str(target)!r}, 'w').write('x'))
attempt('open-workspace', lambda: open('new.txt', 'w'))
attempt('append', lambda: open('data.csv', 'a').write('5,6'))
attempt('truncate', lambda: open('data.csv', 'r+').truncate(0))
attempt('os.open', lambda: os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))
attempt('rename', lambda: os.rename('data.csv', {str(world.outside / 'moved.csv')!r}))
attempt('unlink', lambda: os.unlink('data.csv'))
attempt('mkdir', lambda: os.mkdir('made'))
attempt('symlink', lambda: os.symlink('/etc/passwd', 'link'))
attempt('link', lambda: os.link('data.csv', {str(world.outside / 'hard.csv')!r}))
attempt('chmod', lambda: os.chmod('data.csv', 0o777))
attempt('utime', lambda: os.utime('data.csv', (0, 0)))
attempt('shutil.copy', lambda: shutil.copy('data.csv', {str(target)!r}))
attempt('shutil.rmtree', lambda: shutil.rmtree({str(world.home)!r}))
attempt('pathlib', lambda: pathlib.Path({str(target)!r}).write_text('x'))
attempt('home', lambda: open({str(world.home / '.bashrc')!r}, 'a').write('evil'))
attempt('mkfifo', lambda: os.mkfifo({str(world.outside / 'fifo')!r}))
attempt('chown', lambda: os.chown('data.csv', 0, 0))
attempt('setxattr', lambda: os.setxattr('data.csv', 'user.lily', b'x'))
attempt('removexattr', lambda: os.removexattr('data.csv', 'user.lily'))
"""
    before = os.stat(victim)
    lines = tried(run(code))
    after = os.stat(victim)
    assert (after.st_mode, after.st_mtime_ns, after.st_uid) == \
        (before.st_mode, before.st_mtime_ns, before.st_uid)
    assert len(lines) == 20 and [line for line in lines if " refused " not in line] == []
    assert sorted(p.name for p in world.outside.iterdir()) == []
    assert victim.read_text() == "x,y\n1,2\n3,4\n"
    assert sorted(p.name for p in world.workspace.iterdir()) == [".env", "data.csv"]
    assert not (world.home / ".bashrc").exists()


def test_no_write_by_pandas_to_csv(run, world):
    pytest.importorskip("pandas")
    import pandas  # noqa: F401  (the kernel has it: the child uses the parent's copy)
    code = ATTEMPT + f"""
import pandas as pd
df = pd.read_csv('data.csv')
print(int(df.x.sum()))
attempt('to_csv', lambda: df.to_csv({str(world.outside / 'out.csv')!r}))
attempt('to_csv-workspace', lambda: df.to_csv('data.csv'))
attempt('to_pickle', lambda: df.to_pickle('df.pkl'))
"""
    assert tried(run(code)) == ["4", "to_csv refused PermissionError",
                                "to_csv-workspace refused PermissionError",
                                "to_pickle refused PermissionError"]
    assert list(world.outside.iterdir()) == []
    assert (world.workspace / "data.csv").read_text() == "x,y\n1,2\n3,4\n"


def test_no_program_runs_so_no_write_through_one(run, world):
    target = world.outside / "by-shell"
    code = ATTEMPT + f"""
import os, subprocess
attempt('subprocess', lambda: subprocess.run(['touch', {str(target)!r}], check=True))
attempt('os.system', lambda: print('status', os.system('touch {target}')))
attempt('popen', lambda: os.popen('touch {target}').read())
attempt('execv', lambda: os.execv('/bin/sh', ['sh', '-c', 'touch {target}']))
attempt('fork', lambda: os.fork())
attempt('posix_spawn', lambda: os.posix_spawn('/bin/touch', ['touch', {str(target)!r}], {{}}))
import shutil, stat
def copied_binary():
    mine = os.path.join(os.environ['TMPDIR'], 'touch')
    shutil.copy('/bin/touch', mine)
    os.chmod(mine, 0o755)
    os.execv(mine, [mine, {str(target)!r}])
attempt('exec-from-scratch', copied_binary)
"""
    lines = tried(run(code))
    assert lines[0] == "subprocess refused PermissionError"
    assert lines[1] in ("status 32512", "status -1", "os.system DONE") or "refused" in lines[1]
    assert all("refused" in line for line in lines[2:] if not line.startswith(("status", "os.")))
    assert not target.exists()


def test_no_write_by_raw_system_calls_through_ctypes(run, world):
    if platform.machine() != "x86_64":
        pytest.skip("the system call numbers below are x86-64's")
    target = world.outside / "raw"
    code = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(257, -100, {str(target).encode()!r}, os.O_WRONLY | os.O_CREAT, 0o644)
print('openat', fd, ctypes.get_errno())
r = libc.syscall(82, b'data.csv', {str(world.outside / 'renamed').encode()!r})
print('rename', r, ctypes.get_errno())
r = libc.syscall(87, b'data.csv')
print('unlink', r, ctypes.get_errno())
r = libc.syscall(41, 2, 1, 0)
print('socket', r, ctypes.get_errno())
r = libc.syscall(57)
print('fork', r, ctypes.get_errno())
"""
    assert tried(run(code)) == ["openat -1 13", "rename -1 13",
                                "unlink -1 13", "socket -1 1", "fork -1 1"]
    assert list(world.outside.iterdir()) == []


# -- secrets ---------------------------------------------------------------------------------

def test_the_users_secrets_cannot_be_read(run, world):
    code = ATTEMPT + f"""
import os
attempt('ssh-key', lambda: print(open({str(world.home / '.ssh' / 'id_rsa')!r}).read()))
attempt('list-ssh', lambda: print(os.listdir({str(world.home / '.ssh')!r})))
attempt('netrc', lambda: print(open({str(world.home / '.netrc')!r}).read()))
attempt('aws', lambda: print(open({str(world.home / '.aws' / 'credentials')!r}).read()))
attempt('config', lambda: print(os.listdir({str(world.home / '.config')!r})))
attempt('dotenv', lambda: print(open('.env').read()))
attempt('environ', lambda: print(open('/proc/self/environ').read()))
attempt('parent-environ', lambda: print(open('/proc/%d/environ' % os.getppid()).read()))
attempt('shadow', lambda: print(open('/etc/shadow').read()))
"""
    result = run(code)
    lines = tried(result)
    assert len(lines) == 9 and [line for line in lines if " refused " not in line] == []
    for secret in ("fake-key", "hunter2", "aws_secret", "sk-from-dotenv", "id_rsa"):
        assert secret not in result.output


def test_a_workspace_that_is_the_home_folder_shows_its_files_not_its_dotfiles(world, monkeypatch):
    monkeypatch.chdir(world.home)
    result = sandboxed_code.run_code(
        f"print({MARK!r})\nprint(open('notes.txt').read().strip())\n"
        "try:\n    open('.ssh/id_rsa').read()\nexcept OSError as exc:\n    print(type(exc).__name__)\n",
        {}, workspace=world.home)
    assert result.printed.splitlines() == [MARK, "not a secret", "PermissionError"]
    assert FAKE_KEY.splitlines()[1] not in result.output


def test_no_key_or_token_is_left_in_the_environment(run, monkeypatch):
    for name, value in (("OPENAI_API_KEY", "sk-test-openai"), ("GITHUB_TOKEN", "ghp-test"),
                        ("DB_PASSWORD", "pw-test"), ("AWS_SECRET_ACCESS_KEY", "aws-test"),
                        ("LILY_OUTBOX_TOKEN", "lily-test"), ("LILY_POLICY_FILE", "/p"),
                        ("PYTHON_KEYRING_BACKEND", "kr-test"), ("LANG", "C.UTF-8")):
        monkeypatch.setenv(name, value)
    code = """
import os, posix, ctypes
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'PASS' in k or 'LILY' in k))
print(sorted(k for k in posix.environ if b'KEY' in k or b'TOKEN' in k or b'LILY' in k))
print(libc.getenv(b'OPENAI_API_KEY'), libc.getenv(b'GITHUB_TOKEN'), os.getenv('DB_PASSWORD'))
print(os.environ.get('LANG'), os.environ['HOME'] == os.environ['TMPDIR'])
"""
    result = run(code)
    assert tried(result) == ["[]", "[]", "None None None", "C.UTF-8 True"]
    assert "-test" not in result.output


def test_the_kernels_original_environment_is_wiped_from_the_childs_memory(world):
    """The strings a process started with stay at the top of its stack after os.environ and
    the C library forget them; a walk from program_invocation_name (argv[0]) reaches them.
    A fresh process holds the secret in its start block; its sandboxed child walks there."""
    import subprocess
    import sys
    code = """
import ctypes
libc = ctypes.CDLL(None)
addr = ctypes.c_void_p.in_dll(libc, 'program_invocation_name').value
seen, end = [], addr + LIMIT  # the start block's size: not one byte past (a crash)
while addr < end:
    s = ctypes.string_at(addr)
    seen.append(s)
    addr += len(s) + 1
print('walked', any(s.startswith(b'PA' + b'TH=') for s in seen),
      any(s.endswith(b'-in-the-' + b'start-block') for s in seen))
"""
    parent = ("import sys\nfrom lily_kernel.tools import sandboxed_code as s\n"
              "print(s.run_code(sys.stdin.read(), {}).output)")
    env = {**os.environ, "MY_SECRET_TOKEN": "a-key-in-the-start-block"}
    argv = [sys.executable, "-c", parent]
    size = sum(len(a.encode()) + 1 for a in argv[1:]) + sum(
        len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())
    probe = subprocess.run(argv, input=code.replace("LIMIT", str(size)), capture_output=True,
                           text=True, timeout=120, cwd=world.workspace, env=env)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "walked False False"


# -- network ---------------------------------------------------------------------------------

def test_no_socket_reaches_a_server_of_this_machine(run, world):
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.5)
    path = str(world.outside / "unix.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    unix.listen()
    tcp.settimeout(0.5)
    unix.settimeout(0.5)
    code = ATTEMPT + f"""
import socket
attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {tcp.getsockname()[1]}), 2))
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
    b'leak', ('127.0.0.1', {udp.getsockname()[1]})))
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.connect({path!r})
attempt('unix', unix)
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.connect('\\0lily-abstract')
attempt('abstract', abstract)
attempt('bind', lambda: socket.create_server(('0.0.0.0', 0)))
attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
attempt('socketpair', lambda: socket.socketpair())
"""
    try:
        lines = tried(run(code))
        for sock in (tcp, unix):
            with pytest.raises(TimeoutError):
                sock.accept()
        with pytest.raises(TimeoutError):
            udp.recvfrom(10)
    finally:
        for sock in (tcp, udp, unix):
            sock.close()
    assert lines[:5] == ["tcp refused PermissionError", "udp refused PermissionError",
                         "unix refused PermissionError", "abstract refused PermissionError",
                         "bind refused PermissionError"]
    assert lines[5].startswith("dns refused")
    assert lines[6] == "socketpair DONE"  # a pair of its own: it reaches nothing


# -- the parent and the machine -------------------------------------------------------------

def test_no_signal_reaches_the_parent(run):
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda n, f: got.append(n))
    try:
        code = ATTEMPT + """
import os, signal
attempt('kill', lambda: os.kill(os.getppid(), signal.SIGUSR1))
attempt('kill-0', lambda: os.kill(os.getppid(), 0))
"""
        lines = tried(run(code))
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert got == []  # (killpg and kill(-1) are not tried: on a failure they reach others)
    assert lines == ["kill refused PermissionError",
                     "kill-0 refused PermissionError"]


def test_no_change_to_the_parents_limits_priority_or_cpus(run):
    import resource
    limits, nice, cpus = resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(
        os.PRIO_PROCESS, 0), os.sched_getaffinity(0)
    code = ATTEMPT + """
import os, resource
parent = os.getppid()
attempt('prlimit', lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, (10, 10)))
attempt('renice', lambda: os.setpriority(os.PRIO_PROCESS, parent, 19))
attempt('renice-user', lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt('affinity', lambda: os.sched_setaffinity(parent, {0}))
attempt('own-limit', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
attempt('own-affinity', lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
"""
    lines = tried(run(code))
    assert lines == ["prlimit refused PermissionError", "renice refused PermissionError",
                     "renice-user refused PermissionError", "affinity refused PermissionError",
                     "own-limit DONE", "own-affinity DONE"]
    assert (resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getaffinity(0)) == (limits, nice, cpus)


def test_no_ipc_object_is_made_or_reached(run):
    code = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('shmget', libc.shmget(0, 4096, 0o1666), ctypes.get_errno())
print('msgget', libc.msgget(0, 0o1666), ctypes.get_errno())
print('semget', libc.semget(0, 1, 0o1666), ctypes.get_errno())
"""
    assert tried(run(code)) == ["shmget -1 1", "msgget -1 1", "semget -1 1"]


def test_no_ptrace_of_the_parent_nor_its_memory(run):
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
r = libc.ptrace(16, os.getppid(), None, None)  # PTRACE_ATTACH
print('attach', r, ctypes.get_errno())
try:
    print(open('/proc/%d/mem' % os.getppid(), 'rb').read(1))
except OSError as exc:
    print('mem', type(exc).__name__)
try:
    print(os.listdir('/proc/%d/fd' % os.getppid()))
except OSError as exc:
    print('fds', type(exc).__name__)
"""
    assert tried(run(code)) == ["attach -1 1", "mem PermissionError", "fds PermissionError"]


def test_a_fork_bomb_is_refused_at_the_first_fork(run):
    kids = children()
    result = run("import os\nn = 0\ntry:\n    while True:\n        os.fork()\n        n += 1\n"
                 "except OSError as exc:\n    print(n, type(exc).__name__)")
    assert tried(result) == ["0 PermissionError"]
    assert children() == kids


def test_a_thread_bomb_stops_at_the_task_or_memory_limit(run):
    """RLIMIT_NPROC stops it for a user; root is exempt from it, and the address space
    (each thread's stack) stops it there."""
    result = run("import threading, time\nn = 0\ntry:\n    for _ in range(10_000):\n"
                 "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                 "        n += 1\nexcept RuntimeError as exc:\n    print('stopped', n < 10_000)\n",
                 tasks=32, memory=512 << 20)
    assert tried(result) == ["stopped True"]


def test_a_memory_bomb_raises_memory_error(run):
    result = run("try:\n    x = bytearray(64 << 30)\nexcept MemoryError:\n    print('refused')\n"
                 "y = [0] * (1 << 40)\n")
    assert tried(result) == ["refused"]
    assert result.error is not None and result.error.ename == "MemoryError"


def test_an_endless_loop_is_killed_at_the_wall_clock(run, world):
    fds, kids = open_fds(), children()
    result = run("while True:\n    pass", seconds=1)
    assert result.status is sandbox.Status.TIMEOUT
    assert result.detail == "the code ran longer than 1 s"
    assert (open_fds(), children(), world.leftovers()) == (fds, kids, [])


def test_the_cpu_limit_ends_a_busy_child(run):
    result = run("import threading\ndef spin():\n    while True:\n        pass\n"
                 "for _ in range(2):\n    threading.Thread(target=spin, daemon=True).start()\n"
                 "spin()", seconds=30, cpu_seconds=1)
    assert result.status is sandbox.Status.ENDED
    assert result.detail == "the code used its 1 s of CPU time"


def test_an_output_flood_is_bounded(run):
    result = run("import sys\nfor i in range(300_000):\n    sys.stdout.write(f'flood {i}\\n')\n")
    assert result.status is sandbox.Status.DONE
    assert len(result.output) <= sandboxed_code.OUTPUT_CHARS + 100
    assert "characters cut" in result.output and result.output.endswith("flood 299999")


def test_threads_left_running_end_with_the_child(run):
    kids = children()
    result = run("import threading, time\n"
                 "threading.Thread(target=lambda: time.sleep(3600)).start()\n"
                 "print('left one')")
    assert tried(result) == ["left one"]
    assert children() == kids


def test_a_child_that_never_exits_is_killed(run, world):
    kids = children()
    code = ("import os, signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_IGN)\nos.close(3)\ntime.sleep(3600)")
    result = run(code, seconds=1)
    assert result.status in (sandbox.Status.TIMEOUT, sandbox.Status.ENDED)
    assert children() == kids and world.leftovers() == []


def test_a_child_that_exits_by_itself_says_so(run):
    result = run("import os\nos._exit(3)")
    assert result.status is sandbox.Status.ENDED
    assert result.detail == "the code ended the process (exit status 3) with no result"


def test_an_interrupt_during_a_run_kills_the_child_and_is_raised_again(run, world):
    fds, kids = open_fds(), children()
    main = threading.get_ident()
    # Python's own SIGINT handler, as a kernel's interrupt has it (not one another test left)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run("while True:\n    pass", seconds=60)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert (open_fds(), children(), world.leftovers()) == (fds, kids, [])


def test_two_runs_at_once_are_serialised_and_both_answer(run, world):
    results: dict[int, sandboxed_code.CodeResult] = {}

    def one(n: int) -> None:
        results[n] = run(f"import time\ntime.sleep(0.3)\nprint({n} * 7)")

    threads = [threading.Thread(target=one, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {n: tried(r) for n, r in results.items()} == {0: ["0"], 1: ["7"], 2: ["14"]}
    assert world.leftovers() == []


def test_the_child_cannot_reach_a_descriptor_the_parent_holds(run, world):
    secret_file = world.outside / "held.txt"
    secret_file.write_text("held-by-the-parent")
    held = os.open(secret_file, os.O_RDWR)
    try:
        result = run(f"import os\ntry:\n    print(os.read({held}, 100))\n"
                     f"except OSError as exc:\n    print(type(exc).__name__)\n"
                     f"print(sorted(os.listdir('/proc/self/fd')) if os.path.exists("
                     f"'/proc/self/fd') else 'no /proc/self')")
    finally:
        os.close(held)
    lines = tried(result)
    assert lines[0] == "OSError"
    assert "held-by-the-parent" not in result.output
    assert secret_file.read_text() == "held-by-the-parent"


def test_a_result_larger_than_the_cap_is_refused(run):
    result = run("import sys\nprint('x' * 100)", result_bytes=10)
    assert result.status is sandbox.Status.TOO_LARGE
    assert result.detail == "its result passed 10 bytes"


def test_the_secrets_are_not_granted_even_when_the_workspace_holds_them(world):
    from lily_kernel.tools import confinement
    plan = confinement.plan(world.workspace, Path("/tmp/scratch-x"))
    assert str(world.workspace / ".env") not in plan.read
    assert str(world.workspace / "data.csv") in plan.read
    assert not any(p.startswith(str(world.home)) for p in plan.read)
    home_plan = confinement.plan(world.home, Path("/tmp/scratch-x"))
    assert str(world.home / "notes.txt") in home_plan.read
    assert not any(".ssh" in p or ".aws" in p or ".netrc" in p for p in home_plan.read)
    assert ctypes.sizeof(ctypes.c_void_p) in (4, 8)


def test_a_forged_result_is_not_taken_for_the_sandboxs(run):
    result = run("import json\njson.dumps = lambda *a, **k: '{\"ok\": {\"error\": {\"x\": 1}}}'")
    assert result.status is sandbox.Status.ENDED
    assert result.detail == "the child's result was not the sandbox's"


def test_a_replaced_os_exit_does_not_keep_the_child_alive(run, world):
    kids = children()
    result = run("import os, sys\nos._exit = lambda code: None\nsys.exit = lambda *a: None\n"
                 "print('patched')")
    assert tried(result) == ["patched"]
    assert children() == kids and world.leftovers() == []


def test_what_the_code_writes_to_the_result_pipe_itself_is_not_believed(run):
    result = run("import os\nos.write(3, b'\"okay\"')\nos._exit(0)")
    assert result.status is sandbox.Status.ENDED
    assert result.detail == "the code ended the process (exit status 0) with no result"
