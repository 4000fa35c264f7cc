"""Fixtures for the kernel tests: real kernels through jupyter_client, in private worlds.

``lily`` is one Lily kernel shared by the tests that do not change its
session; ``start_kernel`` starts fresh kernels (any kernelspec) for tests that
do, and shuts them down after the test. ``recorder`` is a local TCP server
that records every connection, to prove commands never reach a model.

The scripted model: in this folder ``server`` is one ScriptedServer per test module,
answering from that module's ``script``; each test queues its turns through ``turns``,
which must all be used by the end of the test. Module-scoped kernels point at it
(``kernel_support.scripted_kernel``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_support import Script
from kernel_support import ConnectionRecorder, Kernel, World, make_world

from lily_kernel.testing.server import ScriptedServer


@pytest.fixture(scope="session")
def ipython_dir(tmp_path_factory) -> Path:
    """One IPython directory for all kernels (history, profile): never ~/.ipython."""
    return tmp_path_factory.mktemp("ipython")


@pytest.fixture(scope="session")
def lily(tmp_path_factory, ipython_dir) -> Iterator[Kernel]:
    """A Lily kernel shared across the module's read-only tests."""
    world = make_world(tmp_path_factory.mktemp("lily-shared"), ipython_dir)
    kernel = Kernel("lily", world)
    yield kernel
    kernel.shutdown()


@pytest.fixture
def world(tmp_path, ipython_dir) -> World:
    return make_world(tmp_path, ipython_dir)


@pytest.fixture
def start_kernel(tmp_path, ipython_dir) -> Iterator[Callable[..., Kernel]]:
    """``start_kernel(name="lily", world=None, **env)``: a fresh kernel, shut down after the test."""
    started: list[Kernel] = []
    count = 0

    def start(kernel_name: str = "lily", world: World | None = None, **env: str) -> Kernel:
        nonlocal count
        count += 1
        if world is None:
            world = make_world(tmp_path / f"k{count}", ipython_dir, **env)
        else:
            world.env.update(env)
        kernel = Kernel(kernel_name, world)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.shutdown()


@pytest.fixture
def recorder() -> Iterator[ConnectionRecorder]:
    server = ConnectionRecorder()
    yield server
    server.close()


@pytest.fixture(scope="module")
def script() -> Script:
    return Script()


@pytest.fixture(scope="module")
def server(script) -> Iterator[ScriptedServer]:
    """The module's scripted model on 127.0.0.1 (overrides the per-test one of tests/)."""
    with ScriptedServer(script) as s:
        yield s


@pytest.fixture
def turns(script):
    """The queue of turns for this test (emptied before and checked after)."""
    script.turns.clear()
    yield script.turns
    assert not script.turns, f"turns left unused: {list(script.turns)}"
