"""What Lily relies on in the ``mcp`` SDK without importing its private modules
(docs/architecture.md#http): if the SDK changes, a test here fails, not a user's server."""
from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging

from lily_kernel.tools.mcp import mcp_client


def test_the_http_client_keeps_the_sdk_defaults():
    sdk = importlib.import_module("mcp.shared._httpx_utils")  # private: read here, never in Lily

    async def both():
        async with sdk.create_mcp_http_client(headers={"X": "1"}) as theirs, \
                mcp_client.http_client({"X": "1"}) as ours:
            return theirs, ours
    # in a thread of its own: a browser test's event loop may still run in this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        theirs, ours = pool.submit(asyncio.run, both()).result()
    assert type(ours) is type(theirs)
    assert ours.timeout == theirs.timeout
    assert ours.follow_redirects == theirs.follow_redirects
    assert ours.headers["X"] == theirs.headers["X"] == "1"
    assert (mcp_client.HTTP_TIMEOUT, mcp_client.HTTP_READ_TIMEOUT) == \
        (sdk.MCP_DEFAULT_TIMEOUT, sdk.MCP_DEFAULT_SSE_READ_TIMEOUT)


def test_the_sdk_log_reaches_lily_logging_at_debug_level(caplog):
    caplog.set_level(logging.DEBUG, logger="lily_kernel")
    logging.getLogger("mcp.client.session").error("server said something odd")
    ours = [r for r in caplog.records if r.name == mcp_client.__name__]
    assert [r.levelno for r in ours] == [logging.DEBUG]
    assert "server said something odd" in ours[0].getMessage()


def test_the_auto_handshake_lily_uses_is_the_one_the_sdks_client_uses():
    """Lily negotiates with ``mcp.client._probe.negotiate_auto`` (docs/mcp.md#the-client), the
    SDK's own ``Client(mode="auto")`` policy; an SDK that moves or drops it fails here."""
    import inspect

    from mcp.client import client
    from mcp.client._probe import negotiate_auto
    assert client.negotiate_auto is negotiate_auto
    assert "negotiate_auto(session)" in inspect.getsource(client.Client.__aenter__)
