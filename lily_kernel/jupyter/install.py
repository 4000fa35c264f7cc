"""Install the ``lily`` kernelspec (kept apart from the kernel, as bash_kernel does)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lily_kernel.skills.paths import bundled

KERNEL_NAME = "lily"


def install(user: bool = False, sys_prefix: bool = False, prefix: str | None = None) -> str:
    """Install the kernelspec and return the folder it went to.

    At most one of ``user``, ``sys_prefix`` and ``prefix`` may be given; with
    none, the system-wide Jupyter data folder is used. The spec runs this
    Python, so a kernel installed from a virtual environment uses it.
    """
    if sum((bool(user), bool(sys_prefix), prefix is not None)) > 1:
        raise ValueError("choose at most one of --user, --sys-prefix and --prefix")
    from jupyter_client.kernelspec import KernelSpecManager

    source = bundled("kernelspec")
    with tempfile.TemporaryDirectory() as tmp:
        spec = json.loads((source / "kernel.json").read_text())
        spec["argv"][0] = sys.executable
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=2))
        for extra in source.iterdir():
            if extra.name != "kernel.json" and extra.is_file():
                shutil.copy(extra, tmp)
        from lily_kernel.jupyter.help_page import PAGE_NAME, page
        (Path(tmp) / PAGE_NAME).write_text(page(), encoding="utf-8")  # the Help menu's page
        # jupyter_client copies the folder with its modes; a temporary folder is 0700, and
        # a shared --sys-prefix/--prefix install must be readable by every user.
        os.chmod(tmp, 0o755)
        for item in Path(tmp).iterdir():
            os.chmod(item, 0o644)
        return KernelSpecManager().install_kernel_spec(
            tmp, KERNEL_NAME, user=user, prefix=sys.prefix if sys_prefix else prefix)
