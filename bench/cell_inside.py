"""A command cell's cost inside one Lily kernel, against the same kernel showing the same bundle.

    .venv/bin/python bench/cell_inside.py [--n 300] [--no-journal]

``perf.py cell`` times a round trip (execute_request -> idle) on two kernel processes, a
Lily kernel and an ipykernel. This figure takes the processes and the messaging out: inside
one Lily kernel, ``InteractiveShell.run_cell`` of ``/help`` alternates with ``run_cell`` of
``%%python display(B, raw=True)``, where ``B`` is the very bundle ``/help`` shows. Both
cells are stored in the history, published on iopub and journaled alike, so the ratio is
what Lily's command path costs over IPython running the same display from Python.
"""
from __future__ import annotations

import argparse
import ast
import tempfile

import jupyter_client
from perf import row  # perf puts --tree first on the path

_MEASURE = r'''%%python
import time as _t
from lily_kernel.commands import help as _help
from lily_kernel.jupyter.display import bundle as _bundle
_sh = get_ipython()
if NO_JOURNAL:
    _sh._lily.session.journal.path = None
B = _bundle(_help.commands_page(_sh._lily.session.skill_snapshot))
_cases = {"help": "/help", "display": "%%python\ndisplay(B, raw=True)"}
_times = {k: [] for k in _cases}
for _i in range(N):
    for _k in (("help", "display") if _i % 2 else ("display", "help")):
        _a = _t.perf_counter()
        _sh.run_cell(_cases[_k], store_history=True)
        _times[_k].append(_t.perf_counter() - _a)
import sys as _s
_s.__stderr__.flush()
print("RESULT", repr(_times))
'''


def _run(kc: jupyter_client.BlockingKernelClient, code: str) -> str:
    msg_id = kc.execute(code)
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=600)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(out)


def main() -> None:
    """Print one ratio line: ``/help`` over ``%%python display(B)`` in the same kernel."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--no-journal", action="store_true",
                    help="for the floor: the session writes no journal records while measured")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as workspace:  # its journal goes there, not here
        km, kc = jupyter_client.manager.start_new_kernel(kernel_name="lily", cwd=workspace)
        try:
            _run(kc, "/help")  # the first Lily cell loads the core
            text = _run(kc, _MEASURE.replace("range(N)", f"range({args.n})")
                         .replace("NO_JOURNAL", str(args.no_journal)))
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    times = ast.literal_eval(text.split("RESULT", 1)[1].strip())
    row("command cell `/help` inside one kernel", times["help"], times["display"],
        "same kernel `%%python display(B)`")


if __name__ == "__main__":
    main()
