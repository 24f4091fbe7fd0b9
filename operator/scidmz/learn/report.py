"""The control-quality report: tables (mean ± 95 % interval), the targets, CDF plots.

Every arm is compared with the fixed baseline that has the same actuators: ``trivial``
(the paper's §3.7 campus token bucket at B − R*) for campus-only arms and for the table-3
ablation, ``trivial+dtn`` (that bucket plus the DTN paced at R*) for arms with the DTN
actuator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from scidmz.learn.evaluation import TRANSFER_FLOWS, Episode, mean_interval

PAPER_FCT_MARGIN = {1: 0.0177, 10: 0.0802, 100: 0.074, 1000: 0.0396, 10000: 0.0758}
"""Table 5's cubic FCT reductions (N_s = 100: §4.3's 7.4 %); other N_s use 7.4 %."""
PAPER_MRAE_MARGIN = {"cubic": 0.041, "bbr": 0.045}

METRICS: dict[str, tuple[tuple[str, str, float, str], ...]] = {
    # experiment: (field, label, scale, unit)
    "tracking": (
        ("mrae", "MRAE", 100, " %"), ("utilisation", "ρ", 100, " %"),
        ("rate_ratio", "DTN / R*", 1, ""),
    ),
    "short_flows": (
        ("short_fct_p50_s", "short-flow FCT p50", 1000, " ms"), ("mrae", "MRAE", 100, " %"),
        ("utilisation", "ρ", 100, " %"),
    ),
    "demand": (
        ("mrae", "MRAE", 100, " %"), ("utilisation", "ρ", 100, " %"),
        ("rate_ratio", "DTN / R*", 1, ""), ("campus_goodput_bps", "campus goodput", 1e-6, " Mb/s"),
    ),
    "steady": (
        ("u_std_fraction", "std u(t) / B", 100, " %"), ("mrae", "MRAE", 100, " %"),
    ),
}  # fmt: skip
TITLES = {
    "tracking": "(a) Tracking a time-varying R*(t), 100 campus flows",
    "short_flows": "(e) Short flows (paper §4.5, table 6) beside 100 long flows, R* = 600 Mb/s",
    "demand": "(f) Campus demand below B − R* part of the time, time-varying R*(t)",
    "steady": "(g) Constant R* = 600 Mb/s: is there a limit cycle?",
}


def baseline_arm(arm: str) -> str:
    return "trivial+dtn" if "+dtn" in arm else "trivial"


def _select(
    episodes: list[Episode], experiment: str, cca: str, arm: str, flows: int | None = None
) -> list[Episode]:
    return [
        e for e in episodes
        if e.experiment == experiment and e.cca == cca and e.arm == arm
        and (flows is None or e.campus_flows == flows)
    ]  # fmt: skip


def _values(episodes: list[Episode], name: str) -> list[float]:
    return [float(getattr(e, name)) for e in episodes]


def _mean(values: list[float]) -> float:
    return mean_interval(values)[0]


def _cell(values: list[float], scale: float, unit: str) -> str:
    mean, half = mean_interval([v * scale for v in values])
    if math.isnan(mean):
        return "—"
    digits = 3 if unit == "" else 2
    if math.isfinite(half):
        return f"{mean:.{digits}f} ± {half:.{digits}f}{unit}"
    return f"{mean:.{digits}f}{unit}"


def _change(values: list[float], baseline: list[float]) -> str:
    mean, base = _mean(values), _mean(baseline)
    if not (math.isfinite(mean) and math.isfinite(base)) or base == 0:
        return ""
    return f" ({(mean - base) / base:+.1%})"


def _unfinished(fcts: list[float]) -> int:
    """Transfers that did not complete within the episode's limit (their FCT is NaN)."""
    return sum(1 for f in fcts if not math.isfinite(f))


def _unfinished_note(fcts: list[float]) -> str:
    count = _unfinished(fcts)
    return f" **{count} of {len(fcts)} unfinished**" if count else ""


