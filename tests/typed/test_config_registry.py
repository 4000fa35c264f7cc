"""Config Registry: ACL boundary, transactions, audit trail, durability.

Everything runs on real SQLite files under ``tmp_path``; the crash and concurrency tests
use real child processes (``sys.executable``) and a real SIGKILL. No mocks.
"""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lily_kernel.errors import AclError, ConfigError
from lily_kernel.typed.registry import PATH_RE, AuditEntry, ConfigRegistry, covers

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def reg(tmp_path):
    r = ConfigRegistry(tmp_path / "cfg" / "config.sqlite")
    yield r
    r.close()


@pytest.fixture
def rcs(reg):
    """The seed's example ACL: read the whole rcs subtree, write one flag."""
    return reg.scoped("rcs-receipts", read=["messaging.rcs"], write=["messaging.rcs.read_receipts"])


def owner_write(reg, changes):
    """Set values as an all-powerful owner skill (test setup only)."""
    prefixes = sorted({p.split(".")[0] for p in changes})
    return reg.scoped("owner", write=prefixes).write(changes)


def child(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


# -- paths and covers() ------------------------------------------------------------------

@pytest.mark.parametrize("prefix, path, expected", [
    ("messaging.rcs", "messaging.rcs.read_receipts", True),
    ("messaging.rcs", "messaging.rcs", True),
    ("messaging", "messaging.rcs.read_receipts", True),
    ("messaging.rcs", "messaging.rcs_evil", False),
    ("messaging.rcs", "messaging.rcs_evil.read_receipts", False),
    ("messaging.rc", "messaging.rcs", False),
    ("messaging.rcs.read_receipts", "messaging.rcs", False),
    ("messaging.rcs", "messaging", False),
    ("rcs", "messaging.rcs", False),
    ("", "anything.at.all", True),
])
def test_covers_whole_segments(prefix, path, expected):
    assert covers(prefix, path) is expected


@pytest.mark.parametrize("path", ["a", "messaging.rcs.read_receipts", "a_b.c1.9", "x" * 50])
def test_path_re_accepts(path):
    assert PATH_RE.fullmatch(path)


@pytest.mark.parametrize("bad", [
    "", "Messaging.rcs", "messaging..rcs", "..", ".a", "a.", "a b", "a .b", "a-b",
    "a/b", "a.b\n", "é", "a.*",
])
def test_bad_paths_are_config_errors_naming_the_path(reg, rcs, bad):
    for call in (lambda: reg.get(bad), lambda: rcs.read(bad), lambda: rcs.write({bad: 1})):
        with pytest.raises(ConfigError) as e:
            call()
        assert repr(bad) in str(e.value)
    if bad:  # "" is the 'everything' prefix for items()/audit()
        with pytest.raises(ConfigError):
            reg.items(bad)
    assert reg.items() == {}


def test_non_string_path_is_config_error(rcs):
    with pytest.raises(ConfigError):
        rcs.write({1: True})


@pytest.mark.parametrize("bad", [{"a": 1}, [1, 2], (1,), object(), {1}, b"x", float("nan"), float("inf")])
def test_bad_values_are_config_errors_naming_them(rcs, reg, bad):
    with pytest.raises(ConfigError) as e:
        rcs.write({"messaging.rcs.read_receipts": bad})
    msg = str(e.value)
    assert "messaging.rcs.read_receipts" in msg
    assert type(bad).__name__ in msg or repr(bad) in msg
    assert reg.items() == {} and reg.audit() == []


def test_bad_value_anywhere_writes_nothing(rcs, reg):
    with pytest.raises(ConfigError):
        rcs.write({"messaging.rcs.read_receipts": True, "messaging.rcs.read_receipts.x": {"no": 1}})
    assert reg.items() == {} and reg.audit() == []


@pytest.mark.parametrize("value", ["chime", "", "ünï ✓", 0, -3, 2**53, 3.5, True, False, None])
def test_primitive_values_round_trip_with_their_type(reg, value):
    owner_write(reg, {"a.v": value})
    got = reg.get("a.v", default="absent")
    assert got == value and type(got) is type(value)
    r2 = ConfigRegistry(reg.path)
    assert type(r2.get("a.v", "absent")) is type(value)
    r2.close()


def test_bool_and_int_are_different_values(reg):
    owner_write(reg, {"a.v": 1})
    entries = owner_write(reg, {"a.v": True})
    assert [(e.old, e.new) for e in entries] == [(1, True)]
    assert reg.get("a.v") is True


def test_bad_acl_entries_are_config_errors(reg):
    for bad in ("", "Messaging", "a..b", "a.*"):
        with pytest.raises(ConfigError):
            reg.scoped("s", read=[bad])
        with pytest.raises(ConfigError):
            reg.scoped("s", write=[bad])
    with pytest.raises(ConfigError):
        reg.scoped("", write=["a"])


def test_a_lone_string_acl_is_one_path_not_its_letters(reg):
    s = reg.scoped("s", read="messaging.rcs", write="messaging.rcs.read_receipts")
    assert s.read_acl == ("messaging.rcs",)
    assert s.write_acl == ("messaging.rcs.read_receipts",)
    assert not s.can_read("m.x")


# -- the ACL matrix ----------------------------------------------------------------------

def test_acl_matrix(reg, rcs):
    owner_write(reg, {
        "messaging.rcs.read_receipts": False,
        "messaging.rcs.typing": True,
        "messaging.rcs_evil": "x",
        "messaging.sms.enabled": True,
        "display.theme": "dark",
    })
    # reads: by the read ACL and by the write ACL
    assert rcs.read("messaging.rcs.typing") is True  # read ACL only
    assert rcs.read("messaging.rcs.read_receipts") is False  # both
    assert rcs.read("messaging.rcs.missing", "dflt") == "dflt"
    assert rcs.read_all() == {"messaging.rcs.read_receipts": False, "messaging.rcs.typing": True}
    w_only = reg.scoped("w", write=["display.theme"])
    assert w_only.read("display.theme") == "dark"  # write ACL grants reading
    assert w_only.read_all() == {"display.theme": "dark"}

    # reads outside both ACLs are refused, including the look-alike sibling
    for path in ("messaging.rcs_evil", "messaging.sms.enabled", "display.theme", "messaging"):
        assert not rcs.can_read(path)
        with pytest.raises(AclError) as e:
            rcs.read(path)
        msg = str(e.value)
        assert "rcs-receipts" in msg and repr(path) in msg and "messaging.rcs" in msg

    # write: allowed by the write ACL only
    assert rcs.can_write("messaging.rcs.read_receipts")
    rcs.write({"messaging.rcs.read_receipts": True})
    assert reg.get("messaging.rcs.read_receipts") is True
    for path in ("messaging.rcs.typing",  # readable, not writable
                 "messaging.rcs",  # parent of the grant
                 "messaging.rcs_evil", "messaging.rcs.read_receipts_evil",
                 "display.theme", "brand.new.path"):
        assert not rcs.can_write(path)
        with pytest.raises(AclError) as e:
            rcs.write({path: False})
        msg = str(e.value)
        assert "rcs-receipts" in msg and repr(path) in msg and "messaging.rcs.read_receipts" in msg

    # a child of a granted path is writable (prefix match on segments)
    assert rcs.can_write("messaging.rcs.read_receipts.groups")
    assert reg.get("messaging.rcs.typing") is True
    assert reg.get("messaging.rcs_evil") == "x"
    assert reg.get("display.theme") == "dark"


def test_scope_without_acl_can_do_nothing(reg):
    owner_write(reg, {"a.b": 1})
    s = reg.scoped("nothing")
    assert s.read_all() == {}
    with pytest.raises(AclError):
        s.read("a.b")
    with pytest.raises(AclError):
        s.write({"a.b": 2})


def test_mixed_write_with_one_path_outside_acl_writes_nothing(reg, rcs):
    owner_write(reg, {"messaging.rcs.read_receipts": False, "messaging.rcs_evil": "x"})
    before_items, before_audit = reg.items(), reg.audit()
    with pytest.raises(AclError) as e:
        rcs.write({
            "messaging.rcs.read_receipts": True,  # allowed, listed first
            "messaging.rcs_evil": "pwned",
            "messaging.rcs.typing": False,  # readable only
        })
    assert "'messaging.rcs_evil'" in str(e.value) and "'messaging.rcs.typing'" in str(e.value)
    assert reg.items() == before_items
    assert reg.audit() == before_audit


def test_acl_attributes_are_read_only(rcs):
    with pytest.raises(AttributeError):
        rcs.write_acl = ("messaging",)
    with pytest.raises(AttributeError):
        rcs.skill = "other"


# -- transactions and the audit trail -----------------------------------------------------

def test_audit_trail_records_skill_time_old_new_in_order(reg):
    s = reg.scoped("notif", write=["notify"])
    t0 = time.time()
    e1 = s.write({"notify.sound": "chime", "notify.volume": 3})
    e2 = s.write({"notify.sound": "chime", "notify.volume": 5})  # sound unchanged
    e3 = reg.scoped("other", write=["notify.sound"]).write({"notify.sound": None})
    t1 = time.time()
    assert [(e.path, e.old, e.new) for e in e1] == [("notify.sound", None, "chime"), ("notify.volume", None, 3)]
    assert [(e.path, e.old, e.new) for e in e2] == [("notify.volume", 3, 5)]
    assert [(e.skill, e.path, e.old, e.new) for e in e3] == [("other", "notify.sound", "chime", None)]
    log = reg.audit()
    assert log == e1 + e2 + e3
    assert all(isinstance(e, AuditEntry) for e in log)
    assert [e.id for e in log] == sorted(e.id for e in log)
    assert all(t0 <= e.t <= t1 for e in log)
    assert e1[0].t == e1[1].t  # one transaction, one time
    assert [e.skill for e in log] == ["notif", "notif", "notif", "other"]
    assert reg.get("notify.sound", "absent") is None  # None is a stored value
    assert reg.items() == {"notify.sound": None, "notify.volume": 5}


def test_writing_the_same_value_is_not_written_or_audited(reg):
    s = reg.scoped("s", write=["a"])
    s.write({"a.x": 1, "a.y": "v"})
    assert s.write({"a.x": 1, "a.y": "v"}) == []
    assert s.write({}) == []
    assert len(reg.audit()) == 2


def test_audit_and_items_filter_on_whole_segments(reg):
    owner_write(reg, {"messaging.rcs.a": 1, "messaging.rcs": 0, "messaging.rcs_evil": 2, "messaging.rcsx.b": 3,
                      "messaging.r": 4})
    assert list(reg.items("messaging.rcs")) == ["messaging.rcs", "messaging.rcs.a"]
    assert [e.path for e in reg.audit("messaging.rcs")] == ["messaging.rcs.a", "messaging.rcs"]
    assert list(reg.items()) == sorted(reg.items())
    assert list(reg.items("messaging.rcs_evil")) == ["messaging.rcs_evil"]
    assert reg.items("nothing.here") == {}


def test_audit_trail_is_append_only_in_the_database(reg):
    owner_write(reg, {"a.x": 1})
    conn = sqlite3.connect(reg.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE audit SET new = '2'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM audit")
    finally:
        conn.close()
    assert [(e.old, e.new) for e in reg.audit()] == [(None, 1)]


def test_persists_across_reopen(tmp_path):
    r = ConfigRegistry.for_workspace(tmp_path / "ws")
    assert r.path == tmp_path / "ws" / ".lily" / "config.sqlite"
    assert not r.path.exists()  # opened lazily
    r.scoped("s", write=["a"]).write({"a.x": True, "a.y": "hello"})
    log = r.audit()
    r.close()
    r.close()  # idempotent
    r2 = ConfigRegistry.for_workspace(tmp_path / "ws")
    assert r2.items() == {"a.x": True, "a.y": "hello"}
    assert r2.audit() == log
    r2.scoped("s", write=["a"]).write({"a.x": False})
    assert [(e.old, e.new) for e in r2.audit("a.x")] == [(None, True), (True, False)]
    r2.close()
    r.get("a.x")  # a closed registry reopens on use
    assert r.get("a.x") is False
    r.close()


def test_two_registries_on_one_file_see_each_others_commits(tmp_path):
    path = tmp_path / "config.sqlite"
    with ConfigRegistry(path) as a, ConfigRegistry(path) as b:
        a.scoped("sa", write=["a"]).write({"a.x": 1})
        assert b.get("a.x") == 1
        b.scoped("sb", write=["a"]).write({"a.x": 2})
        assert a.get("a.x") == 2
        assert [(e.skill, e.old, e.new) for e in a.audit()] == [("sa", None, 1), ("sb", 1, 2)]


def test_another_process_sees_committed_writes(tmp_path):
    path = tmp_path / "config.sqlite"
    reg = ConfigRegistry(path)
    reg.scoped("parent", write=["p"]).write({"p.v": "from parent"})
    proc = child("""
        import sys
        from lily_kernel.typed.registry import ConfigRegistry
        r = ConfigRegistry(sys.argv[1])
        print(r.get("p.v"))
        r.scoped("child", write=["c"]).write({"c.v": 42})
    """, str(path))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == "from parent"
    assert reg.get("c.v") == 42  # the parent's open connection sees the child's commit
    assert reg.audit("c")[0].skill == "child"
    reg.close()


def test_usable_from_other_threads(reg):
    s = reg.scoped("widget", write=["t"])
    s.write({"t.init": 0})  # connection opened on this thread

    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(25):
                s.write({f"t.w{n}": i})
                assert reg.get(f"t.w{n}") == i
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert reg.items("t") == {"t.init": 0, "t.w0": 24, "t.w1": 24, "t.w2": 24, "t.w3": 24}
    assert len(reg.audit("t")) == 1 + 4 * 25


def test_concurrent_writer_processes_do_not_fail(tmp_path):
    path = tmp_path / "config.sqlite"
    code = """
        import sys
        from lily_kernel.typed.registry import ConfigRegistry
        path, name = sys.argv[1], sys.argv[2]
        s = ConfigRegistry(path).scoped(name, write=[name])
        for i in range(1, 61):
            s.write({f"{name}.n": i, f"{name}.shadow": i})
    """
    procs = [child(code, str(path), name) for name in ("pa", "pb", "pc")]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    with ConfigRegistry(path) as reg:
        for name in ("pa", "pb", "pc"):
            assert reg.get(f"{name}.n") == 60 == reg.get(f"{name}.shadow")
            assert [e.new for e in reg.audit(f"{name}.n")] == list(range(1, 61))
        assert len(reg.audit()) == 3 * 60 * 2


# -- durability: SIGKILL in the middle of writing ----------------------------------------

KILL_WRITER = """
    import sys
    from lily_kernel.typed.registry import ConfigRegistry
    reg = ConfigRegistry(sys.argv[1])
    s = reg.scoped("writer", write=["a"])
    n = reg.get("a.x", 0)
    print("started", n, flush=True)
    while True:
        n += 1
        s.write({"a.x": n, "a.note": "x" * (n % 500), "a.y": n})
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_writer_leaves_registry_consistent(tmp_path):
    path = tmp_path / "ws" / ".lily" / "config.sqlite"
    rng = random.Random(4)
    last = 0
    for _ in range(4):
        proc = child(KILL_WRITER, str(path))
        line = proc.stdout.readline()
        assert line.startswith("started"), proc.stderr.read()
        assert int(line.split()[1]) == last  # it resumes from what the last one committed
        time.sleep(rng.uniform(0.2, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL

        conn = sqlite3.connect(path)  # a plain connection: no help from our code
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()
        with ConfigRegistry(path) as reg:
            x, y = reg.get("a.x"), reg.get("a.y")
            assert x == y, f"half a transaction survived: a.x={x}, a.y={y}"
            assert x > last, "the writer made no progress; the test proves nothing"
            assert reg.get("a.note") == "x" * (x % 500)
            # the audit trail matches the values: every committed counter value exactly
            # once, in order, each entry chaining from the previous one
            for key in ("a.x", "a.y"):
                log = reg.audit(key)
                assert [e.new for e in log] == list(range(1, x + 1))
                assert [e.old for e in log] == [None] + list(range(1, x))
                assert log[-1].new == reg.get(key)
            by_id = reg.audit("a")
            assert [e.id for e in by_id] == sorted(e.id for e in by_id)
        last = x
