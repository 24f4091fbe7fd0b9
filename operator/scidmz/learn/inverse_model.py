"""The MLC's inverse model (paper §3.5, figure 8): fit, cross-validate, export to ONNX.

Architecture, as the paper gives it: 22 inputs → a hidden layer of 64 × 22 = 1,408 units →
a pre-output layer of 22 → 1 output, fully connected. The paper does not name the
activations or the optimiser (it used Keras); here both hidden layers are ReLU, the output
is linear, trained with Adam on the squared error.

What it predicts — our choice, because the paper's target is not identifiable: where the
campus shaper does not bind (the campus wants less than u), every u above the campus
demand gives the same y(t), so no model can recover u there (even an oracle told which rows
bind errs by 14 % overall on the paper's excitation). The model therefore predicts the
**binding rate** ``min(u(t), y2(t) / BINDING_SHARE)``: u(t) itself where the shaper binds,
and elsewhere the least rate limit consistent with y(t) (the campus rate it carried). That
is one well-defined inverse, equal to u wherever u had an effect, and what a controller
needs: the limit that makes the campus carry y_d's campus rate.

Scaling lives in the graph, so the ONNX model takes the 22 raw features (float32, SI units,
``features.FEATURE_NAMES`` order) and returns the rate in bit/s: the inputs are
standardised, and the network's output is a correction to the measured campus rate
y2(t), in units of B (``û = y2 + B·net(x)``). Starting from "u = campus rate" (1.4 %
error where the shaper binds) leaves the network only the dynamics to learn. The feature
order, units and target are written into the model's metadata, and the controller refuses
a model whose metadata do not match what it feeds (``control.model``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from scidmz.control.features import FEATURE_NAMES, N_FEATURES
from scidmz.control.model import (
    META_FEATURES,
    META_TARGET,
    META_UNITS,
    TARGET_BINDING_RATE,
    feature_units,
)

FloatArray = npt.NDArray[np.float64]

HIDDEN_LAYERS = (64 * N_FEATURES, N_FEATURES)
INPUT_NAME = "features"
OUTPUT_NAME = "campus_rate_limit_bps"
CAMPUS_RATE_COLUMN = FEATURE_NAMES.index("desired_campus_rate_bps")
"""The y2(t) column: y_d's campus rate at control time, the measured one in training."""
BINDING_SHARE = 0.98
"""A campus rate within 2 % of what u lets through counts as the shaper binding (the
bucket's phase). What u lets through is counted in frames, the tap's rate in payload: the
training scales this share by the scenario's payload fraction (``Scenario.payload_fraction``,
1448/1514), or the target would sit 4.4 % under u wherever the shaper binds."""
REPORT_BINDING_SHARE = 0.9
"""The looser rule the cards report errors over ("binding rows": campus ≥ 90 % of u)."""


def binding_rate(x: FloatArray, u_bps: FloatArray, share: float = BINDING_SHARE) -> FloatArray:
    """The training target: ``min(u, y2 / share)`` (see the module docstring)."""
    target: FloatArray = np.minimum(u_bps, x[:, CAMPUS_RATE_COLUMN] / share)
    return target


@dataclass(frozen=True)
class FitSettings:
    hidden_layers: tuple[int, ...] = HIDDEN_LAYERS
    max_epochs: int = 200
    patience: int = 15
    binding_share: float = BINDING_SHARE
    """y2 / u where the shaper binds (``binding_rate``)."""
    batch_size: int = 256
    learning_rate: float = 1e-3
    l2: float = 1e-4
    validation_fraction: float = 0.1
    seed: int = 1


@dataclass(frozen=True)
class FitResult:
    model: object  # a fitted sklearn Pipeline (scaler + MLP)
    epochs: int
    validation_error: float


def relative_error(predicted: FloatArray, actual: FloatArray) -> float:
    """Σ|û − u| / Σ|u|: the relative error the paper's 1 % refers to (our reading)."""
    return float(np.abs(predicted - actual).sum() / np.abs(actual).sum())


