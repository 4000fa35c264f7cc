"""Hostile display payloads shared by the sanitizer's unit, kernel and browser tests.

Each one, if it ran in the page, would set ``window.__pwned`` or change
``document.title`` (the browser tests check both).
"""
from __future__ import annotations

JS = "window.__pwned=1;document.title='pwned'"

PAYLOADS: list[tuple[str, str]] = [
    ("script tag", f"<script>{JS}</script>"),
    ("script mixed case", f"<ScRiPt>{JS}</sCrIpT>"),
    ("img onerror", f"<img src=x onerror=\"{JS}\">"),
    ("IMG ONERROR upper", f"<IMG SRC=x ONERROR=\"{JS}\">"),
    ("svg onload", f"<svg onload=\"{JS}\"></svg>"),
    ("svg script", f"<svg><script>{JS}</script></svg>"),
    ("iframe srcdoc", f"<iframe srcdoc=\"<script>parent.{JS}</script>\"></iframe>"),
    ("object data", f"<object data=\"javascript:{JS}\"></object>"),
    ("embed src", f"<embed src=\"javascript:{JS}\">"),
    ("details ontoggle", f"<details open ontoggle=\"{JS}\">x</details>"),
    ("style tag", "<style>body{display:none}</style>"),
    ("base href", "<base href=\"https://evil.example/\">"),
    ("meta refresh", "<meta http-equiv=\"refresh\" content=\"0;url=javascript:alert(1)\">"),
    ("form action", "<form action=\"javascript:alert(1)\"><button>go</button></form>"),
    ("html comment", "<!-- hidden --><img src=x onerror=\"" + JS + "\">"),
    ("javascript link", f"[click me](javascript:{JS})"),
    ("JaVaScRiPt link", f"[click me](JaVaScRiPt:{JS})"),
    ("entity-hidden scheme", "[click me](javascript&#58;window.__pwned=1)"),
    ("tab in scheme", "[click me](java&#x09;script:window.__pwned=1)"),
    ("angle destination", "[click me](<javascript:window.__pwned=1>)"),
    ("reference link", "[click me][r]\n\n[r]: javascript:window.__pwned=1"),
    ("vbscript link", "[click me](vbscript:msgbox(1))"),
    ("data image", "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)"),
    ("data link", "[x](data:text/html,<script>alert(1)</script>)"),
    ("autolink", "<javascript:window.__pwned=1>"),
    ("code break-out", f"</code></pre><img src=x onerror=\"{JS}\">"),
    ("fence break-out", f"```\n</code></pre><img src=x onerror=\"{JS}\">\n"),
    ("code span in table", f"| a | b |\n| - | - |\n| `x|<img src=x onerror=\"{JS}\">|` | y |"),
    ("entities", "&lt;img src=x onerror=alert(1)&gt; &#60;script&#62;"),
    ("html block", f"<div>\n\n<img src=x onerror=\"{JS}\">\n\n</div>"),
    ("a href", f"<a href=\"javascript:{JS}\">link</a>"),
    ("math", f"$<img src=x onerror=\"{JS}\">$"),
]
