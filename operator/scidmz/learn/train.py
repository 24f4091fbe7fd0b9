"""``scidmz train``: identification run → cross-validated inverse model → models/<cca>/.

Writes ``inverse.onnx`` (with its feature contract in the metadata) and ``card.md`` (data,
scenario, target, split, metrics with the naive baselines beside them, input order,
units). The gains live in ``gains.yaml``, written by ``scidmz tune``; training leaves it
alone. Deterministic for a seed (the simulator, the excitation and the network's
initialisation all take it).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import yaml

from scidmz.api.model_card import DurationRange, ModelCard, RateRange
from scidmz.api.runtime import TelemetryConfig
from scidmz.api.units import format_duration, format_rate
from scidmz.control.features import FEATURE_NAMES
from scidmz.control.model import feature_units
from scidmz.learn.identification import CampusLoad, identify, training_table
from scidmz.learn.inverse_model import (
    BINDING_SHARE,
    INPUT_NAME,
    OUTPUT_NAME,
    REPORT_BINDING_SHARE,
    FitSettings,
    FoldErrors,
    binding,
    cross_validate,
    export_onnx,
    fit,
)
from scidmz.netsim.scenario import Scenario

DEFAULT_CAMPUS_LOAD = CampusLoad(10, 250)
"""Identification's campus load: 10–250 long flows, a fifth of the time application-limited
(``CampusLoad``), so that one model serves table 5's N_s = 50..200 and the demand
experiment."""


@dataclass(frozen=True)
class TrainSettings:
    cca: str
    out_dir: Path
    duration_s: float = 28_800.0
    seed: int = 1
    folds: int = 3
    fit: FitSettings = field(default_factory=FitSettings)
    scenario: Scenario | None = None
    dtn_cap_excitation: bool = False
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    campus_load: CampusLoad = DEFAULT_CAMPUS_LOAD


@dataclass(frozen=True)
class TrainReport:
    samples: int
    folds: list[FoldErrors]
    binding_share: float
    final_validation_error: float
    epochs: int
    seconds: float

    def mean(self, name: str) -> float:
        return float(np.mean([getattr(fold, name) for fold in self.folds]))


Progress = Callable[[str, float, float], None]
"""``progress(stage, done, total)``."""


def train(settings: TrainSettings, progress: Progress | None = None) -> TrainReport:
    started = time.perf_counter()
    scenario = settings.scenario or Scenario()
    scenario = training_scenario(scenario, settings)
    report = progress or (lambda *_: None)
    data = identify(
        scenario, settings.duration_s, settings.seed,
        progress=lambda done, total: report("identification", done, total),
        telemetry=settings.telemetry, dtn_cap_excitation=settings.dtn_cap_excitation,
        campus_load=settings.campus_load,
    )  # fmt: skip
    x, u = training_table(data)
    fit_settings = replace(settings.fit, binding_share=_binding_share(scenario))
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
    export_onnx(final.model, data.max_rate_bps, out / "inverse.onnx", settings.cca)
    result = TrainReport(
        samples=len(x),
        folds=folds,
        binding_share=float(binding(x, u).mean()),
        final_validation_error=final.validation_error,
        epochs=final.epochs,
        seconds=time.perf_counter() - started,
    )
    (out / "card.md").write_text(model_card(settings, scenario, data.max_rate_bps, u, result))
    (out / "card.yaml").write_text(card_yaml(settings, scenario))
    return result


def card_yaml(settings: TrainSettings, scenario: Scenario) -> str:
    """The machine-readable card (``api.model_card``): what the model was identified on,
    each range the one value identification used (widen one only on evidence)."""
    capacity = format_rate(scenario.bottleneck.capacity_bps)
    dtn_rtt, campus_rtt = (format_duration(s) for s in (scenario.dtn.base_rtt_s,
                                                         scenario.campus.base_rtt_s))  # fmt: skip
    card = ModelCard(
        congestion_control=settings.cca,
        capacity=RateRange(min=capacity, max=capacity),
        sample_time=format_duration(scenario.sample_time_s),
        dtn_rtt=DurationRange(min=dtn_rtt, max=dtn_rtt),
        campus_rtt=DurationRange(min=campus_rtt, max=campus_rtt),
        command=command(settings),
    )
    return yaml.safe_dump(card.model_dump(by_alias=True, exclude_none=True), sort_keys=False)


def training_scenario(scenario: Scenario, settings: TrainSettings) -> Scenario:
    """The scenario identification runs: the DTN's CCA and the seed from the settings, and
    as many campus long-flow slots as the campus load reaches."""
    campus = scenario.campus.model_copy(update={"long_flows": settings.campus_load.max_flows})
    dtn = scenario.dtn.model_copy(update={"congestion_control": settings.cca})
    return scenario.model_copy(update={"dtn": dtn, "campus": campus, "seed": settings.seed})


def _binding_share(scenario: Scenario) -> float:
    """y2 / u where the shaper binds: the tap counts payload, u lets frames through."""
    return BINDING_SHARE * scenario.payload_fraction


def command(settings: TrainSettings) -> str:
    return (
        f"scidmz train --cca {settings.cca} --seed {settings.seed} "
        f"--duration {settings.duration_s:g} --folds {settings.folds}"
        + (
            ""
            if settings.dtn_cap_excitation == (settings.cca == "bbr")
            else " --dtn-cap-excitation"
            if settings.dtn_cap_excitation
            else " --no-dtn-cap-excitation"
        )
        + (
            f" --max-epochs {settings.fit.max_epochs}"
            if settings.fit.max_epochs != FitSettings().max_epochs
            else ""
        )
        + (
            ""
            if settings.campus_load == DEFAULT_CAMPUS_LOAD
            else f" --campus-flows {_flows_option(settings.campus_load)}"
        )
    )


def _flows_option(load: CampusLoad) -> str:
    return f"{load.min_flows}..{load.max_flows}" if load.varies else str(load.max_flows)


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
    frame = scenario.mss_bytes + scenario.header_bytes
    share = _binding_share(scenario)
    inputs = "\n".join(
        f"| {i} | `{name}` | {unit} |"
        for i, (name, unit) in enumerate(zip(FEATURE_NAMES, feature_units(), strict=True))
    )

    def folds(name: str) -> str:
        return ", ".join(f"{getattr(fold, name):.1%}" for fold in report.folds)

    excitation = (
        "and the DTN's sending-rate cap (the DTN actuator) uniform in "
        f"[{0.1 * max_rate_bps / 1e6:g}, {max_rate_bps / 1e6:g}] Mb/s or off (a quarter of "
        "the samples), independently"
        if settings.dtn_cap_excitation
        else "with the DTN uncapped"
    )
    load_note = (
        " The paper identifies at one load (100 senders); a model that never saw another "
        "extrapolates in the active-flow input (the first shipped cubic model answered "
        "û ≈ 2 Gb/s at N_s = 50), so the load varies here and the model learns how the "
        "campus's use of its bucket depends on it (fewer flows fill it less well)."
        if settings.campus_load.varies
        else ""
    )
    t = settings.telemetry
    binding_row = (
        f"| where the shaper binds | u(t) | **{report.mean('binding'):.1%}** "
        f"({folds('binding')}) | {report.mean('naive_binding'):.1%} |"
    )
    overall_row = (
        f"| all | the binding rate (the target) | **{report.mean('overall'):.1%}** "
        f"({folds('overall')}) | {report.mean('naive_overall'):.1%} |"
    )
    final = (
        f"Final model, early-stopping block (last {f.validation_fraction:.0%}): "
        f"{report.final_validation_error:.1%}"
    )
    return f"""# Inverse model card: {settings.cca} DTN

