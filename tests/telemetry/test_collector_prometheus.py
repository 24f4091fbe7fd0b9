"""A real Prometheus server scrapes the collector; PromQL returns the seven variables."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from scidmz.telemetry.service import CollectorProcess
from scidmz.testenv.cluster import free_port
from tests.telemetry.harness import running_target, settings, wait_for

QUERIES = {
    # PromQL -> (sample field, factor from the metric's unit to the sample's)
    'scidmz_rate_bytes_per_second{class="dtn"}': ("dtn_rate_bps", 8.0),
    'scidmz_rate_bytes_per_second{class="campus"}': ("campus_rate_bps", 8.0),
    'scidmz_rtt_seconds{class="dtn"}': ("dtn_rtt_s", 1.0),
    'scidmz_rtt_seconds{class="campus"}': ("campus_rtt_s", 1.0),
    'scidmz_queuing_delay_seconds{class="dtn"}': ("dtn_queuing_delay_s", 1.0),
    'scidmz_queuing_delay_seconds{class="campus"}': ("campus_queuing_delay_s", 1.0),
    "scidmz_active_flows": ("active_flows", 1.0),
}


def _query(port: int, promql: str) -> list[float]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return [float(r["value"][1]) for r in body["data"]["result"]]


@pytest.fixture
def prometheus(tmp_path: Path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (.ci/run installs Debian's prometheus)")
    http_port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: scidmz-collector\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{http_port}']}}]\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield http_port, prom_port
    proc.terminate()
    proc.wait(timeout=10)


def test_promql_returns_each_state_variable(prometheus):
    http_port, prom_port = prometheus

    async def main():
        async with running_target() as (_, address):
            process = CollectorProcess(
                settings(address, sample_time_s=0.5), f"127.0.0.1:{free_port()}", http_port
            )
            published = []
            queue = process.collector.stream.subscribe()
            stop = asyncio.Event()
            task = asyncio.create_task(process.serve(stop))

            async def record():
                while True:
                    published.append(await queue.get())

            recorder = asyncio.create_task(record())

            def scraped() -> bool:
                try:
                    return bool(_query(prom_port, 'scidmz_rtt_seconds{class="campus"}'))
                except OSError:
                    return False

            try:
                await wait_for(scraped, 30, "Prometheus to scrape the collector", step_s=0.5)
                results = {q: await asyncio.to_thread(_query, prom_port, q) for q in QUERIES}
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
                recorder.cancel()
        for promql, values in results.items():
            field, factor = QUERIES[promql]
            assert len(values) == 1, f"{promql}: {values}"
            seen = [getattr(s, field) for s in published if not s.stale]
            assert any(math.isclose(values[0] * factor, v, rel_tol=1e-9) for v in seen), (
                f"{promql} = {values[0]} is none of the published {field} values {seen}"
            )
        assert results["scidmz_active_flows"] == [108.0]

    asyncio.run(main())
