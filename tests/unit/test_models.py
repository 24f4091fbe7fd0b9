"""The shipped inverse models, their cards and gains; training's ONNX round trip."""

from __future__ import annotations

import re

import numpy as np
import pytest

from scidmz.api.runtime import TUNED_GAINS
from scidmz.control.features import FEATURE_NAMES, N_FEATURES
from scidmz.control.model import InverseModel
from scidmz.control.settings import default_models_dir
from scidmz.learn.gains import load_gains
from scidmz.learn.identification import identify, training_table
from scidmz.learn.inverse_model import (
    CAMPUS_RATE_COLUMN,
    FitSettings,
    binding,
    binding_rate,
    export_onnx,
    fit,
    predict,
    relative_error,
)
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
    # the gains file holds what the operator renders by default
    gains = load_gains(MODELS, cca)
    for name in ("mlc", "pi", "dtn"):
        assert getattr(gains, name).as_tuple() == TUNED_GAINS[cca][name], name
    assert InverseModel(MODELS / cca / "inverse.onnx")  # its metadata match the runtime


@pytest.mark.parametrize("cca", ["cubic", "bbr"])
def test_shipped_model_predicts_the_binding_rate_on_a_fresh_run(cca):
    """Out of sample (another seed than training's): where the shaper binds the model
    recovers u(t) within the card's error, and never strays far from the binding rate."""
    model = InverseModel(MODELS / cca / "inverse.onnx")
    scenario = Scenario.model_validate({"dtn": {"congestion_control": cca}, "seed": 9})
    data = identify(scenario, 150, seed=9, dtn_cap_excitation=cca == "bbr")
    x, u = training_table(data)
    predicted = np.array([model.predict(row[None, :].astype(np.float32)) for row in x])
    bound = binding(x, u)
    assert bound.sum() >= 20
    assert relative_error(predicted[bound], u[bound]) < 0.04
    assert relative_error(predicted, binding_rate(x, u)) < 0.04


def test_training_exports_what_it_fitted(tmp_path):
    """ONNX round trip: the exported graph (normalisation and the campus-rate residual
    inside) gives what the pipeline predicts, in bit/s from raw SI features, and carries
    the feature contract."""
    data = identify(Scenario(), 240, seed=5)
    x, u = training_table(data)
    small = FitSettings(hidden_layers=(32, 22), max_epochs=5, patience=5, seed=5)
    result = fit(x, u, data.max_rate_bps, small)
    path = tmp_path / "m.onnx"
    export_onnx(result.model, data.max_rate_bps, path, "cubic")
    model = InverseModel(path)
    expected = predict(result.model, x[:20], data.max_rate_bps)
    got = np.array([model.predict(row[None, :].astype(np.float32)) for row in x[:20]])
    assert np.allclose(got, expected, rtol=1e-4, atol=1e3)
    # the residual really is on the campus-rate input: moving it moves û one for one
    shifted = x[:1].copy()
    shifted[0, CAMPUS_RATE_COLUMN] += 1e6
    delta = model.predict(shifted.astype(np.float32)) - model.predict(x[:1].astype(np.float32))
    assert 0.5e6 < delta < 1.5e6


def test_identification_is_deterministic_and_shaped():
    a = identify(Scenario(), 30, seed=2)
    b = identify(Scenario(), 30, seed=2)
    assert np.array_equal(a.y, b.y) and np.array_equal(a.u_bps, b.u_bps)
    x, u = training_table(a)
    assert x.shape == (28, 22) and u.shape == (28,)
    assert np.all(np.isfinite(x))
    assert np.array_equal(x[:, 21], a.u_bps[1:-1])  # u(t−T) is the previous row's input
    assert np.array_equal(x[0, 7:14], a.y[1])  # y(t−T)