def _arms(episodes: list[Episode], cca: str) -> list[str]:
    seen: list[str] = []
    for e in episodes:
        if e.cca == cca and e.arm not in seen:
            seen.append(e.arm)
    return seen


@dataclass(frozen=True)
class Paired:
    """An arm against another on the same seeds (each seed: the same traffic, R*(t) and
    random draws for both), on one field where lower is better."""

    seeds: int
    lower: int
    """Seeds on which the arm's value is below the other's."""
    mean_difference: float
    half_width: float
    """Of the 95 % interval of the mean difference (Student t on the paired differences)."""
    p_value: float
    """Wilcoxon signed-rank, two-sided (exact for small samples; NaN: no differences)."""

    def describe(self, scale: float, unit: str) -> str:
        if not self.seeds:
            return "—"
        if math.isnan(self.p_value):  # no seed differs
            return f"identical on {self.seeds}/{self.seeds} seeds"
        p = f"p = {self.p_value:.3f}"
        return (
            f"{self.mean_difference * scale:+.2f} ± {self.half_width * scale:.2f}{unit}, "
            f"lower on {self.lower}/{self.seeds} seeds, {p}"
        )


def paired(arm: list[Episode], other: list[Episode], field: str) -> Paired:
    """``arm`` − ``other`` per seed, over the seeds both have a finite ``field`` for."""
    from scipy.stats import wilcoxon

    theirs = {e.seed: float(getattr(e, field)) for e in other}
    differences = [
        float(getattr(e, field)) - theirs[e.seed]
        for e in arm
        if e.seed in theirs and math.isfinite(float(getattr(e, field)) - theirs[e.seed])
    ]
    if not differences:
        return Paired(0, 0, math.nan, math.nan, math.nan)
    mean, half = mean_interval(differences)
    p_value = math.nan
    if any(d != 0 for d in differences):
        p_value = float(wilcoxon(differences).pvalue)
    return Paired(len(differences), sum(d < 0 for d in differences), mean, half, p_value)


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    met: bool


