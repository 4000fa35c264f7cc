"""Text from outside, made safe to display (docs/trust-boundary.md#display).

JupyterLab and Notebook 7 trust the outputs of a live session: a ``text/markdown``
bundle goes through ``marked`` and into the page *unsanitised*, scripts and event
handlers included, and again every time the saved (and signed) notebook is reopened.
So every text Lily shows that came from the model, a skill, configuration or a
notebook passes through this one module before it enters a bundle, a widget or the
waiting line:

- :func:`markdown` — Markdown from outside (an answer, a skill body): it still renders
  as Markdown (headings, lists, tables, code, links) but is inert: every ``<`` that
  could open raw HTML or an autolink is escaped, and a link or image whose URL has a
  scheme other than http, https or mailto is left as plain text. The result is checked
  with a CommonMark parser (``markdown-it-py``, raw HTML *on*, so nothing hides from it);
  should any HTML or unsafe link survive, everything is escaped instead.
- :func:`md_text` — a value (a skill name, a model name, a path) shown literally inside
  Markdown: every Markdown and HTML character is backslash-escaped.
- :func:`html_text` — a value shown inside HTML (widgets, the /skills table).
- :func:`markdown_html` — Markdown rendered to HTML for a widget, raw HTML off.
- :func:`code_span`, :func:`code_block` — a value shown verbatim as code inside Markdown,
  with a fence no content can close.
- :func:`terminal_text` — text for a terminal (the ``lily`` command): control characters
  and bidirectional overrides shown as escapes, so none moves the cursor, sets a title,
  writes the clipboard or reorders what is shown.
"""
from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # markdown_it loads on first use, not at `%load_ext lily` (bench/README.md)
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

#: URL schemes a link may carry; anything else (javascript:, vbscript:, data:, file:,
#: jupyter-specific ones) is shown as text, not linked.
SAFE_SCHEMES = frozenset({"http", "https", "mailto"})



@functools.cache
def _parser(kind: str) -> MarkdownIt:
    """One of the three markdown-it parsers, built on first use.

    ``blocks``: block structure as the output means it: raw HTML off, so a ``<div>`` that
    would have opened an HTML block is text here, as it is once escaped. ``check``: the check
    of the result: raw HTML on, every URL kept, so nothing can hide from it. ``html``:
    Markdown to HTML for widgets: raw HTML off, markdown-it's own URL check on.
    """
    from markdown_it import MarkdownIt
    md = MarkdownIt("commonmark", {"html": kind == "check"}).enable(["table", "strikethrough"])
    if kind == "check":
        md.validateLink = lambda url: True  # type: ignore[method-assign]
    return md

_SCHEME = re.compile(r"([a-z][a-z0-9+.\-]*):", re.IGNORECASE)
_PUNCT = frozenset("\\`*_{}[]()#+-.!|<>~$&\"'=:;")  # what a backslash may escape here
# Characters that mean something anywhere in a line, and at a line's start only.
_INLINE = frozenset("\\`*_[]<>|~$&")
_LINE_START = re.compile(r"^([ \t]*)(?:([#>+\-=*])|(\d+)([.)]))", re.MULTILINE)
_URL_NOISE = re.compile(r"[\t\n\r]")
_FENCE_LIKE = re.compile(r"^ {0,3}(```|~~~)")


def html_text(text: str) -> str:
    """``text`` escaped for HTML: element content or a quoted attribute value."""
    return html.escape(str(text), quote=True)


def md_text(text: str) -> str:
    """``text`` escaped so Markdown shows it literally: no formatting, link or HTML.

    Every character with a meaning inside a line of Markdown (or to JupyterLab's math)
    gets a backslash, which CommonMark and ``marked`` both drop when rendering; so does a
    heading, quote, list or rule mark at the start of a line.
    """
    out = _inline_escape(str(text))

    def mark(m: re.Match[str]) -> str:
        if m.group(2):
            return m.group(1) + "\\" + m.group(2)
        return m.group(1) + m.group(3) + "\\" + m.group(4)
    return _LINE_START.sub(mark, out)


def md_cell(text: str) -> str:
    """``text`` shown literally in one cell of a Markdown pipe table (one line)."""
    return _inline_escape(" ".join(str(text).splitlines()))


def _inline_escape(text: str) -> str:
    """A backslash before each character that means something inside a line; an ``_``
    inside a word (``prompt_rewrite``) means nothing and stays bare."""
    return "".join(
        "\\" + c if c in _INLINE and not (c == "_" and 0 < i < len(text) - 1
                                           and text[i - 1].isalnum() and text[i + 1].isalnum())
        else c for i, c in enumerate(text))


