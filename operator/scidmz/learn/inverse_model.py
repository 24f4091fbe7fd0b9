"""The MLC's inverse model (paper §3.5, figure 8): fit, cross-validate, export to ONNX.

Architecture, as the paper gives it: 22 inputs → a hidden layer of 64 × 22 = 1,408 units →
a pre-output layer of 22 → 1 output, fully connected. The paper does not name the
activations or the optimiser (it used Keras); here both hidden layers are ReLU, the output
is linear, trained with Adam on the squared error. Inputs are standardised and the output
is u(t)/B, both inside the exported graph: the ONNX model takes the 22 raw features
(float32, SI units, ``features.FEATURE_NAMES`` order) and returns u(t) in bit/s.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from scidmz.control.features import N_FEATURES

FloatArray = npt.NDArray[np.float64]

HIDDEN_LAYERS = (64 * N_FEATURES, N_FEATURES)
INPUT_NAME = "features"
OUTPUT_NAME = "campus_rate_limit_bps"


@dataclass(frozen=True)
class FitSettings:
    hidden_layers: tuple[int, ...] = HIDDEN_LAYERS
    max_epochs: int = 200
    patience: int = 15
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
    """Train with early stopping on the last ``validation_fraction`` of the rows (time
    order kept); returns the best epoch's model. ``progress(epoch, validation_error)``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    split = int(len(x) * (1 - settings.validation_fraction))
    x_fit, x_val = x[:split], x[split:]
    y_fit, y_val = u_bps[:split] / max_rate_bps, u_bps[split:]
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
            error = relative_error(pipeline.predict(x_val) * max_rate_bps, y_val)
            if progress is not None:
                progress(epoch, error)
            if error < best_error:
                best_error, best_epoch = error, epoch
                best_state = pickle.dumps(pipeline)
            elif epoch - best_epoch >= settings.patience:
                break
    model = pickle.loads(best_state)  # noqa: S301 - our own bytes, made above
    return FitResult(model=model, epochs=best_epoch, validation_error=best_error)


def binding(x: FloatArray, u_bps: FloatArray, share: float = 0.9) -> npt.NDArray[np.bool_]:
    """Rows where the shaper binds: the campus rate y2(t) reached ``share`` of u(t). Only
    there does y(t) depend on u(t), so only there can an inverse model recover u."""
    mask: npt.NDArray[np.bool_] = x[:, 1] >= share * u_bps
    return mask


def cross_validate(
    x: FloatArray,
    u_bps: FloatArray,
    max_rate_bps: float,
    folds: int,
    settings: FitSettings = FitSettings(),
    progress: Callable[[int, int, float], None] | None = None,
) -> list[tuple[float, float]]:
    """K contiguous folds (time series: no shuffling across time); returns each fold's
    relative error on its held-out block, over all rows and over the binding rows.
    ``progress(fold, epoch, error)``."""
    bounds = np.linspace(0, len(x), folds + 1).astype(int)
    errors = []
    for fold in range(folds):
        held = np.zeros(len(x), dtype=bool)
        held[bounds[fold] : bounds[fold + 1]] = True

        def report(epoch: int, error: float, fold: int = fold) -> None:
            if progress is not None:
                progress(fold, epoch, error)

        result = fit(x[~held], u_bps[~held], max_rate_bps, settings, report)
        predicted = result.model.predict(x[held]) * max_rate_bps  # type: ignore[attr-defined]
        bound = binding(x[held], u_bps[held])
        errors.append(
            (
                relative_error(predicted, u_bps[held]),
                relative_error(predicted[bound], u_bps[held][bound]),
            )
        )
    return errors


def export_onnx(model: object, max_rate_bps: float, path: Path) -> None:
    """The fitted pipeline as ONNX with the output scaled back to bit/s, checked by
    onnxruntime against the pipeline before it is written."""
    import onnx
    from onnx import TensorProto, helper
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    graph_model = convert_sklearn(
        model, initial_types=[(INPUT_NAME, FloatTensorType([None, N_FEATURES]))], target_opset=17
    )
    graph = graph_model.graph
    scaled = graph.output[0].name
    scale = helper.make_tensor("output_scale_bps", TensorProto.FLOAT, [1], [max_rate_bps])
    graph.initializer.append(scale)
    graph.node.append(helper.make_node("Mul", [scaled, "output_scale_bps"], [OUTPUT_NAME]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [None, 1]))
    graph_model.doc_string = (
        "scidmz MLC inverse model: u(t) [bit/s] from [y_d(t), y(t-T), y(t-2T), u(t-T)]"
    )
    onnx.checker.check_model(graph_model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(graph_model.SerializeToString())
