"""fastyaml must agree exactly with PyYAML (libyaml's CSafeLoader) wherever it answers.

The property test builds frontmatter documents inside the fast path's subset
and just outside it (YAML 1.1 traps, indicator characters, odd indentation,
duplicate keys, tabs, comments) and checks: whenever ``fastyaml.parse`` does
not return ``FALLBACK``, its result is what ``yaml.load(src, CSafeLoader)``
returns — same keys in the same order, same values, same types (``True`` is
not ``1``, ``None`` is not ``""``). ``parse`` returns ``None`` for a document
with no keys, exactly as PyYAML does; ``frontmatter.parse_yaml`` turns that
into ``{}``.
"""
from __future__ import annotations

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lily_kernel.errors import FrontmatterError
from lily_kernel.skills import fastyaml, frontmatter

FALLBACK = fastyaml.FALLBACK
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _reference(src: str):
    """PyYAML's answer, or the exception type it raised."""
    try:
        return yaml.load(src, Loader=LOADER)
    except Exception as exc:
        return type(exc)


def _same(a, b) -> bool:
    """Deep equality that also compares types and key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _check(src: str):
    fast = fastyaml.parse(src)
    if fast is FALLBACK:
        return fast
    ref = _reference(src)
    assert _same(fast, ref), f"fastyaml disagrees with PyYAML on {src!r}: {fast!r} != {ref!r}"
    # What fastyaml reads is within the nesting limit, which is checked only before PyYAML.
    frontmatter.check_nesting(src)
    return fast


# --- building blocks -------------------------------------------------------------

def _weighted(*choices):
    """One of ``(weight, strategy)`` choices, picked with those weights."""
    total = sum(w for w, _ in choices)

    @st.composite
    def pick(draw):
        n = draw(st.integers(0, total - 1))
        for weight, strategy in choices:
            if n < weight:
                return draw(strategy)
            n -= weight
        raise AssertionError  # pragma: no cover

    return pick()


def _word(first: str, rest: str, max_size: int):
    """Text whose first character is from ``first`` and the others from ``rest``."""
    return st.builds(lambda a, b: a + b, st.sampled_from(list(first)),
                     st.text(st.sampled_from(list(rest)), max_size=max_size))


LOWER = "abcdefghijklmnopqrstuvwxyz"
ALNUM = LOWER + LOWER.upper() + "0123456789"


TRICKY_KEYS = st.sampled_from([
    "yes", "on", "No", "OFF", "y", "n", "1", "01", "1.0", "1e3", "0x1F", "0o17", "1_000",
    "null", "Null", "~", "<<", "=", "2024-01-01", "1:30", ".inf", "-k", "k-", "k.", ".k",
    "a.b", "a-b", "_x", "x_", "key with space", "é", "über", "a#b", "a'b", "[k]", "",
])
PLAIN_KEYS = st.one_of(
    st.sampled_from(["name", "description", "summary", "metadata", "eligibility",
                     "allowed-tools", "a", "b", "k1"]),
    _word(LOWER, LOWER + "0123456789_.-", 6),
)
KEYS = _weighted((17, PLAIN_KEYS), (3, TRICKY_KEYS))

TRAPS = [
    "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "off", "OFF", "true", "False", "y", "n",
    "~", "null", "Null", "NULL", "", " ", "1", "-1", "+1", "01", "0o17", "0x1F", "0b101", "1_000",
    "1.0", "-1.5", "1e3", "1.0e+3", ".5", "._", ".", ".inf", "-.inf", ".NaN", "2024-01-01",
    "2024-01-01 10:00:00", "1:30", "190:20:30", "=", "<<", "-", "--", "---", "...", "?", "? a",
    "-a", "a-", "a # b", "a#b", "#a", "a: b", "a:b", "a:", ":a", "a :b", "&a", "*a", "!a",
    "!!str a", "a &b", "a *b", "a !b", "'a'", "\"a\"", "'a''b'", "'a\"b'", "\"a'b\"", "'#'",
    "\"a: b\"", "'", "\"", "a'b", "a\"b", "|", ">", "%a", "@a", "`a", "[a]", "[]", "{a}", "{}",
    "a,b", "a, b", "a  b", "a ", " a", "é", "日本語", "a\u00a0b", "\u00a0", "a\u2028b", "a\x85b",
    "a\ufeffb", "a\x7fb", "a\\b", "\"a\\nb\"", "a\tb", "%", "1.{i}", "Use when: x",
]

SCALAR_ALPHABET = st.sampled_from(list(
    "abcxyzABC019 .-_:#&*!?,'\"[]{}|>%@`~=<+eEé中\u00a0\t\\\x85\u2028"))
RANDOM_TEXT = st.text(SCALAR_ALPHABET, max_size=10)
PLAIN_TEXT = _word(ALNUM[:52] + "\u00e9", ALNUM + " .,/()\u00e9-", 16)
SCALARS = _weighted((12, PLAIN_TEXT), (6, st.sampled_from(TRAPS)), (2, RANDOM_TEXT))


@st.composite
def quoted(draw):
    text = draw(_weighted((4, PLAIN_TEXT), (4, st.sampled_from(TRAPS)), (2, RANDOM_TEXT)))
    quote = draw(st.sampled_from(["'", '"']))
    return quote + text + quote


SPACES = st.sampled_from(["", "", " ", "  "])


@st.composite
def flow_list(draw):
    items = draw(st.lists(_weighted((3, SCALARS), (1, quoted())), max_size=4))
    seps = [draw(st.sampled_from([", ", ", ", ", ", ",", " ,", " , ", ",  "])) for _ in items]
    body = "".join(item + sep for item, sep in zip(items, seps))
    if items and draw(st.integers(0, 4)):
        body = body[: -len(seps[-1])]  # usually no trailing comma
    return "[" + draw(SPACES) + body + draw(SPACES) + "]"


VALUES = _weighted((6, SCALARS), (2, quoted()), (2, flow_list()))
COMMENT = st.sampled_from([""] * 24 + [" # note", "  #x", "#x", " #"])
TRAILING = st.sampled_from(["", "", "", "", " ", "  "])
SEPARATOR = st.sampled_from([": "] * 16 + [":  ", ":", " : "])


@st.composite
def key_value(draw, indent: str = ""):
    return indent + draw(KEYS) + draw(SEPARATOR) + draw(VALUES) + draw(COMMENT) + draw(TRAILING)


@st.composite
def block(draw):
    """``key:`` and an indented block list or one-level mapping."""
    head = draw(KEYS) + ":" + draw(st.sampled_from(["", "", "", "", "", " ", " # c"]))
    indent = draw(st.sampled_from(["", " ", "  ", "  ", "    "]))
    odd = st.sampled_from(["", " ", "   "])
    lines = [head]
    if draw(st.booleans()):  # block list
        for _ in range(draw(st.integers(0, 3))):
            ind = indent if draw(st.integers(0, 19)) else draw(odd)
            dash = draw(st.sampled_from(["- "] * 12 + ["-  ", "-", "-- "]))
            item = draw(_weighted((9, _weighted((3, SCALARS), (1, quoted()))), (1, flow_list())))
            lines.append(ind + dash + item + draw(COMMENT) + draw(TRAILING))
    else:  # one-level mapping
        for _ in range(draw(st.integers(0, 3))):
            ind = indent if draw(st.integers(0, 19)) else draw(odd)
            if draw(st.integers(0, 19)):
                lines.append(draw(key_value(ind)))
            else:  # a nested or empty value
                lines.append(ind + draw(KEYS) + ":" + draw(TRAILING))
    if draw(st.integers(0, 4)) == 0:
        pos = draw(st.integers(1, len(lines)))
        lines.insert(pos, draw(st.sampled_from(["", "  ", "# c", "  # c", indent + "#"])))
    return lines


MISC_LINES = st.sampled_from([
    "", " ", "# comment", "  # indented comment", "#", "- a", "  x", "...", "---",
    "%YAML 1.1", "\tk: v", "k:\tv", "? k", "k", "k: v\\", "&a k: v", "!t k: v",
])


@st.composite
def wild_documents(draw):
    """Anything the pieces above can make: mostly outside the subset."""
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 29))
        if kind < 17:
            lines.append(draw(key_value()))
        elif kind < 28:
            lines += draw(block())
        else:
            lines.append(draw(MISC_LINES))
    if lines and draw(st.integers(0, 9)) == 0:  # a duplicate key
        lines.append(lines[draw(st.integers(0, len(lines) - 1))])
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))


# Documents squarely inside the subset, so the fast path is really exercised.
SAFE_KEY = _word(LOWER, LOWER + "0123456789_-", 8).filter(
    lambda k: k not in ("yes", "no", "on", "off", "true", "false", "null", "y", "n"))
SAFE_TEXT = _word(ALNUM[:52], ALNUM + " .,/()-", 20)


@st.composite
def simple_lines(draw):
    keys = draw(st.lists(SAFE_KEY, min_size=1, max_size=6, unique=True))
    lines = []
    for key in keys:
        kind = draw(st.integers(0, 4))
        if kind == 0:
            lines.append(f"{key}: {draw(SAFE_TEXT)}")
        elif kind == 1:
            lines.append(f"{key}: {draw(st.sampled_from(TRAPS[:30]))}")
        elif kind == 2:
            items = draw(st.lists(_word(LOWER + "0123456789", LOWER + "0123456789_.-", 6),
                                  max_size=3))
            lines.append(f"{key}: [{', '.join(items)}]")
        elif kind == 3:
            lines.append(f"{key}:")
            for item in draw(st.lists(SAFE_TEXT, max_size=3)):
                lines.append(f"  - {item}")
        else:
            lines.append(f"{key}:")
            for sub in draw(st.lists(SAFE_KEY, max_size=3, unique=True)):
                lines.append(f"  {sub}: '{draw(SAFE_TEXT)}'")
    return lines


@st.composite
def simple_documents(draw):
    return "\n".join(draw(simple_lines())) + "\n"


@st.composite
def near_edge_documents(draw):
    """Plain frontmatter with one odd piece (a trap, an indicator, a bad indent) put in."""
    lines = draw(simple_lines())
    kind = draw(st.integers(0, 9))
    if kind < 5:
        piece = [draw(key_value())]
    elif kind < 9:
        piece = draw(block())
    else:
        piece = [draw(MISC_LINES)]
    pos = draw(st.integers(0, len(lines)))
    while pos < len(lines) and lines[pos].startswith(" "):  # not inside a block
        pos += 1
    lines[pos:pos] = piece
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))


# --- properties ------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(near_edge_documents(), wild_documents()))
@example("name: x\nyes: 1\n")
@example("on: off\n")
@example("a: [a :b, c:d, 'e, f']\n")
@example("k:\n- a\n- b\nz: ~\n")
def test_fast_path_agrees_with_pyyaml(src):
    _check(src)


@settings(max_examples=150, deadline=None)
@given(simple_documents())
def test_fast_path_agrees_on_plain_frontmatter(src):
    _check(src)


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from(list("ab: -#'\"[],\n\t~yY0.&*!")), max_size=30))
def test_fast_path_agrees_on_noise(src):
    _check(src)


def test_every_trap_in_every_position():
    """Each trap as a value, quoted, in a flow list, in a block list or mapping, and as a key."""
    forms = ["k: {}", "k: '{}'", 'k: "{}"', "k: [{}]", "k: [a, {}, b]", "k:\n  - {}",
             "k:\n- {}", "k:\n  a: {}", "{}: v", "k:\n  {}: v", "a: b\n{}\nc: d"]
    for trap in TRAPS:
        for form in forms:
            _check(form.replace("{}", trap))


# --- examples --------------------------------------------------------------------

def test_typical_frontmatter_takes_the_fast_path():
    src = ("name: demo\n"
           "description: Does the thing. Use when asked, politely.\n"
           "requires_tools: [read, write]\n"
           "eligibility:\n"
           "  os: [darwin, linux]\n"
           "  env: []\n"
           "allowed-tools:\n"
           "  - read\n"
           "  - 'write'\n"
           "metadata:\n"
           "  author: me\n"
           '  version: "1.0"\n'
           "# a comment\n"
           "\n"
           "disable-model-invocation: true\n")
    result = _check(src)
    assert result == {
        "name": "demo",
        "description": "Does the thing. Use when asked, politely.",
        "requires_tools": ["read", "write"],
        "eligibility": {"os": ["darwin", "linux"], "env": []},
        "allowed-tools": ["read", "write"],
        "metadata": {"author": "me", "version": "1.0"},
        "disable-model-invocation": True,
    }


def test_yaml_11_scalars_resolve_like_pyyaml():
    assert _check("a: yes\nb: No\nc: ~\nd: null\ne: off\nf: y\n") == {
        "a": True, "b": False, "c": None, "d": None, "e": False, "f": "y"}


def test_numbers_dates_and_merge_keys_are_left_to_pyyaml():
    for src in ("a: 1\n", "a: 1.0\n", "a: 0x1F\n", "a: 2024-01-01\n", "a: 1:30\n",
                "a: .inf\n", "a: =\n", "<<: a\n", "1: a\n", "yes: a\n", "a.b: [1]\n"):
        assert fastyaml.parse(src) is FALLBACK, src


def test_outside_the_subset_falls_back():
    for src in ("a: b\na: c\n",          # duplicate key
                "a:\tb\n",                # tab
                "a: &x b\n",              # anchor
                "a: *x\n",                # alias
                "a: !t b\n",              # tag
                'a: "b\\n"\n',            # escape
                "a: b # c\n",             # trailing comment
                "a:\n  b:\n    c: d\n",   # nesting
                "a: {b: c}\n",            # flow mapping
                "a: [b, [c]]\n",          # nested flow
                "a: |\n  b\n",            # block scalar
                "a: b\n  c\n",            # multi-line plain scalar
                "  a: b\n",               # indented document
                "- a\n"):                 # not a mapping
        assert fastyaml.parse(src) is FALLBACK, src


def test_empty_document_is_none_and_frontmatter_makes_it_empty():
    assert _check("") is None
    assert _check("# only a comment\n\n") is None
    assert frontmatter.parse_yaml("# only a comment\n") == {}
    assert frontmatter.parse_yaml("") == {}


def test_empty_key_is_null_and_empty_flow_list_is_empty():
    assert _check("a:\nb: []\nc: [ ]\nd: ''\n") == {"a": None, "b": [], "c": [], "d": ""}


TABLES = (fastyaml._values, fastyaml._keys, fastyaml._padded, fastyaml._heads)


def test_warm_and_cold_caches_give_the_same_answers():
    docs = ["a: yes\nb: [x, 'y']\nc:\n  - z\n", "name: n\nd:\n  k: v\n  l: ~\n",
            "a: x:y\nb: 'q'\n", "a: [ ]\nb:\n", "k: v # c\n", "m:\n  a: x\n  a: y\n",
            "l:\n- on\n-  x\n\n   \nm:\n   k: Off\n", "a:\n  b: c\n d: e\n"]
    warm = [fastyaml.parse(d) for d in docs]
    for table in TABLES:
        table.clear()
    cold = [fastyaml.parse(d) for d in docs]
    assert all(a is b if a is FALLBACK else _same(a, b) for a, b in zip(warm, cold))
    assert all(table for table in TABLES)  # each table took part


def test_caches_stay_bounded():
    for i in range(fastyaml._CACHE_MAX + 10):
        fastyaml.parse(f"k{i}: value {i}\nm:\n  k{i}: v\nl:\n  - x{i}\n")
    assert all(0 < len(table) <= fastyaml._CACHE_MAX for table in TABLES)


# --- frontmatter.parse_document is decode + split + parse_yaml ---------------------

def _three_steps(data: bytes):
    try:
        text = frontmatter.decode(data)
        raw, body = frontmatter.split(text)
        return text, body, frontmatter.parse_yaml(raw) if raw is not None else {}
    except FrontmatterError as exc:
        return str(exc)


def _one_step(data: bytes):
    try:
        return frontmatter.parse_document(data)
    except FrontmatterError as exc:
        return str(exc)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([
    b"---", b"--- ", b"---\r", b"a: b", b"a: [x]", b"k:", b"  - v", b"# c", b"", b"body",
    b"a: &x y", b"a: 1", b"\xef\xbb\xbf---", b"\r", "caf\u00e9: x".encode(), b"\xff",
]), max_size=6), st.sampled_from([b"\n", b"\r\n"]), st.booleans())
def test_parse_document_matches_the_three_steps(parts, eol, bom):
    data = (b"\xef\xbb\xbf" if bom else b"") + eol.join(parts)
    assert _one_step(data) == _three_steps(data)


def test_parse_document_limits_match_the_three_steps():
    for data in (b"x" * (frontmatter.MAX_FILE_BYTES + 1), b"x" * frontmatter.MAX_FILE_BYTES,
                 b"---\na: " + b"y" * frontmatter.MAX_FRONTMATTER_BYTES + b"\n---\n",
                 b"---\na: b\n", b"---", b"---\n---", b"\xef\xbb\xbf---\na: b\n---\nx"):
        assert _one_step(data) == _three_steps(data), data[:20]


# --- the clean-document shortcut -------------------------------------------------

# Printable ASCII but "\" and "#" (a document with either takes the per-text checks).
CLEAN = [c for c in map(chr, range(0x20, 0x7F)) if c not in "\\#"]


@settings(max_examples=400, deadline=None)
@given(st.text(st.sampled_from(list("abcyYnNoOtT0123.:-_ '\"[]{},!&*%@`|>?~=<+")), max_size=3),
       st.text(st.sampled_from(CLEAN), max_size=12))
@example("", "yes")
@example("", "Yes it is")
@example("a", ": b")
@example("a", ":")
@example("", "2024-01-01")
@example("", "True story")
@example("", "on")
@example("", "Null")
@example("O", "n")
@example("n", "o: x")
def test_a_text_the_shortcut_takes_is_a_plain_string_in_every_position(head, tail):
    """fastyaml._is_plain (inlined in parse for clean documents) answers True only for a
    value text PyYAML reads as that very string: after a top-level key, in a block
    mapping, as a block list item; and parse agrees with PyYAML on those documents."""
    raw = head + tail
    if not fastyaml._is_plain(raw, True):
        return
    for form, expected in ((f"k: {raw}\n", {"k": raw}),
                           (f"k:\n  a: {raw}\n", {"k": {"a": raw}}),
                           (f"k:\n  - {raw}\n", {"k": [raw]}),
                           (f"k:\n- {raw}\n", {"k": [raw]})):
        assert _same(_reference(form), expected), form
        assert _same(_check(form), expected), form


def test_the_shortcut_is_only_taken_in_a_clean_document():
    """A "#" or "\\" anywhere, a tab or a non-ASCII character sends every value text through
    the per-text checks; the answers are PyYAML's either way."""
    assert not fastyaml._is_plain("plain", False)
    for doc in ("a: x #c\nb: plain\n", "a: x\\y\nb: plain\n", "a: \u00e9\nb: plain\n",
                "a: x\tz\nb: plain\n", "a: plain # note\n"):
        _check(doc)
    assert fastyaml.parse("a: x\n# c\nb: plain\n") == {"a": "x", "b": "plain"}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["'", '"']),
       st.text(st.sampled_from(list("abyYnN01.:-_ '\"[]{},!&*%@`|>?~=<+")), max_size=3),
       st.text(st.sampled_from(CLEAN), max_size=10),
       st.sampled_from(["", "", "'", '"', " ", "x"]))
