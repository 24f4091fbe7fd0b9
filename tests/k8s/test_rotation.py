"""Certificates that rotate while the loop runs: an operator whose CA is valid for two
minutes (leaves for thirty seconds) takes a link's loop through a CA rollover and past the
first CA's expiry, on the real API server, with the loop's processes real and their
identities projected from the Secrets as the kubelet projects them (a second late).

Nothing restarts (the processes are the same, the Deployments' pod templates unchanged),
each certificate is reissued once per renewal (no storm), and control has no gap: the
controller decides on every sample, never falls back to its fail-safe, and the operator
keeps reading its /state (its own certificate renewed as it runs). The machine's clock is
never moved: the lifetimes are short instead.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from scidmz.api.runtime import CONFIG_KEY, RuntimeConfig, dump_runtime_config
from scidmz.auth.mtls import TlsConfigError, http_client_context, load_mutual_tls
from scidmz.demo_loop import local_config
from scidmz.metrics.http import fetch_state
from scidmz.testenv.cluster import free_port
from scidmz.testenv.identities import OPERATOR_NAMESPACE
from scidmz.testenv.processes import stop_all
from scidmz.testenv.projection import project_like_kubelet
from tests.k8s.conftest import secret_data, wait_for
from tests.loops import link_object, plaintext_link_spec, policy_object

CA_SECRET = "scidmz-ca-rotation"
LIFETIMES = {
    "SCIDMZ_CA_SECRET": CA_SECRET,
    "SCIDMZ_CA_VALIDITY_S": "120",
    "SCIDMZ_CA_RENEW_BEFORE_S": "60",
    "SCIDMZ_CA_OVERLAP_S": "15",
    "SCIDMZ_LEAF_VALIDITY_S": "30",
}


@pytest.fixture
def short_lived(operator):
    """The session's operator restarted with short certificate lifetimes and a CA of its
    own (then restarted as it was)."""
    operator.stop()
    operator.plane.kubectl("delete", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE,
                           "--ignore-not-found")  # fmt: skip
    operator.start(**LIFETIMES)
    try:
        yield operator
    finally:
        operator.stop()
        operator.start()


def _serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


class Kubelet:
    """Projects Secrets into directories as the kubelet does (atomically, a version at a
    time), every ``period_s``, until stopped."""

    def __init__(self, plane, secrets: dict[str, Path], period_s: float = 1.0) -> None:
        self.plane, self.secrets, self.period_s = plane, secrets, period_s
        self._seen: dict[str, dict[str, bytes]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sync(self) -> None:
        for name, directory in self.secrets.items():
            data = secret_data(self.plane, name)
            if data and data != self._seen.get(name):
                project_like_kubelet(directory, {k: v.decode() for k, v in data.items()})
                self._seen[name] = data

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sync()

    def __enter__(self) -> Kubelet:
        self.sync()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _run(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "scidmz.cli", *args], env=os.environ.copy(),
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_the_loop_runs_through_a_ca_rollover_and_its_expiry_without_a_restart_or_a_gap(
    short_lived, kube, links, tmp_path
):
    operator, plane = short_lived, short_lived.plane
    name = links.name("rotate")
    spec = plaintext_link_spec(campus={"remotePrefix": "198.51.100.0/24"},
                               controller={"strategy": "pi"})  # fmt: skip
    links.apply({**link_object(name), "spec": spec})
    kube.apply(policy_object("rotate", linkRef={"name": name}))
    config_map = wait_for(
        lambda: (c := links.child("configmap", f"{name}-config"))
        and "target_rate_bps: 600000000.0" in c["data"][CONFIG_KEY] and c,
        30, "the ConfigMap holding the policy",
    )  # fmt: skip
    first_ca = secret_data(plane, CA_SECRET)["tls.crt"]
    ca_expires = x509.load_pem_x509_certificate(first_ca).not_valid_after_utc
    dirs = {c: tmp_path / f"{c}-identity" for c in ("collector", "controller", "reader")}
    secrets = {
        f"{name}-collector-tls": dirs["collector"],
        f"{name}-controller-tls": dirs["controller"],
        "scidmz-metrics-reader": dirs["reader"],
    }
    switch, grpc_port = free_port(), free_port()
    rendered = RuntimeConfig.model_validate(yaml.safe_load(config_map["data"][CONFIG_KEY]))
    for component in ("collector", "controller"):
        local = local_config(
            rendered, f"127.0.0.1:{switch}", f"127.0.0.1:{grpc_port}", dirs[component]
        )
        project_like_kubelet(
            tmp_path / f"{component}-config", {CONFIG_KEY: dump_runtime_config(local)}
        )
    server_name = f"{name}-controller.{OPERATOR_NAMESPACE}.svc"
    with Kubelet(plane, secrets):
        processes = [
            _run(["target", "--listen", f"127.0.0.1:{switch}"], tmp_path / "target.log"),
            _run(["collector", "--config", str(tmp_path / "collector-config" / CONFIG_KEY),
                  "--http-port", str(free_port())], tmp_path / "collector.log"),
            _run(["controller", "--config", str(tmp_path / "controller-config" / CONFIG_KEY),
                  "--http-port", str(operator.state_port)], tmp_path / "controller.log"),
        ]  # fmt: skip
        try:
            states: list[tuple[float, dict[str, Any] | None]] = []

            def read_state() -> dict[str, Any] | None:
                """The controller's /state as Prometheus's reader (its projected Secret)."""
                try:
                    reader = http_client_context(load_mutual_tls(dirs["reader"]))
                except TlsConfigError:
                    return None
                return fetch_state(f"https://127.0.0.1:{operator.state_port}/state", 2.0,
                                   tls=reader, server_name=server_name)  # fmt: skip

            wait_for(lambda: (s := read_state()) and (s.get("state") or {}).get("sequence")
                     and not s["failsafe_active"], 60, "the loop controlling")  # fmt: skip
            templates = {
                c: links.child("deployment", f"{name}-{c}")["spec"]["template"]
                for c in ("collector", "controller")
            }
            leaf_serials: set[int] = set()
            reader_serials: set[int] = set()
            ca_keys: list[tuple[str, ...]] = []
            sampled: list[tuple[float, str]] = []
            end = ca_expires + dt.timedelta(seconds=10)
            while dt.datetime.now(dt.UTC) < end:
                states.append((time.monotonic(), read_state()))
                ca = secret_data(plane, CA_SECRET)
                ca_keys.append(tuple(sorted(ca)))
                leaf_serials.add(_serial(secret_data(plane, f"{name}-controller-tls")["tls.crt"]))
                reader_serials.add(_serial(secret_data(plane, "scidmz-metrics-reader")["tls.crt"]))
                status = (links.get(name) or {}).get("status") or {}
                sampled.append((time.monotonic(), (status.get("state") or {}).get("sampledAt", "")))
                time.sleep(1.0)
            assert all(p.poll() is None for p in processes), "a process of the loop died"
        finally:
            stop_all(list(zip(("target", "collector", "controller"), processes, strict=True)))

    # the rollover happened, and the first CA expired with the loop running
    assert any("next.crt" in keys for keys in ca_keys), ca_keys
    assert any("previous.crt" in keys for keys in ca_keys), ca_keys
    retired = next(k for k, keys in enumerate(ca_keys) if "previous.crt" in keys)
    assert any("previous.crt" not in keys for keys in ca_keys[retired:]), ca_keys  # dropped
    assert secret_data(plane, CA_SECRET)["tls.crt"] != first_ca
    # no restart, no storm: the same pod templates; each leaf reissued once per renewal
    for component, template in templates.items():
        assert links.child("deployment", f"{name}-{component}")["spec"]["template"] == template
    # renewals follow the wall clock (a leaf every 20 s of its 30), not the reads: a read
    # takes longer than its second on a loaded machine, so count the seconds that passed
    elapsed_s = states[-1][0] - states[0][0] + 1.0
    assert 3 <= len(leaf_serials) <= elapsed_s / 18 + 3, (len(leaf_serials), elapsed_s)
    seconds = len(states)
    assert len(reader_serials) >= 3  # Prometheus's certificate renewed too, while running
    # no gap in control: every read answered, off the fail-safe, a fresh decision each second
    answered = [(t, s) for t, s in states if s is not None]
    assert len(answered) >= seconds - 2, (len(answered), seconds)
    assert not any(s["failsafe_active"] for _, s in answered)
    sequences = [s["state"]["sequence"] for _, s in answered]
    stuck = max(sum(1 for _ in group) for _, group in itertools.groupby(sequences))
    assert stuck <= 3, sequences
    # and the operator kept reading /state through it all (its own certificate renewed)
    changes = [t for (t, a), (_, b) in itertools.pairwise(sampled) if a != b]
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    assert changes and max(gaps, default=0) < 10, gaps