def targets(episodes: list[Episode]) -> list[Target]:
    """The control targets, judged on the episodes (missing data counts as missed)."""
    found: list[Target] = []

    def add(name: str, measured: str, met: bool) -> None:
        found.append(Target(name, measured, met))

    def mean_of(experiment: str, cca: str, arm: str, field: str, flows: int | None = None) -> float:
        return _mean(_values(_select(episodes, experiment, cca, arm, flows), field))

    def relative(value: float, base: float) -> float:
        return (value - base) / base if math.isfinite(value) and base else math.nan

    flows_seen = sorted({e.campus_flows for e in episodes if e.experiment == "transfer"})
    for arm in ("mlc", "mlc+dtn"):
        base = baseline_arm(arm)
        for flows in flows_seen:
            margin = PAPER_FCT_MARGIN.get(flows, 0.074)
            fct = relative(
                mean_of("transfer", "cubic", arm, "fct_s", flows),
                mean_of("transfer", "cubic", base, "fct_s", flows),
            )
            # a transfer that never completes has no FCT: the mean over the others would
            # hide it, so any unfinished run (arm or baseline) fails the target
            fcts = _values(_select(episodes, "transfer", "cubic", arm, flows), "fct_s")
            fcts += _values(_select(episodes, "transfer", "cubic", base, flows), "fct_s")
            add(
                f"cubic {arm}, N_s = {flows}: FCT vs {base} ≤ −{margin:.1%}",
                f"{fct:+.1%}" + (f", {_unfinished(fcts)} of {len(fcts)} runs unfinished"
                                 if _unfinished(fcts) else ""),
                fct <= -margin and not _unfinished(fcts),
            )  # fmt: skip
            error = relative(
                mean_of("transfer", "cubic", arm, "mrae", flows),
                mean_of("transfer", "cubic", base, "mrae", flows),
            )
            add(
                f"cubic {arm}, N_s = {flows}: MRAE vs {base} ≤ −{PAPER_MRAE_MARGIN['cubic']:.1%}",
                f"{error:+.1%}", error <= -PAPER_MRAE_MARGIN["cubic"],
            )  # fmt: skip
            ratio = mean_of("transfer", "cubic", arm, "rate_ratio", flows)
            add(
                f"cubic {arm}, N_s = {flows}: mean DTN rate ≤ 1.05 R*", f"{ratio:.3f} R*",
                ratio <= 1.05,
            )  # fmt: skip
        track = relative(
            mean_of("tracking", "cubic", arm, "mrae"), mean_of("tracking", "cubic", base, "mrae")
        )
        add(
            f"cubic {arm}, tracking R*(t): MRAE vs {base} ≤ −{PAPER_MRAE_MARGIN['cubic']:.1%}",
            f"{track:+.1%}", track <= -PAPER_MRAE_MARGIN["cubic"],
        )  # fmt: skip
        pi = arm.replace("mlc", "pi")
        for experiment in ("tracking", "transfer"):
            at = 100 if experiment == "transfer" else None
            ours = mean_of(experiment, "cubic", arm, "mrae", at)
            theirs = mean_of(experiment, "cubic", pi, "mrae", at)
            pairs = paired(
                _select(episodes, experiment, "cubic", arm, at),
                _select(episodes, experiment, "cubic", pi, at), "mrae",
            )  # fmt: skip
            p = "" if math.isnan(pairs.p_value) else f", Wilcoxon p = {pairs.p_value:.3f}"
            add(
                f"cubic {arm}, {experiment}: MRAE below {pi}'s",
                f"{ours:.2%} vs {theirs:.2%} (lower on {pairs.lower}/{pairs.seeds} seeds{p})",
                ours < theirs,
            )  # fmt: skip
        used = [
            relative(
                mean_of("transfer", "cubic", arm, "utilisation", n),
                mean_of("transfer", "cubic", base, "utilisation", n),
            )
            for n in flows_seen
        ]  # fmt: skip
        # judged both ways, as written; the signed figures show which way a miss goes
        worst = max(used, key=abs) if used else math.nan
        each = ", ".join(f"{n}: {v:+.2%}" for n, v in zip(flows_seen, used, strict=True))
        add(
            f"cubic {arm}: ρ within 0.5 % of {base}", f"worst {worst:+.2%} (N_s {each})",
            abs(worst) <= 0.005,
        )  # fmt: skip
        short = relative(
            mean_of("short_flows", "cubic", arm, "short_fct_p50_s"),
            mean_of("short_flows", "cubic", base, "short_fct_p50_s"),
        )
        add(f"cubic {arm}: short-flow FCT p50 ≤ +5 % vs {base}", f"{short:+.1%}", short <= 0.05)
    for arm in ("mlc+dtn", "pi+dtn"):
        for experiment in ("tracking", "transfer"):
            at = 100 if experiment == "transfer" else None
            ratio = mean_of(experiment, "bbr", arm, "rate_ratio", at)
            error = mean_of(experiment, "bbr", arm, "mrae", at)
            add(
                f"bbr {arm}, {experiment}: mean DTN rate within 5 % of R*", f"{ratio:.3f} R*",
                abs(ratio - 1) <= 0.05,
            )  # fmt: skip
            add(f"bbr {arm}, {experiment}: MRAE ≤ 10 %", f"{error:.2%}", error <= 0.10)
    for cca in ("cubic", "bbr"):
        for arm in ("mlc", "mlc+dtn"):
            spread = [v for v in _values(_select(episodes, "steady", cca, arm), "u_std_fraction")]
            worst = max(spread) if spread else math.nan
            add(
                f"{cca} {arm}: std u(t) < 5 % of B at constant R*",
                f"worst {worst:.2%}",
                worst < 0.05,
            )
    return found