@example('"', "", "1.5", "")
@example("'", "", "yes", "")
@example('"', "", "a: b", "")
@example("'", "", "it''s", "")
@example('"', "", "", "")
def test_a_quoted_text_the_shortcut_takes_is_its_inside_in_every_position(quote, head, tail, end):
    """fastyaml._is_quoted (inlined in parse for clean documents) answers True only for a
    value text PyYAML reads as the text between its quotes: after a top-level key, in a
    block mapping at any indentation, as a block list item; parse agrees with PyYAML."""
    raw = quote + head + tail + end
    if not fastyaml._is_quoted(raw, True):
        return
    inside = raw[1:-1]
    for form, expected in ((f"k: {raw}\n", {"k": inside}),
                           (f"k:\n  a: {raw}\n", {"k": {"a": inside}}),
                           (f"k:\n a: x\n b: {raw}\n", {"k": {"a": "x", "b": inside}}),
                           (f"k:\n    a: {raw}\nz: {raw}\n", {"k": {"a": inside}, "z": inside}),
                           (f"k:\n  - {raw}\n", {"k": [inside]}),
                           (f"k:\n- {raw}\n", {"k": [inside]})):
        assert _same(_reference(form), expected), form
        assert _same(_check(form), expected), form


@st.composite
def clean_block_mappings(draw):
    """Clean documents of block mappings at one indentation, some lines off it, with
    plain, quoted and trap values: the block mapping's usual-line path and its exits."""
    lines = []
    for key in draw(st.lists(SAFE_KEY, min_size=1, max_size=3, unique=True)):
        lines.append(f"{key}:")
        indent = " " * draw(st.integers(1, 4))
        for sub in draw(st.lists(_weighted((9, SAFE_KEY), (1, TRICKY_KEYS)), max_size=4)):
            ind = indent if draw(st.integers(0, 9)) else draw(st.sampled_from(["", " ", "     "]))
            value = draw(_weighted((3, SAFE_TEXT), (3, quoted()), (2, st.sampled_from(TRAPS)),
                                   (1, flow_list())))
            lines.append(f"{ind}{sub}: {value}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(clean_block_mappings())
@example("m:\n  a: x\n  a: y\n")
@example("m:\n  a: x\n    b: y\n")
@example("m:\n  a: x\n b: y\n")
@example('m:\n  a: "1.0"\n  b: \'q\'\n  c: [x]\n')
def test_block_mappings_agree_with_pyyaml(src):
    _check(src)


def test_the_typical_skill_takes_the_shortcuts_and_agrees():
    """The benchmark's document: plain and quoted values, a flow list, two block mappings."""
    src = ("name: skill-00007\ndescription: Generated skill number 7. Use when benchmarking.\n"
           "summary: Benchmark skill 7\ninvocation_mode: prompt_rewrite\nrequires_tools: [read]\n"
           "eligibility:\n  os: [darwin, linux, win32]\nmetadata:\n  author: bench\n"
           '  version: "1.7"\n')
    assert _check(src)["metadata"] == {"author": "bench", "version": "1.7"}
    assert fastyaml._is_quoted('"1.7"', True)
    assert not fastyaml._is_quoted('"1.7"', False)


def test_a_duplicate_key_falls_back_in_every_position():
    """A key seen twice (top level or in a block mapping, as "key: value" or "key:") is left
    to PyYAML, whatever path each line takes, the keys known or not."""
    for src in ("a: x\na: y\n", "a: x\na:\n", "a:\na: y\n", "a:\na:\n", "a:\n  b: c\na:\n",
                "a:\n  b: c\na: d\n", "m:\n  a: x\n  a: y\n", "m:\n  a: x\n  b: y\n  a:  z\n",
                "m:\n  a: x\nm: y\n", "m:\n  - x\nm:\n"):
        for _ in range(2):  # the second time, every key is known
            assert fastyaml.parse(src) is FALLBACK, src


def test_a_block_line_off_the_block_indentation_falls_back():
    """A block mapping's lines must all sit at its first line's indentation; one a space
    less or more (whose text past the indentation may be a known key) goes to PyYAML."""
    for src in ("b: z\nab: z\nm:\n  a: x\n ab: y\n", "b: z\nm:\n  a: x\n   b: y\n",
                "b: z\nm:\n    a: x\n  b: y\n", "b: z\nm:\n  a: x\n\tb: y\n"):
        for _ in range(2):  # the second time, every key is known
            assert fastyaml.parse(src) is FALLBACK, src


# --- the first loop (documents without "#") ---------------------------------------

# A few keys, so that documents repeat them (duplicates in every position).
FEW_KEYS = _weighted((9, st.sampled_from(["name", "description", "a", "m", "tools", "k-1"])),
                     (1, TRICKY_KEYS))
WORDY_TEXT = st.one_of(st.sampled_from(sorted(fastyaml._WORDS)),
                       _word("yYnNtTfFoO", ALNUM + " .,-:'\"", 12))
ODD_TEXT = st.sampled_from(["a: b", "'a: b'", '"a: b"', "x:", "é", "日本語 text", "a\u00a0b",
                            "a\tb", "a\\b", "\u2028", "'", '"', "", " ", "x ", " x", "[a, b"])
FIRST_VALUES = _weighted((5, SAFE_TEXT), (3, WORDY_TEXT), (2, quoted()), (2, flow_list()),
                         (2, st.sampled_from(TRAPS)), (2, ODD_TEXT))


@st.composite
def first_loop_documents(draw):
    """Documents without "#", of the lines the first loop reads (top-level ``key: value``,
    ``key:`` and its block mapping or list, blank lines) and some it leaves to the second."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 9))
        if kind < 5:
            lines.append(f"{draw(FEW_KEYS)}: {draw(FIRST_VALUES)}")
            continue
        lines.append(f"{draw(FEW_KEYS)}:")
        if kind == 9:
            continue  # a key with no block: null
        indent = draw(st.sampled_from(["", " ", "  ", "    "]))
        dash = kind < 7
        for _ in range(draw(st.integers(0, 3))):
            ind = indent if draw(st.integers(0, 9)) else draw(st.sampled_from(["", " ", "   "]))
            if draw(st.integers(0, 9)) == 0:
                dash = not dash  # a list item in a mapping, or the other way round
            if dash:
                lines.append(f"{ind}- {draw(FIRST_VALUES)}")
            else:
                lines.append(f"{ind}{draw(FEW_KEYS)}: {draw(FIRST_VALUES)}")
        if draw(st.integers(0, 5)) == 0:
            lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from(["", "   "])))
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "\n", "", "\n\n"]))
    return text.replace("#", "x")  # (traps and tricky keys have some)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first_loop_documents())
@example("m:\n  a: x\n  a: y\n")
@example("l:\n- a\nl: b\n")
@example("a: x\n\nb:\n  - y\n\na: z\n")
@example("k: \"a: b\"\n")
@example('k: "\n')
@example("k: on\nn: Nope\nt: True story\n")
@example("k: caf\u00e9\nm:\n  a: x\n  b: \u00e9\n")
def test_the_first_loop_agrees_with_pyyaml_and_with_the_second(src):
    """Whatever the first loop answers is PyYAML's answer; and it is the second loop's answer
    (a comment line in front sends the same document to the second loop), FALLBACK included."""
    fast = _check(src)
    general = fastyaml.parse("#\n" + src)
    assert fast is general if fast is FALLBACK or general is FALLBACK else _same(fast, general), src


def test_the_first_loop_reads_the_usual_shapes():
    """The shapes of most skills, without "#", are read (not left to PyYAML), each the same with
    a comment line in front (the second loop)."""
    for src in ("name: x\ndescription: This does a thing. Use when asked.\nsummary: Fix it\n",
                "name: x\nmetadata:\n  author: me\n  version: '1.0'\n  tags: [a, b]\n",
                "name: x\nallowed-tools:\n  - read\n  - write\nrequires_tools:\n- read\n",
                "name: x\ndescription: Compétence — für Größe\nmetadata:\n  author: José\n",
                "a: yes\n\nb: off\n   \nc: ~\nd:\n"):
        fast = _check(src)
        assert fast is not FALLBACK and fast is not None, src
        assert _same(fast, fastyaml.parse("#\n" + src)), src


def test_the_first_loop_leaves_these_to_the_second():
    """Lines the first loop does not read, and duplicate keys in every position, get the second
    loop's answer: FALLBACK where it falls back, else the mapping PyYAML reads."""
    for src in ("a: x\na: y\n", "a:\n- x\na: y\n", "a:\n  b: x\n  b: y\n", "l:\n  - x\nl:\n",
                "a:\n  b: x\na:\n", "a: b: c\n", "a:\n  - x\n  b: y\n", "a:\n  b: x\n  - y\n",
                "a:\n  b: x\n   c: y\n", "a:\n  - x\n - y\n", "  a: x\n", "- x\n", "a: '\n",
                "a:\n  b:\n    c: d\n", "yes: x\n", "a:\n  yes: x\n", "a: x \\ y\n"):
        for _ in range(2):  # the second time, every table knows the lines
            assert fastyaml.parse(src) is FALLBACK, src
    for src, expected in (('k: "a: b"\n', {"k": "a: b"}), ("k:   \n  - x\n", {"k": ["x"]}),
                          ("k: \n", {"k": None}), ("k: 'x: y'\nm:\n  a: '1: 2'\n",
                                                   {"k": "x: y", "m": {"a": "1: 2"}})):
        for _ in range(2):
            assert _same(_check(src), expected), src


# --- clean beyond ASCII: every character printable to Python --------------------------

# A comment line YAML reads (PyYAML does too) whose no-break space Python does not call
# printable: the document goes to the second loop, every value text through _remember.
UNPRINTABLE_COMMENT = "#\u00a0\n"


def _check_against_the_per_text_checks(src: str) -> None:
    """parse agrees with PyYAML on ``src``, and gives what it gives with every value text
    classified (UNPRINTABLE_COMMENT in front), FALLBACK included."""
    fast = _check(src)
    general = fastyaml.parse(UNPRINTABLE_COMMENT + src)
    assert fast is general if fast is FALLBACK or general is FALLBACK else _same(fast, general), src

# Printable beyond ASCII (Latin, CJK, a dash, an emoji, a combining accent), and characters
# YAML reads as text but Python does not call printable (a no-break space, a zero-width
# space, an ideographic space, a private-use one), or YAML refuses or reads as a break.
WIDE = ["\u00e9", "\u4e2d", "\u2014", "\U0001f600", "e\u0301", "\u00a0", "\u200b", "\u3000",
        "\ue000", "\x85", "\u2028", "\ufeff", "\t"]
WIDE_TEXT = st.builds(lambda a, b, c: a + b + c, _word(ALNUM[:52], ALNUM + " .-", 6),
                      st.sampled_from(WIDE),
                      st.lists(st.sampled_from(list("ab .-") + WIDE), max_size=4).map("".join))
WIDE_VALUES = _weighted((4, WIDE_TEXT), (2, SAFE_TEXT), (1, WORDY_TEXT),
                        (1, st.builds(lambda q, t: q + t + q, st.sampled_from(["'", '"']),
                                      WIDE_TEXT)),
                        (1, st.sampled_from(["\u00e9", "\u00e9t\u00e9", "'\u00e9'", "[\u00e9]",
                                             "\u00e9: x", "x \u00e9", "x\u00a0"])))


@st.composite
def wide_documents(draw):
    """Documents of the usual shapes whose values go beyond ASCII: clean ones (every
    character printable) and ones with a single character that is not."""
    lines = []
    for key in draw(st.lists(SAFE_KEY, min_size=1, max_size=4, unique=True)):
        kind = draw(st.integers(0, 3))
        if kind < 2:
            lines.append(f"{key}: {draw(WIDE_VALUES)}")
        elif kind == 2:
            lines.append(f"{key}:")
            for sub in draw(st.lists(SAFE_KEY, max_size=3, unique=True)):
                lines.append(f"  {sub}: {draw(WIDE_VALUES)}")
        else:
            lines.append(f"{key}:")
            lines += [f"  - {draw(WIDE_VALUES)}" for _ in range(draw(st.integers(0, 2)))]
    return "\n".join(lines) + "\n"


@settings(max_examples=400, deadline=None)
@given(wide_documents())
@example("a: caf\u00e9 x\n")
@example("a: x\u00a0\n")
@example("a: \u00e9t\u00e9 \u2014 ok\nm:\n  b: '\u4e2d'\n  c: \"x\u200b\"\n")
@example("a: yes \u00e9\nb: No\u3000\n")
def test_wide_documents_agree_with_pyyaml_and_with_the_per_text_checks(src):
    """A document beyond ASCII takes the shortcuts only when every character is printable to
    Python; its answer is PyYAML's and the one the per-text checks give (a comment with a
    no-break space in front: the second loop, without shortcuts), FALLBACK included."""
    _check_against_the_per_text_checks(src)


def test_a_printable_document_beyond_ascii_takes_the_shortcuts():
    """Its plain values (that start in ASCII) and quoted ones are taken as they stand (not kept
    in _values); one character Python does not call printable, or a "\\", sends every value
    text through the per-text checks (kept in _values); with a "#", a comment after a value
    is left to PyYAML."""
    for src, expected in (("d: Caf\u00e9 \u2014 f\u00fcr Gr\u00f6\u00dfe\nv: '1.\u00e9'\n",
                           {"d": "Caf\u00e9 \u2014 f\u00fcr Gr\u00f6\u00dfe", "v": "1.\u00e9"}),
                          ("m:\n  a: ok \u4e2d\u6587\n  b: \"\U0001f600\"\n",
                           {"m": {"a": "ok \u4e2d\u6587", "b": "\U0001f600"}})):
        fastyaml._values.clear()
        assert _same(_check(src), expected), src
        assert not any(not t.isascii() for t in fastyaml._values), src
    for src in ("d: Caf\u00e9 \u2014 x\nz: a\u00a0b\n", "d: Caf\u00e9 \u2014 x\nz: a\\b\n"):
        fastyaml._values.clear()
        result = _check(src)
        assert "Caf\u00e9 \u2014 x" in fastyaml._values, src
        assert result is FALLBACK or result["d"] == "Caf\u00e9 \u2014 x", src
    # With a "#", only the second loop's shortcuts: a comment after a value is PyYAML's.
    assert _check("d: Caf\u00e9 \u2014 x\nz: y # c\n") is FALLBACK


# --- clean but for comments: the second loop's shortcuts -------------------------------

COMMENTS = st.sampled_from(["# c", "#", "  # indented", "#x: y", "# a: b", "#\u00e9 \u2014"])
TRAILING_COMMENTS = st.sampled_from(["", "", "", " # note", " #", "#x", " #\u00e9"])


@st.composite
def commented_documents(draw):
    """Documents of the first loop's shapes with comment lines between their lines, and
    sometimes a comment (or a "#" that is none) after a value: ASCII or beyond."""
    lines = draw(first_loop_documents()).split("\n")
    for _ in range(draw(st.integers(1, 3))):
        lines.insert(draw(st.integers(0, len(lines))), draw(COMMENTS))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] += draw(TRAILING_COMMENTS)
    return "\n".join(lines)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commented_documents())
