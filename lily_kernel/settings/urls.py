"""Which URLs a setting may name: the rules shared by the model endpoint, the outbox and
the workspace's settings (docs/trust-boundary.md#workspace-trust)."""
from __future__ import annotations

import urllib.parse


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    import ipaddress
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def plain_http_reason(url: str) -> str | None:
    """Why ``url`` may not be an outbox (the token would cross the network in clear text), or
    None: an outbox is ``https`` unless it is on this machine (docs/trust-boundary.md#workspace-trust)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return None  # check_url says what is wrong with it
    if parts.scheme == "http" and not is_loopback(host):
        return (f"outbox URL must use https unless it is on this machine (localhost, "
                f"127.0.0.1, ::1), not http://{host}")
    return None
