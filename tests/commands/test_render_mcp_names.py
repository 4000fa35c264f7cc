"""``/mcp``'s table shows a tool's name as it is, once escaped (issue 34 §6: it showed
``mcp\\_\\_time\\_\\_…`` with literal backslashes)."""
from __future__ import annotations

from lily_kernel.commands import render, sanitize
from lily_kernel.commands.results import McpStatus


def test_mcp_tool_names_render_without_literal_backslashes():
    status = McpStatus(({"name": "time", "transport": "stdio", "source": "lily.toml",
                         "state": "running", "tools": [
                             {"name": "mcp__time__get_current_time", "mode": "ask"},
                             {"name": "mcp__t__a|b<i>", "mode": "ask"}]},))
    md = render.markdown(status)
    assert "`mcp__time__get_current_time`" in md
    html = sanitize.markdown_html(md)
    assert "mcp__time__get_current_time" in html and "\\_" not in html
    assert "<i>" not in html  # still shown literally, as code
    assert "mcp__time__get_current_time" in render.text(status)
