"""``scidmz train``: identification run → cross-validated inverse model → models/<cca>/.

Writes ``inverse.onnx``, ``card.md`` (data, scenario, split, metrics, input order, units)
and ``gains.yaml`` (paper table 4 unless given). Deterministic for a seed (the simulator
and the network's initialisation both take it).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import yaml

from scidmz.api.runtime import PAPER_GAINS
from scidmz.control.features import FEATURE_NAMES
from scidmz.learn.identification import identify, training_table
from scidmz.learn.inverse_model import (
    INPUT_NAME,
    OUTPUT_NAME,
    FitSettings,
    binding,
    cross_validate,
    export_onnx,
    fit,
    relative_error,
)
from scidmz.netsim.scenario import Scenario

UNITS = {"rate_bps": "bit/s", "rtt_s": "s", "queuing_delay_s": "s", "active_flows": "flows"}


@dataclass(frozen=True)
class TrainSettings:
    cca: str
    out_dir: Path
    duration_s: float = 28_800.0
    seed: int = 1
    folds: int = 3
    fit: FitSettings = field(default_factory=FitSettings)
    scenario: Scenario | None = None


@dataclass(frozen=True)
class TrainReport:
    samples: int
    fold_errors: list[float]
    binding_errors: list[float]
    binding_share: float
    naive_binding_error: float
    """u(t) ≈ y2(t) (the campus rate) on the binding rows: what a trivial inverse achieves."""
    final_validation_error: float
    epochs: int
    seconds: float


Progress = Callable[[str, float, float], None]
"""``progress(stage, done, total)``."""


def _unit(name: str) -> str:
    return next((unit for suffix, unit in UNITS.items() if name.endswith(suffix)), "bit/s")


def train(settings: TrainSettings, progress: Progress | None = None) -> TrainReport:
    started = time.perf_counter()
    scenario = settings.scenario or Scenario()
    scenario = scenario.model_copy(
        update={"dtn": scenario.dtn.model_copy(update={"congestion_control": settings.cca}),
                "seed": settings.seed}
    )  # fmt: skip
    report = progress or (lambda *_: None)
    data = identify(
        scenario, settings.duration_s, settings.seed,
        progress=lambda done, total: report("identification", done, total),
    )  # fmt: skip
    x, u = training_table(data)
    fit_settings = settings.fit
    epochs = fit_settings.max_epochs
    folds = cross_validate(
        x, u, data.max_rate_bps, settings.folds, fit_settings,
        progress=lambda fold, epoch, _: report(f"cross-validation fold {fold + 1}", epoch, epochs),
    )  # fmt: skip
    final = fit(
        x, u, data.max_rate_bps, fit_settings,
        progress=lambda epoch, _: report("final fit", epoch, epochs),
    )  # fmt: skip
    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    export_onnx(final.model, data.max_rate_bps, out / "inverse.onnx")
    gains_path = out / "gains.yaml"
    if not gains_path.exists():
        kp, ki, kw = PAPER_GAINS[settings.cca]
        gains_path.write_text(
            "# Anti-windup PI gains for this model (paper table 4 until tuned here).\n"
            + yaml.safe_dump({"kp": kp, "ki": ki, "kw": kw, "source": "paper table 4"})
        )
    result = TrainReport(
        samples=len(x),
        fold_errors=[all_rows for all_rows, _ in folds],
        binding_errors=[bound for _, bound in folds],
        binding_share=float(binding(x, u).mean()),
        naive_binding_error=relative_error(x[binding(x, u), 1], u[binding(x, u)]),
        final_validation_error=final.validation_error,
        epochs=final.epochs,
        seconds=time.perf_counter() - started,
    )
    (out / "card.md").write_text(model_card(settings, scenario, data.max_rate_bps, u, result))
    return result


def model_card(
    settings: TrainSettings,
    scenario: Scenario,
    max_rate_bps: float,
    u: npt.NDArray[np.float64],
    report: TrainReport,
) -> str:
    import onnxruntime
    import sklearn

    f = settings.fit
    mean_error = float(np.mean(report.fold_errors))
    inputs = "\n".join(
        f"| {i} | `{name}` | {_unit(name)} |" for i, name in enumerate(FEATURE_NAMES)
    )
    folds = ", ".join(f"{e:.1%}" for e in report.fold_errors)
    bound = float(np.mean(report.binding_errors))
    command = (
        f"scidmz train --cca {settings.cca} --seed {settings.seed} "
        f"--duration {settings.duration_s:g} --folds {settings.folds}"
    )
    return f"""# Inverse model card: {settings.cca} DTN