def markdown(episodes: list[Episode], command: str) -> str:
    lines = [
        "# Control quality on the simulator (paper §4.2–4.5)",
        "",
        f"`{command}` ({len({e.seed for e in episodes})} seeds); mean ± 95 % interval over "
        "seeds. In brackets: the change against the",
        "fixed baseline with the same actuators (`trivial`: the paper's campus token bucket at",
        "B − R*; `trivial+dtn`: that bucket plus the DTN paced at R*). The controller runs on",
        "the simulated clock (its dt is checked against the simulator's every sample).",
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---:|---|",
    ]
    for target in targets(episodes):
        lines.append(
            f"| {target.name} | {target.measured} | {'met' if target.met else '**missed**'} |"
        )
    for cca in ("cubic", "bbr"):
        arms = _arms(episodes, cca)
        if not arms:
            continue
        lines += ["", f"## {cca} DTN", ""]
        flows_seen = sorted({e.campus_flows for e in episodes if e.experiment == "transfer"})
        if flows_seen:
            lines += [
                "### (b–d) 10 GB transfer at R* = 600 Mb/s against N_s campus flows "
                "(paper table 5)",
                "",
                "FCT (ideal 133.3 s; the 8 streams share one pool of bytes, as `iperf3 -n`), "
                "then the DTN's mean rate over R*, ρ and MRAE while it runs.",
                "",
                "| arm | " + " | ".join(f"N_s = {n}" for n in flows_seen) + " |",
                "|---|" + "---:|" * len(flows_seen),
            ]
            for arm in arms:
                cells = []
                for n in flows_seen:
                    runs = _select(episodes, "transfer", cca, arm, n)
                    base = _select(episodes, "transfer", cca, baseline_arm(arm), n)
                    fct = _values(runs, "fct_s")
                    cells.append(
                        f"{_cell(fct, 1, ' s')}{_change(fct, _values(base, 'fct_s'))}"
                        f"{_unfinished_note(fct)}<br>"
                        f"{_cell(_values(runs, 'rate_ratio'), 1, '')} R*, "
                        f"ρ {_cell(_values(runs, 'utilisation'), 100, ' %')}, "
                        f"MRAE {_cell(_values(runs, 'mrae'), 100, ' %')}"
                        f"{_change(_values(runs, 'mrae'), _values(base, 'mrae'))}"
                    )
                lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        for experiment, metrics in METRICS.items():
            if not any(e.experiment == experiment and e.cca == cca for e in episodes):
                continue
            lines += [
                "", f"### {TITLES[experiment]}", "",
                "| arm | " + " | ".join(label for _, label, _, _ in metrics) + " |",
                "|---|" + "---:|" * len(metrics),
            ]  # fmt: skip
            for arm in arms:
                runs = _select(episodes, experiment, cca, arm)
                base = _select(episodes, experiment, cca, baseline_arm(arm))
                cells = [
                    _cell(_values(runs, name), scale, unit)
                    + _change(_values(runs, name), _values(base, name))
                    for name, _, scale, unit in metrics
                ]
                lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += paired_section(episodes)
    lines += [
        "",
        "Paper, MLC against trivial: MRAE −4.1 % (cubic) / −4.5 % (bbr); FCT −7.4 % / −21.72 %",
        "(table 5 per N_s); ρ within 0.65 %. Lower MRAE and FCT are better.",
        "",
    ]
    return "\n".join(lines)


