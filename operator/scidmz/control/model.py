"""The inverse model at run time: one onnxruntime session, its interface checked at start.

The model must take one float32 input of shape ``[N, 22]`` and give one output of shape
``[N, 1]``: u(t) in bit/s. Its metadata (written by ``scidmz train``, the machine-readable
half of its card) must name the same 22 features in the same order and units as
``features.FEATURE_NAMES``, and the target the controller expects (the binding rate).
Anything else stops start-up with ``ModelError`` naming the mismatch, before a single rate
is applied: a model trained on other features would be fed the wrong numbers silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from scidmz.control.features import FEATURE_NAMES, N_FEATURES

META_FEATURES = "scidmz.features"
META_UNITS = "scidmz.units"
META_TARGET = "scidmz.target"
TARGET_BINDING_RATE = "binding-rate"
"""min(u(t), y2(t) / s), s the campus rate the tap reads per unit of u where the shaper
binds (0.98 × payload / frame): see ``learn.inverse_model``."""

_UNIT_SUFFIXES = (("_bps", "bit/s"), ("_s", "s"), ("active_flows", "flows"))


def feature_units() -> tuple[str, ...]:
    """The unit of each feature, from its name (the cards and the metadata list them)."""
    return tuple(
        next(unit for suffix, unit in _UNIT_SUFFIXES if name.endswith(suffix))
        for name in FEATURE_NAMES
    )


def check_metadata(metadata: dict[str, str], path: Path) -> None:
    """Refuse a model whose recorded features, units or target differ from the runtime's."""
    expected = {
        META_FEATURES: ",".join(FEATURE_NAMES),
        META_UNITS: ",".join(feature_units()),
        META_TARGET: TARGET_BINDING_RATE,
    }
    for key, want in expected.items():
        got = metadata.get(key)
        if got is None:
            raise ModelError(
                f"inverse model {path}: metadata {key!r} is missing (not written by this "
                "version of `scidmz train`; retrain it)"
            )
        if got != want:
            if key == META_TARGET:
                raise ModelError(
                    f"inverse model {path}: target {got!r}, the controller needs {want!r}"
                )
            theirs, ours = got.split(","), want.split(",")
            index = next(
                (i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
                min(len(theirs), len(ours)),
            )
            raise ModelError(
                f"inverse model {path}: {key} differs from the controller's at input {index}: "
                f"model {theirs[index] if index < len(theirs) else '(none)'!r}, "
                f"controller {ours[index] if index < len(ours) else '(none)'!r}"
            )


class ModelError(ValueError):
    """An inverse model that cannot be used; the message says why."""


def _dim(value: object) -> int | None:
    return value if isinstance(value, int) else None


class InverseModel:
    def __init__(self, path: Path) -> None:
        import onnxruntime

        if not path.is_file():
            raise ModelError(f"inverse model {path} does not exist")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one sample at a time: threads only add latency
        options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own untyped errors
            raise ModelError(f"inverse model {path} cannot be loaded: {error}") from None
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if len(inputs) != 1:
            raise ModelError(f"inverse model {path} has {len(inputs)} inputs, not 1")
        (given,) = inputs
        shape = list(given.shape)
        if len(shape) != 2 or _dim(shape[1]) != N_FEATURES:
            raise ModelError(
                f"inverse model {path}: input {given.name!r} has shape {shape}, "
                f"not [N, {N_FEATURES}] (the 22 features of eq. 1)"
            )
        if given.type != "tensor(float)":
            raise ModelError(f"inverse model {path}: input type {given.type}, not float32")
        if len(outputs) != 1 or _dim(list(outputs[0].shape)[-1]) not in (1, None):
            raise ModelError(f"inverse model {path}: expected one output of shape [N, 1]")
        check_metadata(dict(session.get_modelmeta().custom_metadata_map), path)
        self.path = path
        self._session = session
        self._input = given.name
        self._output = outputs[0].name

    def predict(self, row: npt.NDArray[np.float32]) -> float:
        """û(t) in bit/s for one ``(1, 22)`` feature row."""
        (result,) = self._session.run([self._output], {self._input: row})
        return float(np.asarray(result).reshape(-1)[0])