def code_span(text: str, table: bool = True) -> str:
    r"""``text`` as inline code, verbatim: one line, fenced by more backticks than it holds.

    In a table (the default) a ``|`` is escaped, which GFM tables (and ``marked``) turn
    back into ``|`` inside code: unescaped, it would split the cell and the span with it.
    ``table=False`` for a span in a paragraph, where ``\\|`` would show as it is.
    """
    one = " ".join(str(text).splitlines())
    if table:
        one = one.replace("|", "\\|")
    if not one:
        return "` `"
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", one)), default=0) + 1)
    pad = " " if one.startswith("`") or one.endswith("`") else ""
    return f"{ticks}{pad}{one}{pad}{ticks}"


def code_block(text: str, lang: str = "") -> str:
    """``text`` as a fenced code block, verbatim; no line of it can close the fence."""
    body = str(text).rstrip("\n")
    longest = max((len(r) for r in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    info = re.sub(r"[^A-Za-z0-9_+\-]", "", lang)
    return f"{fence}{info}\n{body}\n{fence}"


def markdown_html(text: str) -> str:
    """Markdown as HTML for a widget (which holds HTML, not Markdown): rendered by
    markdown-it-py with raw HTML switched off (it shows as text) and its link check on
    (a ``javascript:``/``vbscript:``/``file:``/``data:`` link stays text)."""
    return str(_parser("html").render(markdown(text)))


def safe_url(url: str) -> bool:
    """True when ``url`` is relative or uses a scheme in :data:`SAFE_SCHEMES`.

    Looks at the URL as a browser would: entities decoded, tabs and newlines dropped,
    leading control characters, spaces and ``<`` stripped.
    """
    u = _URL_NOISE.sub("", html.unescape(url)).lstrip("\x00\x01\x02\x03\x04\x05\x06\x07"
                                                     "\x08\x0b\x0c\x0e\x0f\x10\x11\x12\x13"
                                                     "\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c"
                                                     "\x1d\x1e\x1f <")
    m = _SCHEME.match(u)
    return m is None or m.group(1).lower() in SAFE_SCHEMES


def markdown(text: str) -> str:
    """Markdown from outside, safe for a trusted ``text/markdown`` bundle.

    Keeps Markdown (headings, emphasis, lists, tables, code, http/https/mailto links and
    images); escapes every ``<`` outside code (so no raw HTML, comment or autolink
    survives) and leaves links with any other scheme as plain text. A pure function of the
    text, remembered for the last texts up to :data:`_MEMO_CHARS` long: the same page
    (``/help``, ``/skills``, a notice) is parsed twice by markdown-it once, not per cell.
    """
    text = str(text)
    if len(text) <= _MEMO_CHARS:
        return _markdown_memo(text)
    return _markdown(text)


_MEMO_CHARS = 65_536  # longer texts (a streaming answer growing) are not worth keeping


@functools.lru_cache(maxsize=64)
def _markdown_memo(text: str) -> str:
    return _markdown(text)


def _markdown(text: str) -> str:
    src = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")
    out = _inert(src)
    if _is_inert(out):
        return out
    # Something looked like code to us and not to the parser: escape everywhere.
    out = _inert(src, code=False)
    return out if _is_inert(out) else md_text(src)


def _code_lines(src: str) -> set[int]:
    """Line numbers inside top-level fenced or indented code blocks (an opening fence
    line excluded). Code nested in a list or quote is not trusted: renderers differ on
    where such a block ends, so its ``<`` is escaped like prose (it then shows as
    ``&lt;``, a small price for never reading HTML where a renderer sees it)."""
    lines: set[int] = set()
    rows = src.split("\n")
    for tok in _parser("blocks").parse(src):
        if tok.map is None or tok.level != 0:
            continue
        start, end = tok.map
        if tok.type == "code_block":
            lines.update(range(start, end))
        elif tok.type == "fence":  # the lines after the opening fence, the closing one too
            # up to the first line a lenient renderer might take for a closing fence
            # (```~~~ closes a fence in marked, not in CommonMark)
            for i in range(start + 1, end):
                lines.add(i)
                if _FENCE_LIKE.match(rows[i] if i < len(rows) else ""):
                    break
    return lines


def _inert(src: str, code: bool = True) -> str:
    """Escape ``<`` outside code and unlink unsafe URLs, keeping everything else."""
    lines = src.split("\n")
    skip = _code_lines(src) if code else set()
    out: list[str] = []
    chunk: list[str] = []
    for i, line in enumerate(lines):
        if i in skip:
            if chunk:
                out.append(_inline("\n".join(chunk), code))
                chunk = []
            out.append(line)
        else:
            chunk.append(line)
    if chunk:
        out.append(_inline("\n".join(chunk), code))
    return "\n".join(out)


def _inline(text: str, code: bool) -> str:
    """One run of non-code lines: code spans kept, ``<`` escaped, unsafe links unlinked.

    Once a backtick run is not a span we trust, no later span of the same paragraph is
    trusted either: a renderer may pair that run with a later one, and what we took for
    a span would be prose to it.
    """
    out: list[str] = []
    i, n = 0, len(text)
    trust = code
    while i < n:
        c = text[i]
        if c == "\n" and text[i + 1:].split("\n", 1)[0].strip() == "":
            trust = code  # a blank line: a new paragraph
            out.append(c)
            i += 1
        elif c == "\\" and i + 1 < n and text[i + 1] in _PUNCT:
            if text[i + 1] == "<":  # \< shows a literal < already; keep it so
                out.append("\\<")
            else:
                out.append(text[i:i + 2])
            i += 2
        elif c == "`":
            j = i
            while j < n and text[j] == "`":
                j += 1
            run = text[i:j]
            end = _span_end(text, j, len(run)) if trust else -1
            if end >= 0:
                out.append(text[i:end])
                i = end
            else:
                trust = False
                out.append(run)
                i = j
        elif c == "<":
            out.append("&lt;")
            i += 1
        elif c == "]" and i + 1 < n and text[i + 1] in "(:":
            dest = text[i + 2:].lstrip(" \t\n")
            first = dest.split(None, 1)[0] if dest.split(None, 1) else ""
            out.append("]" if safe_url(first) else "]\\")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _span_end(text: str, start: int, width: int) -> int:
    """End of a code span opened by ``width`` backticks before ``start``; -1 to distrust it.

    Only a span on one line without ``|`` or a backtick inside is kept verbatim (a table
    splits cells before it finds code, a span never crosses blocks, and ``marked`` closes
    a span inside a longer backtick run where CommonMark does not); any other is
    escaped like prose.
    """
    k = start
    while k < len(text) and text[k] not in "`\n|":
        k += 1
    m = k
    while m < len(text) and text[m] == "`":
        m += 1
    # the first backtick run after the content closes the span only if it has the
    # opener's width; a newline, a | or no content distrusts the span
    if k == start or k == len(text) or text[k] != "`" or m - k != width:
        return -1
    return m


def _walk(tokens: Iterable[Token]) -> Iterable[Token]:
    for tok in tokens:
        yield tok
        if tok.children:
            yield from _walk(tok.children)


def _is_inert(md: str) -> bool:
    """No raw HTML and no unsafe link or image in ``md``, read by a CommonMark parser."""
    for tok in _walk(_parser("check").parse(md)):
        if tok.type in ("html_block", "html_inline"):
            return False
        for attr in ("href", "src"):
            value = tok.attrGet(attr)
            if isinstance(value, str) and not safe_url(value):
                return False
    return True


#: Characters a card makes visible: controls (but newline and tab), format characters
#: (bidirectional overrides and isolates, zero-width spaces and joiners, the BOM), line and
#: paragraph separators, private use and unassigned code points (docs/permissions.md#cards).
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn", "Cs"})
#: Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt), whole:
#: what a renderer may draw as nothing whatever its category -- variation selectors, tags,
#: Hangul fillers, Mongolian free variation selectors, the soft hyphen, the combining
#: grapheme joiner. Inclusive ranges.
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile("[" + "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in DEFAULT_IGNORABLE)
                        + "]")


def hidden(ch: str) -> bool:
    """Whether ``ch`` draws differently from what runs: a control (but newline and tab),
    a format, separator, private-use, surrogate or unassigned code point, or a
    default-ignorable one (docs/permissions.md#cards)."""
    import unicodedata
    if ch in "\n\t":
        return False
    return unicodedata.category(ch) in _HIDDEN_CATEGORIES or _IGNORABLE.match(ch) is not None


def visible(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` with every character that draws differently from what runs (:func:`hidden`)
    shown as ``⟨U+202E⟩``, and the names of those found (in order, once each): what a card
    shows is what runs."""
    found: dict[str, None] = {}
    out = []
    for ch in text:
        if not hidden(ch):
            out.append(ch)
            continue
        mark = f"⟨U+{ord(ch):04X}⟩"
        found[mark] = None
        out.append(mark)
    return "".join(out), tuple(found)


def hidden_in(value: object) -> tuple[str, ...]:
    r"""The hidden characters (:func:`visible`'s marks) in every string of JSON-like data,
    keys included: a control JSON shows as an escape (``\r``) is still one the card warns
    about."""
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.update(dict.fromkeys(visible(item)[1]))
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            stack += list(item)
    return tuple(found)


#: What a terminal would act on rather than show: C0 controls but newline and tab, DEL,
#: C1 controls (``\x9b`` is CSI on some terminals), and the bidirectional embeddings,
#: overrides and isolates ("Trojan Source").
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    r"""``text`` with every character a terminal would act on shown as its ``\uXXXX``
    escape (``\u001b``): what the ``lily`` command prints is read, never obeyed, and
    JSON it prints stays JSON, decoding to the same text."""
    return _TERMINAL_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