The MLC's inverse model (paper §3.5, eq. 1): û(t) = f(y_d(t), y(t−T), y(t−2T), u(t−T)).
Reproduce: `{command(settings)}` ({report.seconds / 60:.1f} min on this machine).

## Data
- System identification on the simulator (`scidmz.netsim`), scenario: the paper's testbed
  (§3.1) — bottleneck {scenario.bottleneck.capacity_bps / 1e9:g} Gb/s, campus long flows
  ({scenario.campus.congestion_control}, {scenario.campus.base_rtt_s * 1e3:g} ms), DTN
  {scenario.dtn.streams} streams ({settings.cca}, {scenario.dtn.base_rtt_s * 1e3:g} ms),
  T = {scenario.sample_time_s:g} s, seed {settings.seed}.
- Excitation: u(t) uniform in [0, {max_rate_bps / 1e6:g}] Mb/s, a new value every T
  (the paper's, figure 7), {excitation}; {settings.duration_s:g} s (the paper: 28,800 s).
- Campus load: {settings.campus_load.describe()}.{load_note}
- y(t) exactly as the collector computes it: the software target's packet source at its
  RTT-sample interval, through the collector's estimators (algorithms 3, 4, 6, 8; α =
  {t.rtt_smoothing:g}, flow timeout {t.flow_timeout_s:g} s, C_TH {t.active_flow_packets},
  T_TH {t.active_flow_window_s:g} s), unmeasured values filled as at control time
  (`control.features.fill_missing`, `FALLBACK_STATE`).
