"""What Lily's model transport relies on in ``httpx2`` beyond its public API: the proxy
map it reads from the environment and the URL patterns it matches (``agent/deadline.py``,
the one adapter over ``httpx2._utils``; docs/architecture.md#http). Lily routes every
model request as httpx's own client would; if httpx changes, a test here fails, not a
user's proxy."""
from __future__ import annotations

import httpx2
import pytest

from lily_kernel.agent.deadline import DeadlineTransport

URLS = ["https://api.openai.com/v1", "http://localhost:8000/v1", "https://x.corp.example/v1",
        "http://10.1.2.3:80/v1", "http://plain.example/v1", "https://[::1]:8443/v1",
        "http://llm.corp.example:11434/v1"]
ENVIRONMENTS = [
    {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "localhost,.corp.example,10.1.2.3"},
    {"HTTP_PROXY": "proxy.example:8080", "HTTPS_PROXY": "http://secure.example:3129"},
    {"ALL_PROXY": "http://every.example:1080", "NO_PROXY": "::1,llm.corp.example"},
    {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "*"},
    {},
]


def proxy_of(transport: httpx2.BaseTransport) -> object:
    """The proxy a transport sends through (None: direct); httpcore's, read in this test."""
    return getattr(getattr(transport, "_pool", None), "_proxy_url", None)


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda e: ",".join(sorted(e)) or "none")
def test_every_model_url_goes_where_httpx_itself_would_send_it(env, monkeypatch):
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    theirs, ours = httpx2.Client(), DeadlineTransport()
    try:
        for url in URLS:
            parsed = httpx2.URL(url)
            assert proxy_of(ours.route(parsed)) == \
                proxy_of(theirs._transport_for_url(parsed)), (env, url)
        proxied = any(k != "NO_PROXY" for k in env) and env.get("NO_PROXY") != "*"
        assert any(proxy_of(ours.route(httpx2.URL(u))) for u in URLS) == proxied  # not vacuous
    finally:
        theirs.close()
        ours.close()
