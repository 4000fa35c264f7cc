"""Jupyter messaging-protocol conformance of the Lily kernel (jupyter_kernel_test).

The kernel runs in a temporary workspace with an empty user skill root, so the
skills it sees are exactly the bundled ones (plan_compiler with alias /plan,
todo_scan with alias /todos, ...).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import jupyter_kernel_test
from jupyter_client.manager import start_new_kernel
from kernel_support import STARTUP_TIMEOUT, make_world


class LilyKernelConformance(jupyter_kernel_test.KernelTests):
    kernel_name = "lily"
    language_name = "python"
    file_extension = ".py"

    @classmethod
    def setUpClass(cls) -> None:
        cls._tmp = Path(tempfile.mkdtemp(prefix="lily-conformance-"))
        world = make_world(cls._tmp)
        cls.km, cls.kc = start_new_kernel(kernel_name=cls.kernel_name, cwd=str(world.workspace),
                                          env=world.env, startup_timeout=STARTUP_TIMEOUT)

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls._tmp, ignore_errors=True)

    # execute: %%python cells are ordinary Python
    code_hello_world = "%%python\nprint('hello, world')"
    code_stderr = "%%python\nimport sys; print('test', file=sys.stderr)"
    code_execute_result = [{"code": "%%python\n6*7", "result": "42"}]
    code_display_data = [
        {"code": "%%python\nfrom IPython.display import HTML, display; display(HTML('<b>test</b>'))",
         "mime": "text/html"},
        {"code": "/help", "mime": "text/markdown"},
    ]  # not /skills: its widget sends comm_open, which jupyter_kernel_test's schema lacks
    code_clear_output = "%%python\nfrom IPython.display import clear_output; clear_output()"
    # the pager: % cells are IPython's
    code_page_something = "%pinfo print"
    # a failed command: exactly one output, an error
    code_generate_error = "/nope"

    # completion of / commands, skill names, agents and aliases
    completion_samples = [
        {"text": "/sk", "matches": ["/skill", "/skills"]},
        {"text": "/skill pla", "matches": ["plan_compiler"]},
        {"text": "/agent rev", "matches": ["reviewer"]},
        {"text": "/to", "matches": ["/todos"]},
        {"text": "/help plan_", "matches": ["plan_compiler"]},
        {"text": "/zzz", "matches": []},
    ]

    # is_complete: commands and prose run on Enter; %%python follows Python's rules
    complete_code_samples = ["/skills", "/help plan_compiler", "What is a skill?",
                             "%%python\ndef f():\n    pass\n", "%pwd"]
    incomplete_code_samples = ["%%python\ndef f():", "%%python\nx = (1,"]
    invalid_code_samples = ["%%python\n1 +", "%%python\n)"]

    # inspection of an alias (found in the session's snapshot)
    code_inspect_sample = "/plan"

    # history: what IPython records for %%python cells. Not "range": IPython answers a
    # range of the current session with session number 0, so the stock python3
    # kernel fails that check the same way.
    code_history_pattern = "*6?7"
    supported_history_operations = ("tail", "search")
