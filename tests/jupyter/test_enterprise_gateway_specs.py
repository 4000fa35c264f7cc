"""What ``python -m lily_kernel install --enterprise-gateway DIR`` writes, the kernel-pod
template and the kernel image recipe (docs/deploy.md). The image itself is built on a
machine with Docker, not here; these tests read the recipe."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from traitlets.utils.importstring import import_item

from lily_kernel.jupyter.enterprise_gateway import KERNEL_CLASS
from lily_kernel.jupyter.kernel import LilyKernel

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "kernel-image" / "Dockerfile"
SECRET = "sk-installers-own-key-0123456789"
EG_PROXIES = "enterprise_gateway.services.processproxies"
PROXIES = {
    "lily_kubernetes": f"{EG_PROXIES}.k8s.KubernetesProcessProxy",
    "lily_docker": f"{EG_PROXIES}.docker_swarm.DockerSwarmProcessProxy",
}


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("eg") / "kernels"
    # secrets in the installing shell must not travel into the specs
    env = dict(os.environ, OPENAI_API_KEY=SECRET, LILY_OUTBOX_TOKEN=SECRET)
    out = subprocess.run([sys.executable, "-m", "lily_kernel", "install", "--enterprise-gateway",
                          str(target), "--image", "registry.example/lily-kernel:0.1.0"],
                         capture_output=True, text=True, check=True, env=env)
    assert "lily_kubernetes" in out.stdout and "lily_docker" in out.stdout
    return target


@pytest.mark.parametrize("name", sorted(PROXIES))
def test_each_spec_is_an_eg_container_spec_for_lilys_kernel_class(specs, name):
    folder = specs / name
    spec = json.loads((folder / "kernel.json").read_text())
    assert {"argv", "display_name", "language", "metadata", "env"} <= spec.keys()
    proxy = spec["metadata"]["process_proxy"]
    assert proxy["class_name"] == PROXIES[name]
    assert proxy["config"]["image_name"] == "registry.example/lily-kernel:0.1.0"
    argv = spec["argv"]
    launcher = "launch_kubernetes.py" if name == "lily_kubernetes" else "launch_docker.py"
    assert argv[:2] == ["python", f"/usr/local/share/jupyter/kernels/{name}/scripts/{launcher}"]
    for flag, placeholder in (("--kernel-id", "{kernel_id}"), ("--port-range", "{port_range}"),
                              ("--response-address", "{response_address}"),
                              ("--public-key", "{public_key}")):
        assert argv[argv.index(flag) + 1] == placeholder
    class_name = argv[argv.index("--kernel-class-name") + 1]
    assert class_name == KERNEL_CLASS
    assert import_item(class_name) is LilyKernel  # what EG's launcher imports in the pod
    for logo in ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg"):
        assert (folder / logo).stat().st_size > 0


@pytest.mark.parametrize("name", sorted(PROXIES))
def test_no_secret_in_a_kernelspec_env(specs, name):
    """EG copies the kernelspec's env into the pod spec in the clear: no key goes there."""
    spec = json.loads((specs / name / "kernel.json").read_text())
    assert spec["env"] == {"LILY_SHARED_WORKSPACE": "1"}
    text = "".join(p.read_text() for p in (specs / name).rglob("*") if p.suffix in (".json", ".j2"))
    assert SECRET not in text
    assert not re.search(r'"(OPENAI_API_KEY|LILY_OUTBOX_TOKEN)"', json.dumps(spec))


def test_plain_docker_and_a_kernels_path(tmp_path):
    subprocess.run([sys.executable, "-m", "lily_kernel", "install", "--enterprise-gateway",
                    str(tmp_path), "--docker", "docker", "--kernels-path", "/srv/kernels"],
                   check=True, capture_output=True)
    spec = json.loads((tmp_path / "lily_docker" / "kernel.json").read_text())
    assert spec["metadata"]["process_proxy"]["class_name"].endswith(".DockerProcessProxy")
    assert spec["argv"][1] == "/srv/kernels/lily_docker/scripts/launch_docker.py"


