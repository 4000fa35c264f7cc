"""The one sanitizer of display text (docs/trust-boundary.md#display)."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from lily_kernel.commands import sanitize
from tests.commands.sanitize_payloads import PAYLOADS

# What a trusted Markdown renderer makes of the output: raw HTML passed through, every URL
# kept (as marked does in JupyterLab); the sanitizer's output must still be harmless.
_RENDER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
_RENDER.validateLink = lambda url: True  # type: ignore[method-assign]
_ALLOWED = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "code", "pre", "a",
            "img", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "s",
            "blockquote", "hr", "br"}


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


def _elements(md: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    parser = _Elements()
    parser.feed(_RENDER.render(md))
    return parser.found


def _harmless(md: str) -> None:
    for tag, attrs in _elements(md):
        assert tag in _ALLOWED, (tag, md)
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, md)
            if name in ("href", "src"):
                assert sanitize.safe_url(value or ""), (tag, value, md)


@pytest.mark.parametrize(("name", "payload"), PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_payload_is_harmless_and_readable(name: str, payload: str) -> None:
    assert len(PAYLOADS) >= 20
    out = sanitize.markdown(payload)
    _harmless(out)
    # alone, inside prose, inside a list and after a heading: still harmless
    for wrapped in (f"Intro\n\n{payload}\n\nend", f"- item {payload}", f"# T\n{payload}"):
        _harmless(sanitize.markdown(wrapped))
    # readable: the payload's words are still there to read
    words = [w for w in ("click me", "hidden", "link", "go") if w in payload]
    text = _RENDER.render(out)
    for w in words:
        assert w in text


@pytest.mark.parametrize(("name", "payload"), PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_literal_helpers_show_payload_as_text(name: str, payload: str) -> None:
    _harmless(sanitize.md_text(payload))
    _harmless(sanitize.md_cell(payload))
    _harmless(sanitize.code_span(payload))
    _harmless(sanitize.code_block(payload, "python"))
    assert "<" not in sanitize.html_text(payload)
    assert '"' not in sanitize.html_text(payload)


def test_markdown_still_renders_markdown() -> None:
    md = ("# Title\n\nSome *emphasis* and **bold**, `a < b` in code.\n\n- one\n- two\n\n"
          "1. first\n\n| col | val |\n| --- | --- |\n| x | `y<z` |\n\n"
          "```python\nif a < b:\n    print('<ok>')\n```\n\n"
          "[docs](https://example.org/docs) and ![plot](https://example.org/p.png) "
          "and [mail](mailto:a@example.org) and [rel](notes/readme.md)\n\n> quoted")
    out = sanitize.markdown(md)
    assert out == md  # nothing to neutralise: byte for byte the same Markdown
    tags = {t for t, _ in _elements(out)}
    assert {"h1", "em", "strong", "code", "ul", "ol", "table", "pre", "a", "img",
            "blockquote"} <= tags


def test_raw_html_is_escaped_not_dropped() -> None:
    out = sanitize.markdown("x <b>bold?</b> y")
    assert out == "x &lt;b>bold?&lt;/b> y"
    assert "&lt;b&gt;bold?" in _RENDER.render(out)


def test_unsafe_link_stays_readable_text() -> None:
    out = sanitize.markdown("see [the docs](javascript:alert(1)) now")
    assert "the docs" in out and not any(t == "a" for t, _ in _elements(out))


@pytest.mark.parametrize("url", ["javascript:x", " JAVASCRIPT:x", "java\tscript:x",
                                 "&#106;avascript:x", "vbscript:x", "data:text/html,x",
                                 "file:///etc/passwd", "\x01javascript:x", "<javascript:x>"])
def test_unsafe_urls(url: str) -> None:
    assert not sanitize.safe_url(url)


@pytest.mark.parametrize("url", ["https://a.b", "http://a.b/c?d=e:f", "mailto:a@b.c",
                                 "notes/x.md", "#anchor", "/abs/path", "x.md#a:b"])
def test_safe_urls(url: str) -> None:
    assert sanitize.safe_url(url)


def test_code_span_and_block_cannot_be_closed_early() -> None:
    assert sanitize.code_span("a`b") == "``a`b``"
    block = sanitize.code_block("```\n<img src=x onerror=alert(1)>", "py\"><script>")
    assert block.startswith("````pyscript\n") and block.endswith("\n````")
    tokens = _RENDER.parse(block)
    assert [t.type for t in tokens] == ["fence"]


def test_md_text_shows_every_character() -> None:
    raw = "**a** <b> [x](y) # _z_ $m$ & | ~"
    rendered = _RENDER.render(sanitize.md_text(raw))
    assert rendered == "<p>" + raw.replace("&", "&amp;").replace("<", "&lt;")\
        .replace(">", "&gt;") + "</p>\n"
