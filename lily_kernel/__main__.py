"""``python -m lily_kernel install [...]`` installs the kernelspec (or, with
``--enterprise-gateway DIR``, writes Enterprise Gateway's); otherwise start the kernel."""
from __future__ import annotations

import argparse
import sys


def install_parser() -> argparse.ArgumentParser:
    """The options of ``python -m lily_kernel install``."""
    from lily_kernel.cli import add_install_args
    from lily_kernel.jupyter import enterprise_gateway
    p = argparse.ArgumentParser(prog="python -m lily_kernel install",
                                description="Install the Lily kernelspec.")
    add_install_args(p)
    gw = p.add_argument_group("Enterprise Gateway (docs/deploy.md)")
    gw.add_argument("--enterprise-gateway", metavar="DIR",
                    help="write the kernelspecs lily_kubernetes and lily_docker under DIR "
                         "instead of installing the local one")
    image = enterprise_gateway.DEFAULT_IMAGE
    gw.add_argument("--image", default=image,
                    help=f"the Lily kernel image the pods run (default {image})")
    gw.add_argument("--kernels-path", default=enterprise_gateway.KERNELS_PATH,
                    help="where the gateway finds its kernelspecs; the launchers' paths "
                         f"start there (default {enterprise_gateway.KERNELS_PATH})")
    gw.add_argument("--docker", choices=sorted(enterprise_gateway.DOCKER_PROXIES), default="swarm",
                    help="lily_docker's process proxy: a Docker Swarm service (default) "
                         "or a container on the gateway's Docker host")
    return p


def main(argv: list[str]) -> int:
    """Install a kernelspec, or start the kernel."""
    if argv[:1] == ["install"]:
        p = install_parser()
        args = p.parse_args(argv[1:])
        if args.enterprise_gateway is not None:
            if args.user or args.sys_prefix or args.prefix is not None:
                p.error("--enterprise-gateway writes to DIR: "
                        "drop --user, --sys-prefix and --prefix")
            from lily_kernel.jupyter.enterprise_gateway import install_enterprise_gateway
            for folder in install_enterprise_gateway(args.enterprise_gateway, args.image,
                                                     args.kernels_path, args.docker):
                print(f"Wrote Enterprise Gateway kernelspec '{folder.name}' in {folder}")
            print("Next: add EG's launcher scripts and the image (docs/deploy.md).")
            return 0
        from lily_kernel.jupyter.install import install
        where = install(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix)
        print(f"Installed kernelspec 'lily' in {where}")
        return 0
    from lily_kernel.jupyter.kernel import launch
    launch()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
