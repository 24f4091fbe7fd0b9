"""The inverse model at run time: one onnxruntime session, its interface checked at start.

The model must take one float32 input of shape ``[N, 22]`` (``features.FEATURE_NAMES``)
and give one output of shape ``[N, 1]``: u(t) in bit/s. Anything else stops start-up with
``ModelError`` naming the mismatch, before a single rate is applied.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from scidmz.control.features import N_FEATURES


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
        self.path = path
        self._session = session
        self._input = given.name
        self._output = outputs[0].name

    def predict(self, row: npt.NDArray[np.float32]) -> float:
        """û(t) in bit/s for one ``(1, 22)`` feature row."""
        (result,) = self._session.run([self._output], {self._input: row})
        return float(np.asarray(result).reshape(-1)[0])
