"""A link with no policy admitted, run as processes (target, collector, controller): the
switch holds no DTN class, so no DTN rate is measured, and the loop is idle rather than
failed — the campus gets the whole link and the controller is ready."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from scidmz.chaos.local_loop import LocalLoop


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_link_without_policies_gives_the_campus_the_link_and_is_ready(tmp_path) -> None:
    from scidmz.demo_loop import workload_addresses
    from tests.loops import plaintext_link_spec, render, render_policies

    link = plaintext_link_spec(sampleTime="500ms")
    config = render_policies(link, [])
    assert config.target_rate_bps == 0 and not config.policies
    capacity = config.bottleneck_capacity_bps
    # the DTN host sends all the same (its class is not programmed): where it would be
    workloads = workload_addresses(render(link))
    with LocalLoop(config, tmp_path, workloads) as loop:
        loop.wait_until(loop.controlling, 90, "the idle link deciding")
        loop.wait_until(
            lambda: (
                bool(loop.probes.actuations)
                and loop.probes.actuations[-1].rate_bps == pytest.approx(capacity)
            ),
            10,
            "u = the whole link",
        )
        # readiness follows the loop every 0.5 s
        ready_at = loop.wait_until(lambda: _readyz(loop.controller_http)[0] == 200, 5, "ready")
        status, text = _readyz(loop.controller_http)
        assert status == 200 and text.startswith("ready: idle: no policy admitted"), text
        # it keeps deciding, never on its fail-safe again (the one a loop holds until the
        # collector's first samples is not this test's)
        decided = loop.probes.controller[-1].sequence
        loop.wait_until(
            lambda: (loop.probes.controller[-1].sequence or 0) > (decided or 0) + 2,
            10,
            "three more decisions",
        )
        after = [p for p in loop.probes.controller if p.t > ready_at and p.reachable]
        assert after and not any(p.failsafe for p in after)
