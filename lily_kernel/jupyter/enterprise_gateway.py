"""Kernelspecs for Jupyter Enterprise Gateway: Lily in a Kubernetes pod or a Docker container.

``python -m lily_kernel install --enterprise-gateway DIR`` writes ``DIR/lily_kubernetes`` and
``DIR/lily_docker``. Each names an EG process proxy and EG's own container launcher
(``scripts/launch_kubernetes.py`` / ``scripts/launch_docker.py``, shipped in EG's image, not
in its wheel) with ``--kernel-class-name`` set to Lily's kernel class: inside the kernel
image, EG's Python launcher ends with ``IPKernelApp.instance(kernel_class=LilyKernel)``.
The Kubernetes spec also gets Lily's kernel-pod template (secrets from a Kubernetes Secret,
the workspace on a volume). The walk-through: docs/deploy.md.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from lily_kernel.skills.paths import bundled

KERNEL_CLASS = "lily_kernel.jupyter.kernel.LilyKernel"
KUBERNETES_PROXY = "enterprise_gateway.services.processproxies.k8s.KubernetesProcessProxy"
DOCKER_PROXIES = {
    "swarm": "enterprise_gateway.services.processproxies.docker_swarm.DockerSwarmProcessProxy",
    "docker": "enterprise_gateway.services.processproxies.docker_swarm.DockerProcessProxy",
}
# Where EG looks for kernelspecs in its own image (and where its specs' argv point).
KERNELS_PATH = "/usr/local/share/jupyter/kernels"
DEFAULT_IMAGE = "lily-kernel:latest"
POD_TEMPLATE = "kernel-pod.yaml.j2"
# (kernelspec name, display name suffix, EG launcher script)
SPECS = {"lily_kubernetes": ("on Kubernetes", "launch_kubernetes.py"),
         "lily_docker": ("on Docker", "launch_docker.py")}


def kernelspec(name: str, image: str = DEFAULT_IMAGE, kernels_path: str = KERNELS_PATH,
               docker: str = "swarm") -> dict[str, Any]:
    """The ``kernel.json`` of the EG kernelspec ``name`` (``lily_kubernetes``, ``lily_docker``).

    The argv is EG's container launcher with the placeholders EG fills in, then
    ``--kernel-class-name`` Lily's kernel. ``env`` holds no secret (EG copies it into
    the pod spec in the clear): only ``LILY_SHARED_WORKSPACE``, which tells Lily its
    workspace may be a volume that other pods write too.
    """
    suffix, launcher = SPECS[name]
    base = json.loads((bundled("kernelspec") / "kernel.json").read_text())
    proxy = KUBERNETES_PROXY if name == "lily_kubernetes" else DOCKER_PROXIES[docker]
    return {
        "display_name": f"{base['display_name']} {suffix}",
        "language": base["language"],
        "interrupt_mode": "signal",
        "metadata": {
            "process_proxy": {"class_name": proxy, "config": {"image_name": image}},
            "debugger": False,
        },
        "env": {"LILY_SHARED_WORKSPACE": "1"},
        "argv": [
            "python", f"{kernels_path.rstrip('/')}/{name}/scripts/{launcher}",
            "--kernel-id", "{kernel_id}",
            "--port-range", "{port_range}",
            "--response-address", "{response_address}",
            "--public-key", "{public_key}",
            "--kernel-class-name", KERNEL_CLASS,
        ],
    }


def install_enterprise_gateway(target: str | Path, image: str = DEFAULT_IMAGE,
                               kernels_path: str = KERNELS_PATH,
                               docker: str = "swarm") -> list[Path]:
    """Write the EG kernelspecs under ``target`` and return their folders.

    Each folder gets ``kernel.json`` and the logos; ``lily_kubernetes/scripts/`` also gets
    Lily's kernel-pod template. EG's launcher scripts are not written here: they come
    from EG's own kernelspecs (docs/deploy.md#the-gateway-image).
    """
    if docker not in DOCKER_PROXIES:
        raise ValueError(f"--docker must be one of {', '.join(DOCKER_PROXIES)}")
    source = bundled("kernelspec")
    written: list[Path] = []
    for name in SPECS:
        folder = Path(target) / name
        (folder / "scripts").mkdir(parents=True, exist_ok=True)
        spec = kernelspec(name, image, kernels_path, docker)
        (folder / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
        for logo in source.glob("logo-*"):
            shutil.copy(logo, folder / logo.name)
        if name == "lily_kubernetes":
            shutil.copy(bundled("deploy") / "kubernetes" / POD_TEMPLATE,
                        folder / "scripts" / POD_TEMPLATE)
        written.append(folder)
    return written