def test_enterprise_gateway_and_a_local_target_do_not_mix(tmp_path):
    out = subprocess.run([sys.executable, "-m", "lily_kernel", "install", "--user",
                          "--enterprise-gateway", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2 and "--enterprise-gateway" in out.stderr
    assert not any(tmp_path.iterdir())


def render_pod(specs: Path, **keywords: object) -> dict:
    """The pod EG's launch_kubernetes.py would create: the template rendered as it renders
    it (jinja2, trim_blocks, lstrip_blocks, from the spec's scripts/), every KERNEL_ value
    in lower case."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(specs / "lily_kubernetes" / "scripts"),
                             trim_blocks=True, lstrip_blocks=True)
    values = {"kernel_pod_name": "alice-1234", "kernel_namespace": "alice",
              "kernel_id": "1234", "kernel_service_account_name": "default",
              "kernel_image": "registry.example/lily-kernel:0.1.0", **keywords}
    return yaml.safe_load(env.get_template("kernel-pod.yaml.j2").render(**values))


def test_the_pod_takes_secrets_from_a_kubernetes_secret(specs):
    pod = render_pod(specs)
    assert pod["kind"] == "Pod" and pod["metadata"]["labels"]["kernel_id"] == "1234"
    assert pod["metadata"]["labels"]["component"] == "kernel"  # EG's selector
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    for name, key in (("OPENAI_API_KEY", "openai-api-key"), ("LILY_OUTBOX_TOKEN", "outbox-token")):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "lily-secrets", "key": key,
                                                           "optional": True}
    assert pod["spec"]["securityContext"] == {"runAsUser": 1000, "runAsGroup": 100, "fsGroup": 100}
    assert "workingDir" not in container  # no KERNEL_WORKING_DIR: the image's WORKDIR


def test_the_workspace_is_the_users_volume(specs):
    claim = {"name": "workspace", "persistentVolumeClaim": {"claimName": "alice-notebooks"}}
    mount = {"name": "workspace", "mountPath": "/home/jovyan/work"}
    pod = render_pod(specs, kernel_working_dir="/home/jovyan/work/analysis",
                     kernel_volumes=[claim], kernel_volume_mounts=[mount])
    container = pod["spec"]["containers"][0]
    assert container["workingDir"] == "/home/jovyan/work/analysis"
    assert container["volumeMounts"] == [mount]
    assert pod["spec"]["volumes"] == [claim]


def dockerfile() -> str:
    # continuation lines joined, comments dropped: one instruction a line
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    return re.sub(r"\\\n\s*", " ", "\n".join(lines))


def test_the_kernel_image_follows_egs_conventions():
    text = dockerfile()
    instructions = [ln.strip() for ln in text.splitlines() if ln.strip()]
    assert "FROM elyra/kernel-py:${EG_VERSION} AS eg-kernel-files" in instructions
    for item in ("bootstrap-kernel.sh", "kernel-launchers"):  # EG's kernel image files
        copy = f"COPY --from=eg-kernel-files --chown=1000:100 /usr/local/bin/{item} "
        assert any(ln.startswith(copy) for ln in instructions), item
    users = [ln.split()[1] for ln in instructions if ln.startswith("USER ")]
    assert users[-1] == "1000:100"  # the kernel runs as jovyan:users, never root
    assert "ENV KERNEL_LANGUAGE=python" in instructions
    assert instructions[-1] == 'CMD ["/usr/local/bin/bootstrap-kernel.sh"]'


def test_the_kernel_image_installs_lily_and_checks_its_class_and_skills():
    text = dockerfile()
    assert re.search(r"^COPY --chown=1000:100 \. /tmp/lily$", text, re.M)
    install = next(ln for ln in text.splitlines() if ln.startswith("RUN pip install"))
    assert "/tmp/lily " in install and "pycryptodomex" in install
    assert "-e " not in install  # a wheel install: the bundled skills travel in the package
    assert f"import_item('{KERNEL_CLASS}')" in install
    assert "bundled('skills')" in install
    ignored = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".venv-eg", ".git"} <= set(ignored)
    assert not {"lily_kernel", "skills", "persona", "kernelspec", "deploy"} & set(ignored)
