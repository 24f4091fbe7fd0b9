"""The shipped inverse models, their cards and gains; training's ONNX round trip."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from scidmz.api.runtime import PAPER_GAINS
from scidmz.control.features import FEATURE_NAMES, N_FEATURES
from scidmz.control.model import InverseModel
from scidmz.control.settings import default_models_dir
from scidmz.learn.identification import identify, training_table
from scidmz.learn.inverse_model import FitSettings, export_onnx, fit, relative_error
from scidmz.netsim.scenario import Scenario

MODELS = default_models_dir()


@pytest.mark.parametrize("cca", ["cubic", "bbr"])
def test_shipped_model_matches_its_card_and_gains(cca):
    card = (MODELS / cca / "card.md").read_text()
    listed = re.findall(r"^\| (\d+) \| `(\w+)` \| ([^|]+) \|$", card, re.M)
    assert [name for _, name, _ in listed] == list(FEATURE_NAMES), "input order"
    assert [int(i) for i, _, _ in listed] == list(range(N_FEATURES))
    units = {name: unit.strip() for _, name, unit in listed}
    assert units["desired_dtn_rate_bps"] == "bit/s" and units["previous_dtn_rtt_s"] == "s"
    gains = yaml.safe_load((MODELS / cca / "gains.yaml").read_text())
    assert (gains["kp"], gains["ki"], gains["kw"]) == PAPER_GAINS[cca]
    model = InverseModel(MODELS / cca / "inverse.onnx")
    # on states of its own training distribution (a fresh identification run) it gives
    # rates of the right order; off it (table 3's y_d) it may extrapolate: the card says so
    scenario = Scenario.model_validate({"dtn": {"congestion_control": cca}, "seed": 9})
    x, u = training_table(identify(scenario, 60, seed=9))
    predicted = np.array([model.predict(row[None, :].astype(np.float32)) for row in x])
    assert np.all(np.isfinite(predicted))
    assert 0 < predicted.mean() < 1.2e9, f"{cca}: mean û {predicted.mean():.3g}"
    assert relative_error(predicted, u) < 1.0


def test_training_exports_what_it_fitted(tmp_path):
    """ONNX round trip: the exported graph (normalisation inside) gives the pipeline's
    predictions in bit/s from raw SI features."""
    data = identify(Scenario(), 240, seed=5)
    x, u = training_table(data)
    small = FitSettings(hidden_layers=(32, 22), max_epochs=5, patience=5, seed=5)
    result = fit(x, u, data.max_rate_bps, small)
    path = tmp_path / "m.onnx"
    export_onnx(result.model, data.max_rate_bps, path)
    model = InverseModel(path)
    expected = result.model.predict(x[:20]) * data.max_rate_bps
    got = np.array([model.predict(row[None, :].astype(np.float32)) for row in x[:20]])
    assert np.allclose(got, expected, rtol=1e-4, atol=1e3)
    assert relative_error(expected, u[:20]) == pytest.approx(relative_error(got, u[:20]), rel=1e-3)


def test_identification_is_deterministic_and_shaped():
    a = identify(Scenario(), 30, seed=2)
    b = identify(Scenario(), 30, seed=2)
    assert np.array_equal(a.y, b.y) and np.array_equal(a.u_bps, b.u_bps)
    x, u = training_table(a)
    assert x.shape == (28, 22) and u.shape == (28,)
    assert np.all(np.isfinite(x))
    assert np.array_equal(x[:, 21], a.u_bps[1:-1])  # u(t−T) is the previous row's input
    assert np.array_equal(x[0, 7:14], a.y[1])  # y(t−T)
