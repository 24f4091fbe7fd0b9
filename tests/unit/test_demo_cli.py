"""``scidmz demo`` checks what its report needs before it starts anything."""

from __future__ import annotations

import importlib.util

from typer.testing import CliRunner

from scidmz.cli import app


def test_the_demo_refuses_at_once_without_matplotlib(monkeypatch):
    real = importlib.util.find_spec
    started = []
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    monkeypatch.setattr("scidmz.demo_cluster.run_cluster_demo", lambda **_: started.append(1))
    monkeypatch.setattr("scidmz.demo.run_demo", lambda **_: started.append(1))
    result = CliRunner().invoke(app, ["demo", "--mode", "host"])
    assert result.exit_code == 2
    assert "matplotlib" in result.output and "scidmz[train]" in result.output
    assert started == []  # nothing ran for minutes first
