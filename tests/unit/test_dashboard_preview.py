"""The dashboards drawn from their own panels and queries (docs pictures, `make demo`)."""

from __future__ import annotations

from scidmz.metrics.dashboards import overview
from scidmz.metrics.preview import Series, legend, render, with_variables


def test_a_legend_format_is_filled_from_the_series_labels():
    assert legend("{{policy}} {{class}}", {"policy": "p", "class": "dtn"}) == "p dtn"
    assert legend("{{ policy }} u(t)", {"policy": "p"}) == "p u(t)"
    assert legend("{{missing}} rate", {}) == "rate"


def test_template_variables_are_replaced_in_the_query():
    expr = 'scidmz_active_flows{namespace=~"$namespace", policy=~"$policy"}'
    assert with_variables(expr, {"namespace": ".*", "policy": "p"}) == (
        'scidmz_active_flows{namespace=~".*", policy=~"p"}'
    )


def test_every_panel_is_queried_and_those_with_data_are_counted(tmp_path):
    asked: list[str] = []

    def source(expr: str, legend_format: str) -> list[Series]:
        asked.append(expr)
        if "scidmz_rtt_seconds" in expr:
            return [Series("p dtn", [0.0, 1.0, 2.0], [0.1, 0.12, 0.11])]
        return []

    dashboard = overview()
    path = tmp_path / "overview.png"
    assert render(dashboard, source, path) == 1
    assert len(asked) == sum(len(p["targets"]) for p in dashboard["panels"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