- {report.samples} rows (k ≥ 2); u(t) mean {float(np.mean(u)) / 1e6:.0f} Mb/s; the shaper
  binds (campus ≥ {REPORT_BINDING_SHARE:.0%} of u) on {report.binding_share:.0%} of them.

## What it predicts, and why
Where the campus wants less than u(t), the shaper does not bind and every u above the
campus demand gives the same y(t): u is not identifiable there. So the target is the
**binding rate** min(u(t), y2(t) / s), s = {BINDING_SHARE:g} × {scenario.mss_bytes}/{frame}
= {share:.3f} (y2 counts payload, u lets frames through): u itself where the shaper binds, and
elsewhere the least rate limit consistent with the state (the campus rate it carried). A
controller asks exactly that — which limit makes the campus carry y_d's campus rate.
Trained on the raw u instead, a squared loss pulls the binding rows toward the
non-identifiable rows' mean (the first shipped model: 19 % overall, 18 % where binding).

## Metrics (relative error Σ|û − u| / Σ|u|, {settings.folds} contiguous folds)

| rows | against | this model | "u = campus rate" (naive) |
|---|---|---:|---:|
{binding_row}
{overall_row}
| all | u(t) itself | {report.mean("overall_raw_u"):.1%} | — |

- The last row includes the non-identifiable rows, for completeness. There this model
  predicts the least limit, not u, by design; no model recovers u there (on the paper's
  excitation even an oracle that knows which rows bind, and predicts the middle of
  [campus rate, B] elsewhere, errs by ~14 % overall).
- The network starts from the naive inverse (its output is a correction to y2) and is
  judged by what it adds in the closed loop: `bench/results/control_quality/report.md`.
- {final} against the binding rate, epoch {report.epochs}.

## Desired state
At control time y(t) is replaced by y_d(t). The project's choice (`control.features.
desired_state`, mode `reachable`) is the state nearest table 3 that a full link visits:
R* for the DTN; G − R* for the campus, G the link's goodput when full as the controller
measures it (`LinkGoodput`: {scenario.payload_fraction:.1%} of B here, since y counts
payload), where table 3's B − R* asks for a total the link never carries; and the delays
of y(t−T), where table 3's base RTTs and zero queuing delay are a state a full drop-tail
bottleneck never visits (there the model extrapolates). The benchmark runs table 3's too
(`mlc (table 3 y_d)`).

## Model
- Fully connected: 22 inputs → {f.hidden_layers[0]} (64 × 22) → {f.hidden_layers[1]} → 1,
  as the paper. Activations: ReLU on both hidden layers, linear output (the paper does not
  say). Adam, learning rate {f.learning_rate:g}, batch {f.batch_size}, L2 {f.l2:g},
  early stopping on the last {f.validation_fraction:.0%} of the rows (patience
  {f.patience} epochs, at most {f.max_epochs}).
- In the graph: input standardisation, then û = y2 + {max_rate_bps:g} × network output.
  Feed raw SI values.

## Interface
- ONNX input `{INPUT_NAME}`: float32 `[N, 22]`; output `{OUTPUT_NAME}`: float32 `[N, 1]`, bit/s.
- Metadata `scidmz.features`, `scidmz.units`, `scidmz.target` (= `binding-rate`): the
  controller refuses to start on a model whose metadata differ from what it feeds.
- Input order:

| # | feature | unit |
|---:|---|---|
{inputs}

## Provenance
scikit-learn {sklearn.__version__}, onnxruntime {onnxruntime.__version__}, Python
{platform.python_version()}.
"""