@example("# c\nname: x\ndescription: plain words\n")
@example("a: x #c\n")
@example("a: x#c\nb: 'q #'\nc: \"r # s\"\n")
@example("# \u00e9\na: caf\u00e9 # x\n")
def test_commented_documents_agree_with_pyyaml_and_with_the_per_text_checks(src):
    """A document with comments, clean otherwise, takes the second loop's shortcuts (a plain
    value with " #" in it does not); its answer is PyYAML's and the one the per-text checks
    give, FALLBACK included."""
    _check_against_the_per_text_checks(src)


def test_a_commented_document_takes_the_shortcuts_unless_a_value_has_a_comment():
    """A plain or quoted value of a document with comment lines is taken as it stands (not kept
    in _values); a "\\", a tab or a character Python does not call printable anywhere sends
    every value through the per-text checks; a value with " #" in it ends before it (PyYAML
    reads a comment), which the fast path leaves to PyYAML."""
    src = "# kept by the docs team\nname: docs-helper-7\ndescription: Rewrite page 7.\nv: '1.7'\n"
    for doc in (src, src.replace("docs team", "\u00e9quipe")):
        fastyaml._values.clear()
        assert _same(_check(doc), {"name": "docs-helper-7", "description": "Rewrite page 7.",
                                   "v": "1.7"}), doc
        assert not fastyaml._values, doc
    for doc in (src.replace("team", "team\u00a0"), src + "w: x\\y\n", src + "# \t\n",
                src + "w: x\ty\n", src + "w: x\x07\n", src + "w: x\ry\n"):
        fastyaml._values.clear()
        _check(doc)
        assert "docs-helper-7" in fastyaml._values or fastyaml.parse(doc) is FALLBACK, doc
    assert fastyaml.parse(src + "w: x # note\n") is FALLBACK
    # Beyond ASCII, a "\\" is looked for apart (str.isprintable lets it by): an escape.
    assert _check('# \u00e9\nw: "x\\ny"\n') is FALLBACK
    assert _check(src + "w: x#y\n")["w"] == "x#y"
