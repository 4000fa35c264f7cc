"""``python -m lily_kernel install [...]`` installs the kernelspec; otherwise start the kernel."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"]:
        from lily_kernel.cli import add_install_args
        from lily_kernel.jupyter.install import install
        p = argparse.ArgumentParser(prog="python -m lily_kernel install",
                                    description="Install the Lily kernelspec.")
        add_install_args(p)
        args = p.parse_args(argv[1:])
        where = install(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix)
        print(f"Installed kernelspec 'lily' in {where}")
        return 0
    from lily_kernel.jupyter.kernel import launch
    launch()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
