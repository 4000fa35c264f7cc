"""Activities for external skills: building, the local outbox, HTTP delivery without duplicates.

Every HTTP test talks to a real ``http.server`` receiver on 127.0.0.1 run in a
thread (receiver_support.py; no mocks, nothing beyond loopback). The receiver records every request
and, like a well-behaved ActivityPub server, accepts an activity once per
Idempotency-Key: a replay gets a 2xx but is not accepted again.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from receiver_support import keep_loopback_direct, receivers

from lily_kernel.errors import DispatchError
from lily_kernel.typed.activity import (
    AS_CONTEXT,
    AS_PUBLIC,
    CONTENT_TYPE,
    build_activity,
    new_activity_id,
)
from lily_kernel.typed.outbox import Delivery, Outbox

ALICE = "https://alice.example/users/alice"
BOB = "https://bob.example/users/bob"
TOKEN = "s3cr3t-T0KEN-do-not-leak-8d1f"


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch):
    keep_loopback_direct(monkeypatch)


@pytest.fixture
def receiver():
    """``receiver(*script)``: a scripted outbox (receiver_support.Receiver), closed after."""
    with receivers() as make:
        yield make


@pytest.fixture
def outbox(tmp_path):
    return Outbox.for_workspace(tmp_path)


def note(text="hello bob", **kw):
    return build_activity("Create", actor=ALICE, to=[BOB], content=text, **kw)


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/outbox"


# --------------------------------------------------------------------------- building

def test_create_note_shape():
    a = build_activity("Create", actor=ALICE, to=[BOB, AS_PUBLIC], content="hi", summary="cw")
    assert a["@context"] == AS_CONTEXT
    assert a["type"] == "Create" and a["actor"] == ALICE and a["to"] == [BOB, AS_PUBLIC]
    assert a["id"].startswith(ALICE + "/activities/")
    assert a["published"].endswith("Z") and len(a["published"]) == 20
    obj = a["object"]
    assert obj == {"type": "Note", "id": a["id"] + "/object", "attributedTo": ALICE,
                   "to": [BOB, AS_PUBLIC], "content": "hi", "published": a["published"],
                   "summary": "cw"}
    assert json.loads(json.dumps(a)) == a


def test_follow_and_like_shapes():
    f = build_activity("Follow", actor=ALICE, to=[BOB], object=BOB)
    assert (f["type"], f["object"], f["to"]) == ("Follow", BOB, [BOB])
    assert set(f) == {"@context", "id", "type", "actor", "to", "published", "object"}
    like = build_activity("Like", actor=ALICE, to=[BOB], object="https://bob.example/notes/1",
                          activity_id="urn:uuid:00000000-0000-4000-8000-000000000001",
                          published="2025-01-02T03:04:05Z")
    assert like["id"] == "urn:uuid:00000000-0000-4000-8000-000000000001"
    assert like["published"] == "2025-01-02T03:04:05Z"
    undo = build_activity("Undo", actor=ALICE, to=[BOB], object=f)
    assert undo["object"] == f and undo["object"] is not f


def test_new_activity_id():
    assert new_activity_id().startswith("urn:uuid:")
    assert new_activity_id("https://a.example/u/a/").startswith("https://a.example/u/a/activities/")
    assert new_activity_id() != new_activity_id()


@pytest.mark.parametrize("field,kwargs", [
    ("actor", {"actor": "http://alice.example/users/alice"}),
    ("actor", {"actor": "/users/alice"}),
    ("actor", {"actor": "https://alice.example/users/al ice"}),
    ("to[0]", {"to": ["http://bob.example/users/bob"]}),
    ("to[1]", {"to": [BOB, "bob"]}),
    ("to[0]", {"to": ["https://bob.example/us ers/bob"]}),
    ("to", {"to": BOB}),
])
def test_invalid_uris_rejected_naming_the_field(field, kwargs):
    args = {"actor": ALICE, "to": [BOB], "object": BOB} | kwargs
    with pytest.raises(DispatchError) as err:
        build_activity("Follow", **args)
    assert str(err.value).startswith(field + " ")


def test_unsupported_type_and_missing_object_rejected():
    with pytest.raises(DispatchError, match="'Poke' is not supported"):
        build_activity("Poke", actor=ALICE, to=[BOB], object=BOB)
    with pytest.raises(DispatchError, match="Follow needs object"):
        build_activity("Follow", actor=ALICE, to=[BOB])
    with pytest.raises(DispatchError, match="object"):
        build_activity("Like", actor=ALICE, to=[BOB], object="not a uri")
    with pytest.raises(DispatchError, match="either object or content"):
        build_activity("Create", actor=ALICE, to=[BOB], object={"type": "Note"}, content="x")


# --------------------------------------------------------------------------- local outbox

def test_local_outbox_stores_once(tmp_path, outbox):
    a = note()
    d = outbox.deliver(a)
    assert d == Delivery(a["id"], "stored", "local outbox", 1, None, d.detail)
    assert (tmp_path / ".lily" / "outbox.sqlite").is_file()
    again = outbox.deliver(a)
    assert again.status == "duplicate" and again.attempts == 0
    rows = Outbox.for_workspace(tmp_path).list()   # a fresh handle reads the same store
    assert len(rows) == 1 and rows[0]["activity"] == a and rows[0]["status"] == "stored"
    assert outbox.get(a["id"])["delivered_at"] and outbox.get("urn:uuid:nope") is None


def test_list_is_oldest_first(outbox):
    ids = [outbox.deliver(note(str(i))).activity_id for i in range(3)]
    assert [r["activity"]["id"] for r in outbox.list()] == ids


# --------------------------------------------------------------------------- HTTP

def test_delivery_goes_through_the_proxy_the_environment_names(outbox, receiver, monkeypatch):
    """docs/architecture.md#http: HTTP_PROXY is honoured as httpx does by default; here the
    proxy is a recording outbox, so the POST it gets names the real target in full."""
    proxy = receiver()
    target = closed_port_url()  # nothing listens there: only the proxy can answer
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url.split("/users/")[0])
    d = outbox.deliver(note(), url=target, token=TOKEN)
    assert (d.status, d.http_status) == ("delivered", 201)
    assert [r["path"] for r in proxy.requests] == [target]


def test_http_delivery_exactly_one_post(outbox, receiver):
    r = receiver()
    a = note()
    d = outbox.deliver(a, url=r.url, token=TOKEN)
    assert (d.status, d.attempts, d.http_status, d.target) == ("delivered", 1, 201, r.url)
    assert len(r.requests) == 1
    req = r.requests[0]
    assert req["path"] == "/users/alice/outbox"
    assert req["headers"]["Content-Type"] == CONTENT_TYPE
    assert req["headers"]["Accept"] == CONTENT_TYPE
    assert req["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert req["headers"]["Idempotency-Key"] == a["id"]
    assert json.loads(req["body"]) == a
    rec = outbox.get(a["id"])
    assert (rec["status"], rec["attempts"], rec["target"]) == ("delivered", 1, r.url)
    # Delivering the delivered activity again sends nothing.
    again = outbox.deliver(a, url=r.url, token=TOKEN)
    assert again.status == "duplicate" and again.attempts == 0
    assert len(r.requests) == 1


def test_retry_after_timeout_is_accepted_once(outbox, receiver):
    r = receiver({"sleep": 1.0, "status": 201}, {"status": 201})
    a = note()
    d = outbox.deliver(a, url=r.url, token=TOKEN, timeout=0.3, retries=2, backoff=0.05)
    assert (d.status, d.attempts) == ("delivered", 2)
    r.wait_idle()
    assert len(r.requests) == 2
    assert {q["body"] for q in r.requests} == {r.requests[0]["body"]}
    assert {q["headers"]["Idempotency-Key"] for q in r.requests} == {a["id"]}
    assert list(r.accepted) == [a["id"]]   # exactly one activity accepted
    assert json.loads(r.accepted[a["id"]]) == a
    assert outbox.get(a["id"])["attempts"] == 2


def test_503_then_201(outbox, receiver):
    r = receiver({"status": 503, "body": b"busy"})
    d = outbox.deliver(note(), url=r.url, backoff=0.01)
    assert (d.status, d.attempts, d.http_status) == ("delivered", 2, 201)
    assert len(r.requests) == 2 and "Authorization" not in r.requests[0]["headers"]


def test_429_respects_retry_after(outbox, receiver):
    r = receiver({"status": 429, "headers": {"Retry-After": "1"}})
    start = time.monotonic()
    d = outbox.deliver(note(), url=r.url, backoff=0.01)
    assert time.monotonic() - start >= 0.95
    assert (d.status, d.attempts) == ("delivered", 2) and len(r.requests) == 2


def test_long_retry_after_gives_up_at_once(outbox, receiver):
    r = receiver({"status": 429, "headers": {"Retry-After": "3600"}})
    a = note()
    with pytest.raises(DispatchError, match="retry after 3600 s"):
        outbox.deliver(a, url=r.url, backoff=0.01)
    assert len(r.requests) == 1 and outbox.get(a["id"])["status"] == "failed"


def test_400_is_not_retried_and_token_not_echoed(outbox, receiver):
    r = receiver({"status": 400, "echo_auth": True})
    a = note()
    with pytest.raises(DispatchError) as err:
        outbox.deliver(a, url=r.url, token=TOKEN, backoff=0.01)
    message = str(err.value)
    assert "400" in message and "bad request from Bearer ***" in message
    assert TOKEN not in message and "\n" not in message
    assert len(r.requests) == 1
    rec = outbox.get(a["id"])
    assert (rec["status"], rec["attempts"], rec["http_status"]) == ("failed", 1, 400)
    assert TOKEN not in rec["last_error"]


def test_redirect_not_followed(outbox, receiver):
    r = receiver({"status": 302, "headers": {"Location": "https://elsewhere.example/inbox"}})
    with pytest.raises(DispatchError, match="redirect"):
        outbox.deliver(note(), url=r.url, token=TOKEN)
    assert len(r.requests) == 1


def test_connection_refused_then_later_delivery(outbox, receiver):
    a = note()
    dead = closed_port_url()
    with pytest.raises(DispatchError) as err:
        outbox.deliver(a, url=dead, token=TOKEN, retries=2, backoff=0.01)
    assert "after 3 attempts" in str(err.value) and "refused" in str(err.value)
    assert TOKEN not in str(err.value)
    rec = outbox.get(a["id"])
    assert (rec["status"], rec["attempts"], rec["target"]) == ("failed", 3, dead)
    # Later, a working receiver: delivered once, same row.
    r = receiver()
    d = outbox.deliver(a, url=r.url, token=TOKEN)
    assert (d.status, d.attempts) == ("delivered", 1)
    assert len(r.requests) == 1 and json.loads(r.requests[0]["body"]) == a
    assert len(outbox.list()) == 1 and outbox.get(a["id"])["attempts"] == 4
    # And never again.
    assert outbox.deliver(a, url=r.url, token=TOKEN).status == "duplicate"
    assert len(r.requests) == 1


def test_failed_record_with_a_different_body_is_refused(outbox):
    a = note()
    with pytest.raises(DispatchError):
        outbox.deliver(a, url=closed_port_url(), retries=0)
    changed = dict(a, to=[AS_PUBLIC])
    with pytest.raises(DispatchError, match="different body"):
        outbox.deliver(changed, url=closed_port_url(), retries=0)


def test_concurrent_deliver_of_one_id_sends_once(outbox, receiver):
    r = receiver({"sleep": 0.5, "status": 201})
    a = note()
    results: list = []
    t = threading.Thread(target=lambda: results.append(outbox.deliver(a, url=r.url)))
    t.start()
    deadline = time.monotonic() + 5
    while not r.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(DispatchError, match="already being delivered"):
        outbox.deliver(a, url=r.url)
    t.join(5)
    assert results[0].status == "delivered" and len(r.requests) == 1


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/outbox", "file:///etc/passwd", "127.0.0.1:80/x"])
def test_non_http_urls_refused_before_recording(outbox, url):
    a = note()
    with pytest.raises(DispatchError, match="http"):
        outbox.deliver(a, url=url)
    assert outbox.get(a["id"]) is None


def test_bad_token_refused_without_echo(outbox, receiver):
    r = receiver()
    with pytest.raises(DispatchError) as err:
        outbox.deliver(note(), url=r.url, token=TOKEN + "\r\nX-Evil: 1")
    assert TOKEN not in str(err.value) and not r.requests


def test_token_never_in_store_file(tmp_path, outbox, receiver):
    ok = receiver()
    outbox.deliver(note("one"), url=ok.url, token=TOKEN)
    with pytest.raises(DispatchError):
        outbox.deliver(note("two"), url=closed_port_url(), token=TOKEN, retries=1, backoff=0.01)
    bad = receiver({"status": 400, "echo_auth": True})
    with pytest.raises(DispatchError):
        outbox.deliver(note("three"), url=bad.url, token=TOKEN)
    userinfo = ok.url.replace("http://", f"http://alice:{TOKEN}@")
    with pytest.raises(DispatchError, match="user info") as err:
        outbox.deliver(note("four"), url=userinfo, token=TOKEN)
    assert TOKEN not in str(err.value)
    assert len(outbox.list()) == 3 and len(ok.requests) == 1
    files = list((tmp_path / ".lily").iterdir())
    assert files
    for f in files:
        assert TOKEN.encode() not in f.read_bytes(), f.name
