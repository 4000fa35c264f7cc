"""Fixtures for the real-browser suite: one JupyterLab, one Chromium, one scripted model.

The suite runs when Debian's Chromium, Playwright and JupyterLab are present and
is skipped otherwise, with the reason; ``LILY_REQUIRE_BROWSER=1`` (set by
``.ci/run``) turns that skip into a failure, so CI always runs it. A failing
test leaves a screenshot and the JupyterLab log in ``tests/e2e/artifacts/``
(or ``$LILY_E2E_ARTIFACTS``).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from agent_support import Script
from lab_support import REPO, STEP, Lab, chromium_path, missing

from lily_kernel.testing.server import ScriptedServer

ARTIFACTS = Path(os.environ.get("LILY_E2E_ARTIFACTS") or Path(__file__).parent / "artifacts")


@pytest.fixture(scope="session")
def browser_ready() -> None:
    why = missing()
    if why is None:
        return
    if os.environ.get("LILY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LILY_REQUIRE_BROWSER=1, but the real-browser suite cannot run: {why}")
    pytest.skip(f"real-browser suite (tests/e2e) skipped: {why}")


@pytest.fixture(scope="session")
def model(browser_ready):
    """``(server, script)``: a ScriptedServer on 127.0.0.1 that notebooks point Lily at."""
    script = Script("e2e script")
    with ScriptedServer(script) as server:
        yield server, script


@pytest.fixture(scope="session")
def lab(browser_ready, tmp_path_factory):
    server = Lab(tmp_path_factory.mktemp("lab"))
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", server.root)
    shutil.copytree(REPO / "notebooks" / "fixtures", server.root / "fixtures")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def notebook7(browser_ready, tmp_path_factory):
    """A Notebook 7 server for the session (the ``notebook`` package)."""
    server = Lab(tmp_path_factory.mktemp("nb7"), app="notebook")
    yield server
    server.stop()


@pytest.fixture(params=["lab", "notebook7"])
def front(request):
    """Each front end a test must pass in: JupyterLab, then Notebook 7."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def browser(browser_ready):
    from playwright.sync_api import expect, sync_playwright
    expect.set_options(timeout=STEP)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                      args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def page(browser, lab, request):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(STEP)
    yield page
    failed = any(getattr(request.node, f"report_{when}", None) is not None
                 and getattr(request.node, f"report_{when}").failed for when in ("setup", "call"))
    if failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^\w.-]+", "_", request.node.name)
        try:
            page.screenshot(path=str(ARTIFACTS / f"{stem}.png"), full_page=True)
        except Exception as exc:  # the page may be gone; the log still helps
            (ARTIFACTS / f"{stem}.screenshot-failed.txt").write_text(str(exc))
        (ARTIFACTS / f"{stem}.jupyterlab.log").write_text(lab.logs())
    context.close()


@pytest.fixture
def turns(model):
    """This test's queue of model turns (emptied before; every turn must be used)."""
    _server, script = model
    script.turns.clear()
    yield script.turns
    assert not script.turns, f"turns left unused: {list(script.turns)}"