The MLC's inverse model (paper §3.5, eq. 1): u(t) = f(y_d(t), y(t−T), y(t−2T), u(t−T)).
Reproduce: `{command}` ({report.seconds / 60:.1f} min on this machine).

## Data
- System identification on the simulator (`scidmz.netsim`), scenario: the paper's testbed
  (§3.1) — bottleneck {scenario.bottleneck.capacity_bps / 1e9:g} Gb/s,
  {scenario.campus.long_flows} campus flows ({scenario.campus.congestion_control},
  {scenario.campus.base_rtt_s * 1e3:g} ms), DTN {scenario.dtn.streams} streams
  ({settings.cca}, {scenario.dtn.base_rtt_s * 1e3:g} ms), T = {scenario.sample_time_s:g} s,
  seed {settings.seed}.
- Excitation: u(t) uniform in [0, {max_rate_bps / 1e6:g}] Mb/s, a new value every T, for
  {settings.duration_s:g} s (the paper: 28,800 s, figure 7).
- y(t) as the collector reports it (tap counters, per-flow tap RTTs through algorithm 4
  with α = 0.875, last queuing delays, tap active flows); unmeasured values filled as at
  control time (`control.features.fill_missing`).
- {report.samples} rows (k ≥ 2); target u(t) mean {float(np.mean(u)) / 1e6:.0f} Mb/s.

## Model
- Fully connected: 22 inputs → {f.hidden_layers[0]} (64 × 22) → {f.hidden_layers[1]} → 1,
  as the paper. Activations: ReLU on both hidden layers, linear output (the paper does not
  say). Adam, learning rate {f.learning_rate:g}, batch {f.batch_size}, L2 {f.l2:g},
  early stopping on the last {f.validation_fraction:.0%} of the rows (patience
  {f.patience} epochs, at most {f.max_epochs}); final model from epoch {report.epochs}.
- In the graph: input standardisation (a StandardScaler) and output scaling (× {max_rate_bps:g}).
  Feed raw SI values.

## Metrics
- Relative error Σ|û − u| / Σ|u| under {settings.folds}-fold contiguous cross-validation:
  **{mean_error:.1%}** (folds: {folds}). The paper reports 1 %.
- The same, over the rows where the shaper binds (campus rate ≥ 90 % of u(t);
  {report.binding_share:.0%} of the rows): **{bound:.1%}**.
- Final model, early-stopping block: {report.final_validation_error:.1%}.
- For scale: on the binding rows, the trivial inverse u(t) ≈ y2(t) (the campus rate)
  has {report.naive_binding_error:.1%}. The network does much worse there: with a squared
  loss, the rows where u(t) is above what the campus takes (y no longer depends on u, so
  u is unidentifiable) pull its predictions toward their conditional mean. The paper's 1 %
  is not reached; the closed-loop results (bench/results/control_quality/report.md) say
  what this model is worth as a controller.

## Interface
- ONNX input `{INPUT_NAME}`: float32 `[N, 22]`; output `{OUTPUT_NAME}`: float32 `[N, 1]`, bit/s.
- Input order:

| # | feature | unit |
|---:|---|---|
{inputs}

## Provenance
scikit-learn {sklearn.__version__}, onnxruntime {onnxruntime.__version__}, Python
{platform.python_version()}.
"""
