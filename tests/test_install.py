"""The package as a user installs it: a wheel built from the checkout, installed into a
fresh virtualenv outside it, whose `mallocbench` finds its native parts inside itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import native_programs
from mallocbench.native import shim_path
from mallocbench.replay import preload
from mallocbench.replay import trace as tracemod

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH and a cwd outside the checkout: nothing of the checkout is importable.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env = {k: v for k, v in env.items() if not k.startswith("MALLOCBENCH_")}
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv holding the wheel. uv builds it and installs the pinned
    dependencies from its cache (PyPI on a clean machine), in seconds rather than pip's
    minutes."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv is not None, "uv is pinned in the dev extras: run `make setup`"
    work = tmp_path_factory.mktemp("install")
    dist = work / "dist"
    built = run(uv, "build", "--wheel", "--out-dir", dist, ROOT, cwd=work, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("mallocbench-*.whl")
    venv = work / "venv"
    made = run(uv, "venv", "--python", sys.executable, venv, cwd=work)
    assert made.returncode == 0, made.stderr
    added = run(
        uv, "pip", "install", "--python", venv / "bin" / "python", "-c", ROOT / "constraints.txt",
        wheel, cwd=work, timeout=300,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr[-3000:]
    return venv / "bin"


def test_the_installed_command_runs_and_finds_its_native_parts(
    installed: Path, tmp_path: Path
) -> None:
    helped = run(installed / "mallocbench", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "install-shim" in helped.stdout, helped.stderr
    doctor = run(installed / "mallocbench", "doctor", "--json", cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    site = installed.parent / "lib"
    for part in ("recording shim", "replayer", "pattern driver"):
        assert checks[part]["found"], checks[part]
        # Inside the venv, not the checkout's native/build.
        assert Path(checks[part]["detail"]).is_relative_to(site), checks[part]
    assert checks["allocator glibc"]["found"], checks
    lines = run(installed / "mallocbench", "doctor", cwd=tmp_path).stdout
    assert lines.splitlines()[0].split()[:3] == ["ok", "server", "build"], lines


def test_the_installed_shim_records_a_program(installed: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    shim = run(installed / "mallocbench", "install-shim", "--prefix", prefix, cwd=tmp_path)
    assert shim.returncode == 0, shim.stderr
    path = Path(shim.stdout.strip())
    assert path == prefix / "lib" / "mallocbench" / "libmbrecord.so"
    assert path.stat().st_mode & 0o777 == 0o644
    linger = native_programs.build("linger", tmp_path)
    ctl = tmp_path / "ctl"
    env = dict(os.environ, LD_PRELOAD=str(path), MBRECORD_CONTROL=str(ctl))
    proc = subprocess.Popen(
        [str(linger), f"{ctl}.status", "30"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 10
        while preload.shim_loaded(proc.pid) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        out = tmp_path / "trace.mbt"
        recorded = run(
            installed / "mallocbench", "record", "--pid", str(proc.pid), "--seconds", "1",
            "--out", out, cwd=tmp_path,
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert recorded.returncode == 0, recorded.stderr
    info = tracemod.check(out)
    assert info.data["calls_present"] > 100, info.data


def test_a_drop_in_preloads_the_system_wide_shim_once_installed(tmp_path: Path) -> None:
    """A unit with ProtectHome=true cannot load a shim under /root or /home: once
    install-shim put one under a system prefix, that is the one a drop-in names."""
    from mallocbench.deploy.install import install_shim, system_shim

    assert system_shim((tmp_path,)) is None
    installed = install_shim(tmp_path)
    assert system_shim((tmp_path / "elsewhere", tmp_path)) == installed
    assert installed.read_bytes() == shim_path().read_bytes()
    assert (installed.parent.stat().st_mode & 0o777, installed.stat().st_mode & 0o777) == (
        0o755,
        0o644,
    )
    assert [p.name for p in installed.parent.iterdir()] == [installed.name]  # no partial left


def test_doctor_names_what_a_missing_piece_blocks(tmp_path: Path) -> None:
    """A host without sysbench on PATH and with a shim override that points nowhere:
    each line says what is missing and what cannot run without it."""
    from cli_runner import run_cli

    env = {"PATH": str(tmp_path), "MALLOCBENCH_RECORD_SHIM": str(tmp_path / "none.so")}
    found = run_cli("doctor", "--json", env=env)
    assert found.returncode == 0, found.stderr
    checks = {c["name"]: c for c in json.loads(found.stdout)}
    assert checks["sysbench"]["found"] is False and "run" in checks["sysbench"]["blocks"]
    shim = checks["recording shim"]
    assert shim["found"] is False and shim["blocks"] == "record", shim
    assert "MALLOCBENCH_RECORD_SHIM" in shim["detail"], shim
    assert checks["replayer"]["found"] is True  # only what is missing is reported missing
    lines = run_cli("doctor", env=env).stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("MISSING  sysbench"))
    assert lines[at + 1].split()[:1] == ["blocks:"], lines