def episodes_csv(episodes: list[Episode]) -> str:
    """Every episode's figures, one row each (NaN where an experiment has no such figure),
    so the report can be rendered again, or checked, without running the episodes."""
    import csv
    import io

    names = [f.name for f in fields(Episode)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([getattr(e, name) for name in names] for e in episodes)
    return buffer.getvalue()


def parse_episodes(text: str) -> list[Episode]:
    """``episodes_csv``'s rows back; raises ValueError naming a bad row."""
    import csv

    kinds = {f.name: f.type for f in fields(Episode)}
    episodes = []
    rows = csv.DictReader(text.splitlines())
    missing = set(kinds) - set(rows.fieldnames or [])
    if missing:
        raise ValueError(f"episodes: columns {sorted(missing)} missing")
    for number, row in enumerate(rows, start=2):
        try:
            values: dict[str, object] = {
                name: row[name] if kind == "str" else int(row[name]) if kind == "int"
                else float(row[name])
                for name, kind in kinds.items()
            }  # fmt: skip
        except (TypeError, ValueError) as error:
            raise ValueError(f"episodes line {number}: {error}") from None
        episodes.append(Episode(**values))  # type: ignore[arg-type]
    return episodes


PAIRINGS = (("mlc", "pi"), ("mlc", "trivial"), ("pi", "trivial"), ("mlc+dtn", "pi+dtn"))
"""Which arm is set against which, seed by seed, in ``paired_section``."""


def paired_section(episodes: list[Episode]) -> list[str]:
    """Every pairing, on the same seeds: is a difference of means more than seed noise?"""
    lines = [
        "",
        "## Paired by seed",
        "",
        "Each seed runs every arm on the same traffic and R*(t), so arms are compared seed by "
        "seed: the mean difference (arm − other) with its 95 % interval, the seeds on which "
        "the arm is lower (better), and the two-sided Wilcoxon signed-rank p-value. An "
        "interval that spans 0 (or p ≥ 0.05) means the difference of means is within what "
        "the seeds scatter.",
        "",
        "| DTN | arm vs other | experiment | MRAE (points) | FCT |",
        "|---|---|---|---:|---:|",
    ]
    flows_seen = sorted({e.campus_flows for e in episodes if e.experiment == "transfer"})
    cases: list[tuple[str, int | None]] = [("tracking", None), ("demand", None)]
    cases += [("transfer", n) for n in flows_seen]
    for cca in ("cubic", "bbr"):
        arms = _arms(episodes, cca)
        for arm, other in PAIRINGS:
            if arm not in arms or other not in arms:
                continue
            for experiment, flows in cases:
                ours = _select(episodes, experiment, cca, arm, flows)
                theirs = _select(episodes, experiment, cca, other, flows)
                if not ours or not theirs:
                    continue
                error = paired(ours, theirs, "mrae").describe(100, "")
                fct = (
                    paired(ours, theirs, "fct_s").describe(1, " s")
                    if experiment == "transfer" else ""
                )  # fmt: skip
                where = f"{experiment}" + (f", N_s = {flows}" if flows else "")
                lines.append(f"| {cca} | {arm} vs {other} | {where} | {error} | {fct} |")
    return lines


def plots(episodes: list[Episode], out_dir: Path) -> list[Path]:
    """CDFs of tracking MRAE and of the FCT at N_s = 100 per arm and CCA (figures 10–11)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    picks: tuple[tuple[str, str, str, Callable[[Episode], bool]], ...] = (
        ("mrae", "MRAE, tracking R*(t)", "tracking", lambda e: True),
        ("fct_s", "FCT of 10 GB (s), N_s = 100", "transfer", lambda e: e.campus_flows == 100),
    )
    for metric, label, experiment, keep in picks:
        figure, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
        for axis, cca in zip(axes, ("cubic", "bbr"), strict=True):
            for arm in _arms(episodes, cca):
                values = sorted(
                    getattr(e, metric) for e in _select(episodes, experiment, cca, arm)
                    if keep(e) and math.isfinite(getattr(e, metric))
                )  # fmt: skip
                if values:
                    cdf = [(i + 1) / len(values) for i in range(len(values))]
                    axis.step(values, cdf, where="post", label=arm)
            axis.set_title(f"{cca} DTN")
            axis.set_xlabel(label)
            axis.grid(alpha=0.3)
        axes[0].set_ylabel("CDF")
        axes[1].legend(fontsize=7)
        figure.tight_layout()
        path = out_dir / f"{experiment}_{metric.removesuffix('_s')}_cdf.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


__all__ = [
    "TRANSFER_FLOWS",
    "episodes_csv",
    "markdown",
    "paired",
    "parse_episodes",
    "plots",
    "targets",
]
