"""The real image: the Dockerfile built by buildah (no daemon), checked by
container-structure-test, and its entry points started with `buildah run`.

The base is a debootstrap'ed bookworm with Python 3.11 (the official python image cannot be
pulled here), passed as the Dockerfile's BASE_IMAGE. The first run makes the base (~1 min)
and builds every layer; later runs reuse buildah's layer cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from scidmz.api.runtime import dump_runtime_config
from scidmz.demo_loop import local_config
from scidmz.testenv import image
from scidmz.testenv.cluster import REPO_ROOT, free_port
from tests.loops import plaintext_link_spec, render

pytestmark = pytest.mark.timeout(1800)  # a cold build pip-installs every dependency

STRUCTURE = Path(__file__).with_name("structure.yaml")
BASE_CACHE = Path.home() / ".cache" / "scidmz" / f"image-base-{image.SUITE}"


@pytest.fixture(scope="module")
def built() -> image.Build:
    missing = image.missing_tools()
    if missing:
        pytest.fail(f"the image test needs {', '.join(missing)} (hack/system-deps.sh)")
    started = time.monotonic()
    base = image.base_image(image.base_rootfs(BASE_CACHE))
    result = image.build(REPO_ROOT, base)
    print(
        f"\nimage: base ready in {time.monotonic() - started - result.seconds:.0f} s, "
        f"buildah bud {result.seconds:.0f} s"
    )
    return result


def _structure_test(archive: Path, config: Path) -> dict:
    binary = Path(sys.executable).with_name("container-structure-test")
    if not binary.exists():
        pytest.fail("container-structure-test is not installed (the [dev] extra pins it)")
    result = subprocess.run(
        [str(binary), "test", "--driver", "tar", "--image", str(archive), "--config",
         str(config), "--output", "json"],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    report = json.loads(result.stdout[result.stdout.index("{") :])
    report["returncode"] = result.returncode
    return report


PLANTED = "planted: a file the image must not have"


@pytest.fixture(scope="module")
def structure_report(built, tmp_path_factory) -> dict:
    """One run of container-structure-test (~4 min: it unpacks every layer) over the shipped
    checks plus one planted to fail, which shows the tool really reads the image."""
    work = tmp_path_factory.mktemp("image")
    archive = image.archive(built.tag, work / "scidmz.tar")
    config = yaml.safe_load(STRUCTURE.read_text())
    config["fileExistenceTests"].append(
        {"name": PLANTED, "path": "/etc/shadow", "shouldExist": False}
    )
    (work / "structure.yaml").write_text(yaml.safe_dump(config))
    return _structure_test(archive, work / "structure.yaml")


def test_the_image_passes_its_structure_test(structure_report):
    results = {r["Name"]: r for r in structure_report["Results"]}
    shipped = yaml.safe_load(STRUCTURE.read_text())
    expected = 1 + len(shipped["fileExistenceTests"]) + len(shipped["fileContentTests"])
    failed = [r for name, r in results.items() if not name.endswith(PLANTED) and not r["Pass"]]
    assert not failed, failed
    assert structure_report["Pass"] == expected  # every shipped check ran and passed


def test_the_structure_test_catches_a_planted_failure(structure_report):
    results = {r["Name"]: r for r in structure_report["Results"]}
    assert results[f"File Existence Test: {PLANTED}"]["Pass"] is False
    assert structure_report["returncode"] != 0 and structure_report["Fail"] == 1


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except OSError as error:
        return 0, str(error)


def _wait(predicate, timeout_s: float, what: str, logs: list[Path]):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs if p.exists())
    raise AssertionError(f"{what} within {timeout_s} s\n{tails}")


def test_target_collector_and_controller_serve_from_the_image(built, tmp_path):
    """The switch, the collector and the controller each start from the image as user
    10001 and serve: the collector programs the switch and streams samples, the controller
    decides on them (its /state), each answers /metrics."""
    switch, grpc_port, collector_http, controller_http = (free_port() for _ in range(4))
    # processes on one host, as the demo's: plaintext (the channels' mTLS has its own tests)
    rendered = render(link=plaintext_link_spec(sampleTime="500ms"), collector="unused:1")
    config = local_config(rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}")
    shared = tmp_path / "config"
    shared.mkdir(mode=0o755)
    (shared / "config.yaml").write_text(dump_runtime_config(config))
    (shared / "config.yaml").chmod(0o644)
    tmp_path.chmod(0o755)
    logs = {name: tmp_path / f"{name}.log" for name in ("target", "collector", "controller")}
    commands = {
        "target": ["scidmz", "target", "--listen", f"127.0.0.1:{switch}"],
        "collector": ["scidmz", "collector", "--config", "/config/config.yaml",
                      "--http-port", str(collector_http)],
        "controller": ["scidmz", "controller", "--config", "/config/config.yaml",
                       "--http-port", str(controller_http)],
    }  # fmt: skip
    processes = {}
    with image.working_container(built.tag) as container:
        try:
            for name, argv in commands.items():
                processes[name] = image.start_in(
                    container, argv, logs[name], volumes=[(shared, "/config")]
                )  # as the image's user (10001)
            every = list(logs.values())
            _wait(lambda: _get(f"http://127.0.0.1:{collector_http}/readyz")[0] == 200, 120,
                  "the collector ready (switch programmed, samples flowing)", every)  # fmt: skip

            def decided() -> bool:
                status, body = _get(f"http://127.0.0.1:{controller_http}/state")
                state = json.loads(body).get("state") if status == 200 else None
                return bool(state) and state["sequence"] > 2

            _wait(decided, 60, "the controller deciding on samples", every)
            for port in (collector_http, controller_http):
                status, body = _get(f"http://127.0.0.1:{port}/metrics")
                assert status == 200 and "scidmz_" in body
            for name, process in processes.items():
                assert process.poll() is None, f"{name} exited: {logs[name].read_text()}"
        finally:
            # the controller first: its shaper (the simulator's, in the switch) must still
            # be there when it restores the fail-safe rate on SIGTERM
            codes = {name: image.stop(p) for name, p in reversed(processes.items())}
    assert codes["controller"] == 0, logs["controller"].read_text()[-2000:]
    assert "fail-safe rates restored" in logs["controller"].read_text()  # on SIGTERM


def test_entry_points_run_as_the_images_user(built, tmp_path):
    with image.working_container(built.tag) as container:
        process = image.start_in(container, ["id", "-u"], tmp_path / "id.log", user=None)
        assert process.wait(timeout=60) == 0
    assert (tmp_path / "id.log").read_text().strip() == "10001"


def test_the_software_taps_capture_program_is_prebuilt_for_the_image(built, tmp_path):
    """`scidmz target --source packets` finds tapreader in the image (no compiler there) and
    it runs as the image's user: without arguments it prints its usage and exits 2."""
    probe = (
        "import subprocess; from scidmz.lab.native import binary; path = binary('tapreader'); "
        "print(path); done = subprocess.run([str(path)], capture_output=True, text=True); "
        "print(done.returncode, done.stderr.strip())"
    )
    with image.working_container(built.tag) as container:
        process = image.start_in(container, ["python", "-c", probe], tmp_path / "probe.log")
        assert process.wait(timeout=60) == 0, (tmp_path / "probe.log").read_text()
    path, result = (tmp_path / "probe.log").read_text().strip().splitlines()[-2:]
    assert path.startswith("/usr/lib/scidmz/native/tapreader-")
    assert result.startswith("2 usage:") and "IFACE=ROLE" in result
