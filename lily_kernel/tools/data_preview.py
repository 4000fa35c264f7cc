"""The start of a data file a request names, attached for a small model
(docs/agent.md#small-model-profile).

A question about a table is answered by code, and code written without the table's column
names guesses them: asked for the mean fare of ``test_ave.csv``, Qwen2.5-Coder-1.5B wrote
``data['fare']`` for a column named ``Fare`` (a KeyError, a retry, often a wrong answer).
The agents that do this job well look at the table before they write the code: DA-Agent's
first step reads ``df.head()``, Colab's Data Science Agent profiles the data first. So a
request of the small profile naming a data file the workspace holds gets that file's
header and first rows attached, as an ``@path`` mention would attach the file, so the
model's first code can name the columns right. It costs one step's worth of nothing: no
model call, no code run.

The file is read through ``read``, decided by the one gate as the model's own call
(tools/gate.py, ``Route.MODEL``): a protected file, a secret-looking name, the policy's deny
list attach nothing; a live secret's value in it is masked, as in the model's own read.
Only text tables are previewed (CSV, TSV, JSON lines); a binary format
(Parquet, Excel) says how to read it instead. The preview is bounded: :data:`ROWS` rows,
:data:`LINE_CHARS` characters a line, :data:`FILES` files a request.
"""
from __future__ import annotations

import csv
import io
import re
from typing import TYPE_CHECKING

from lily_kernel import redaction
from lily_kernel.errors import ToolError
from lily_kernel.tools import gate

if TYPE_CHECKING:
    from lily_kernel.session.session import Session

ROWS = 3  # data rows shown after the header
LINE_CHARS = 240  # of one line
FILES = 2  # data files previewed per request
#: What begins the attachment in the request as sent; what is restated after a tool result
#: stops before it (agent/small_steps.request_of).
MARK = "\n\n(Attached by Lily: the start of "
_TEXT = re.compile(r"\.(?:csv|tsv|jsonl|ndjson)$", re.IGNORECASE)


def previews(session: Session, text: str, names: list[str]) -> str:
    """The attachment for ``names``, the data files ``text`` names that the workspace holds
    (tools/offering.data_files; at most :data:`FILES`), or "" when there is none; each read
    as the model's ``read`` would be."""
    out = []
    for name in names[:FILES]:
        if f"@{name}" in text:  # the user's own mention attached it already
            continue
        shown = _preview(session, name)
        if shown:
            out.append(shown)
    return "".join(out)


def _preview(session: Session, name: str) -> str:
    if not _TEXT.search(name):
        return (f"{MARK}{name}: a binary table; read it with pandas, e.g. "
                f"pd.read_{'parquet' if 'parquet' in name.lower() else 'excel'}('{name}').)")
    tool = session.tools.get("read")
    said = gate.decide(session, "read", {"path": name}, gate.Route.MODEL)
    if tool is None or not isinstance(said, gate.Runs):
        return ""  # refused, or it would ask: nothing is read for the preview
    try:  # masked as the model's own read is (agent/request.py): it goes to the endpoint
        body = redaction.redact(gate.run(tool, {"path": name}, said).text, session.environ)
    except ToolError:
        return ""
    lines = body.splitlines()
    head = [_clip(line) for line in lines[:ROWS + 1]]
    if not head:
        return ""
    columns = _columns(lines[0], name)
    described = f"{len(columns)} columns: {_clip(', '.join(columns))}; " \
        if len(columns) > 1 else ""
    rows = "" if "[… cut here" in body else f"{max(len(lines) - 1, 0)} rows; "
    shown = "\n".join(head)
    return f"{MARK}{name}: {rows}{described}its first lines:\n{shown})"


def _columns(header: str, name: str) -> list[str]:
    if name.lower().endswith((".jsonl", ".ndjson")):
        return []
    delimiter = "\t" if name.lower().endswith(".tsv") or "\t" in header else ","
    try:
        row = next(csv.reader(io.StringIO(header), delimiter=delimiter))
    except (csv.Error, StopIteration):
        return []
    return [c.strip() for c in row]


def _clip(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1] + "…"
