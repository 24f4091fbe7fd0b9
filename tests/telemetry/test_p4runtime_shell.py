"""An independent P4Runtime client against `scidmz target`: p4runtime-shell (the P4.org
community shell, its own venv because it pins protobuf < 3.21) wins arbitration, fetches the
pipeline, writes and reads entries, and gets the P4Runtime error codes the spec names. The
switch must not only pass its own client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scidmz.contract.pipeline import build_p4info
from scidmz.testenv.cluster import free_port

HERE = Path(__file__).resolve().parent
SHELL_VERSION = "0.0.6"
PINS = [f"p4runtime-shell=={SHELL_VERSION}", "protobuf==3.20.3", "p4runtime==1.4.1",
        "grpcio==1.85.1", "googleapis-common-protos==1.73.0"]  # fmt: skip


@pytest.fixture(scope="module")
def shell_python() -> Path:
    """The venv's python (built once into ~/.cache/scidmz, ~10 s from PyPI)."""
    venv = Path.home() / ".cache" / "scidmz" / f"p4runtime-shell-{SHELL_VERSION}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PINS],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.fail(f"cannot install p4runtime-shell from PyPI:\n{result.stderr[-2000:]}")
        stamp.touch()
    return python


@pytest.fixture
def target():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", "target", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()  # printed once it serves
    assert "scidmz target" in line, line
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


def _shell(python: Path, address: str, election: int) -> dict:
    result = subprocess.run(
        [str(python), str(HERE / "p4rt_shell_client.py"), address, str(election)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_p4runtime_shell_as_primary(shell_python, target):
    out = _shell(shell_python, target, election=5)
    assert out["tables"] == sorted(t.preamble.name for t in build_p4info("v1model").tables)
    assert out["insert"] == "OK"
    assert out["read"] == [["0001", "01"]]
    assert out["duplicate"] == "ALREADY_EXISTS"
    assert out["modify"] == "OK"
    assert out["read_after_modify"] == ["03"]
    assert out["bad_port"] == "INVALID_ARGUMENT"  # port 300 is no port of the device
    assert out["delete"] == "OK"
    assert out["delete_missing"] == "NOT_FOUND"
    assert out["counters"] > 0


def test_p4runtime_shell_as_backup_may_read_but_not_write(shell_python, target):
    holder = subprocess.Popen(
        [str(shell_python), str(HERE / "p4rt_shell_client.py"), target, "20", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert json.loads(holder.stdout.readline()) == {"held": 20}
        out = _shell(shell_python, target, election=5)
    finally:
        holder.terminate()
        holder.wait(timeout=10)
    assert out["insert"] == "PERMISSION_DENIED"
    assert out["read"] == []  # reads are open to a backup
    assert out["counters"] > 0
