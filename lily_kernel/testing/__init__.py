"""Test support skill authors use too: a scripted OpenAI-compatible server on 127.0.0.1."""
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.testing.standin import demo_responder

__all__ = ["ScriptedServer", "demo_responder"]
