"""The Help menu's "Lily help" entry: a static page the kernelspec install writes."""
from __future__ import annotations

import html

from lily_kernel.commands.table import BUILTINS


def test_the_help_page_lists_every_built_in_command():
    from lily_kernel.jupyter.help_page import page as render
    page = render()
    for command in BUILTINS:
        assert f"<code>{html.escape(command.usage)}</code>" in page, command.name
        assert html.escape(command.summary) in page, command.name
    assert "<script" not in page.lower()


def test_the_kernel_links_to_the_page(lily):
    """The install writes the page (tests/jupyter/test_kernel_logo.py checks it is there)."""
    reply = lily.kc.kernel_info(reply=True, timeout=10)["content"]
    assert reply["help_links"] == [{"text": "Lily help", "url": "/kernelspecs/lily/help.html"}]