def fit(
    x: FloatArray,
    u_bps: FloatArray,
    max_rate_bps: float,
    settings: FitSettings = FitSettings(),
    progress: Callable[[int, float], None] | None = None,
) -> FitResult:
    """Train on the binding rate with early stopping on the last ``validation_fraction``
    of the rows (time order kept); returns the best epoch's model.
    ``progress(epoch, validation_error)``; the error is against the binding rate."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    target = binding_rate(x, u_bps, settings.binding_share)
    split = int(len(x) * (1 - settings.validation_fraction))
    x_fit, x_val = x[:split], x[split:]
    y_fit = (target[:split] - x_fit[:, CAMPUS_RATE_COLUMN]) / max_rate_bps
    pipeline = Pipeline(
        [
            ("scale", StandardScaler()),
            (
                "mlp",
                MLPRegressor(
                    hidden_layer_sizes=settings.hidden_layers,
                    activation="relu",
                    solver="adam",
                    alpha=settings.l2,
                    batch_size=settings.batch_size,
                    learning_rate_init=settings.learning_rate,
                    max_iter=1,
                    warm_start=True,
                    shuffle=True,
                    random_state=settings.seed,
                ),
            ),
        ]
    )
    best_error, best_epoch, best_state = np.inf, 0, b""
    import pickle

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for epoch in range(1, settings.max_epochs + 1):
            pipeline.fit(x_fit, y_fit)
            predicted = predict(pipeline, x_val, max_rate_bps)
            error = relative_error(predicted, target[split:])
            if progress is not None:
                progress(epoch, error)
            if error < best_error:
                best_error, best_epoch = error, epoch
                best_state = pickle.dumps(pipeline)
            elif epoch - best_epoch >= settings.patience:
                break
    model = pickle.loads(best_state)  # noqa: S301 - our own bytes, made above
    return FitResult(model=model, epochs=best_epoch, validation_error=best_error)


def predict(model: object, x: FloatArray, max_rate_bps: float) -> FloatArray:
    """What the exported graph computes: y2 + B·net(x), in bit/s."""
    correction: FloatArray = model.predict(x)  # type: ignore[attr-defined]
    result: FloatArray = x[:, CAMPUS_RATE_COLUMN] + correction * max_rate_bps
    return result


def binding(
    x: FloatArray, u_bps: FloatArray, share: float = REPORT_BINDING_SHARE
) -> npt.NDArray[np.bool_]:
    """Rows where the shaper binds: the campus rate y2(t) reached ``share`` of u(t). Only
    there does y(t) depend on u(t), so only there can an inverse model recover u."""
    mask: npt.NDArray[np.bool_] = x[:, CAMPUS_RATE_COLUMN] >= share * u_bps
    return mask


@dataclass(frozen=True)
class FoldErrors:
    """One held-out block's relative errors (Σ|û − u| / Σ|u|)."""

    binding: float
    """Against u(t), on the rows where the shaper binds (campus ≥ 90 % of u)."""
    overall: float
    """Against the binding rate (the model's target), on every row."""
    overall_raw_u: float
    """Against u(t) itself on every row: includes the non-identifiable rows."""
    naive_binding: float
    """"u = campus rate" (y2(t)) against u(t) on the binding rows, for scale."""
    naive_overall: float
    """"u = campus rate" against the binding rate on every row."""


def cross_validate(
    x: FloatArray,
    u_bps: FloatArray,
    max_rate_bps: float,
    folds: int,
    settings: FitSettings = FitSettings(),
    progress: Callable[[int, int, float], None] | None = None,
) -> list[FoldErrors]:
    """K contiguous folds (time series: no shuffling across time); each fold's errors on
    its held-out block. ``progress(fold, epoch, error)``."""
    bounds = np.linspace(0, len(x), folds + 1).astype(int)
    errors = []
    for fold in range(folds):
        held = np.zeros(len(x), dtype=bool)
        held[bounds[fold] : bounds[fold + 1]] = True

        def report(epoch: int, error: float, fold: int = fold) -> None:
            if progress is not None:
                progress(fold, epoch, error)

        result = fit(x[~held], u_bps[~held], max_rate_bps, settings, report)
        errors.append(
            fold_errors(result.model, x[held], u_bps[held], max_rate_bps, settings.binding_share)
        )
    return errors


def fold_errors(
    model: object,
    x: FloatArray,
    u_bps: FloatArray,
    max_rate_bps: float,
    share: float = BINDING_SHARE,
) -> FoldErrors:
    predicted = predict(model, x, max_rate_bps)
    target = binding_rate(x, u_bps, share)
    bound = binding(x, u_bps)
    campus = x[:, CAMPUS_RATE_COLUMN]
    return FoldErrors(
        binding=relative_error(predicted[bound], u_bps[bound]),
        overall=relative_error(predicted, target),
        overall_raw_u=relative_error(predicted, u_bps),
        naive_binding=relative_error(campus[bound], u_bps[bound]),
        naive_overall=relative_error(campus, target),
    )


def export_onnx(model: object, max_rate_bps: float, path: Path, cca: str = "") -> None:
    """The fitted pipeline as ONNX computing ``y2 + B·net(x)`` in bit/s, with the feature
    contract in its metadata; checked before it is written."""
    import onnx
    from onnx import TensorProto, helper
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    graph_model = convert_sklearn(
        model, initial_types=[(INPUT_NAME, FloatTensorType([None, N_FEATURES]))], target_opset=17
    )
    graph = graph_model.graph
    graph.name = (
        f"scidmz_inverse_{cca or 'model'}"  # skl2onnx draws a random one: same seed, same bytes
    )
    correction = graph.output[0].name
    graph.initializer.extend(
        [
            helper.make_tensor("output_scale_bps", TensorProto.FLOAT, [1], [max_rate_bps]),
            helper.make_tensor("campus_column", TensorProto.INT64, [1], [CAMPUS_RATE_COLUMN]),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Mul", [correction, "output_scale_bps"], ["correction_bps"]),
            # the campus-rate column of the raw input, shape [N, 1]
            helper.make_node("Gather", [INPUT_NAME, "campus_column"], ["campus_bps"], axis=1),
            helper.make_node("Add", ["campus_bps", "correction_bps"], [OUTPUT_NAME]),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [None, 1]))
    graph_model.doc_string = (
        "scidmz MLC inverse model: the binding campus rate limit u(t) [bit/s] from "
        "[y_d(t), y(t-T), y(t-2T), u(t-T)]"
    )
    metadata = {
        META_FEATURES: ",".join(FEATURE_NAMES),
        META_UNITS: ",".join(feature_units()),
        META_TARGET: TARGET_BINDING_RATE,
        "scidmz.cca": cca,
    }
    for key, value in metadata.items():
        entry = graph_model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(graph_model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(graph_model.SerializeToString())
