"""The control-quality report: a Markdown table (mean ± 95 % interval) and CDF plots."""

from __future__ import annotations

import math
from pathlib import Path

from scidmz.learn.evaluation import Episode, mean_interval

PAPER = {
    ("cubic", "mrae"): "−4.1 % vs trivial",
    ("bbr", "mrae"): "−4.5 % vs trivial",
    ("cubic", "fct"): "−7.4 % vs trivial",
    ("bbr", "fct"): "−21.72 % vs trivial",
}


def _cell(values: list[float], scale: float, unit: str) -> str:
    mean, half = mean_interval([v * scale for v in values])
    if math.isnan(mean):
        return "—"
    return f"{mean:.2f} ± {half:.2f}{unit}" if math.isfinite(half) else f"{mean:.2f}{unit}"


def _change(values: list[float], baseline: list[float]) -> str:
    mean, _ = mean_interval(values)
    base, _ = mean_interval(baseline)
    if not (math.isfinite(mean) and math.isfinite(base)) or base == 0:
        return "—"
    return f"{(mean - base) / base:+.1%}"


def markdown(episodes: list[Episode], command: str) -> str:
    lines = [
        "# Control quality on the simulator (issue 5, paper §4.2–4.4)",
        "",
        f"`{command}`; mean ± 95 % interval over seeds; change against trivial in brackets.",
        "",
        "| DTN CCA | strategy | MRAE (a) | ρ during (a) | FCT 10 GB, 100 flows (b) "
        "| ρ during (b) (c) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for cca in ("cubic", "bbr"):
        base_track = [e.mrae for e in episodes if e.cca == cca and e.strategy == "trivial"
                      and e.experiment == "tracking"]  # fmt: skip
        base_fct = [e.fct_s for e in episodes if e.cca == cca and e.strategy == "trivial"
                    and e.experiment == "transfer" and e.campus_flows == 100]  # fmt: skip
        for strategy in ("trivial", "pi", "mlc"):
            track = [e for e in episodes if e.cca == cca and e.strategy == strategy
                     and e.experiment == "tracking"]  # fmt: skip
            runs = [e for e in episodes if e.cca == cca and e.strategy == strategy
                    and e.experiment == "transfer" and e.campus_flows == 100]  # fmt: skip
            if not track:
                continue
            mrae_values = [e.mrae for e in track]
            fct_values = [e.fct_s for e in runs]
            lines.append(
                f"| {cca} | {strategy} | {_cell(mrae_values, 100, ' %')} "
                f"({_change(mrae_values, base_track)}) | "
                f"{_cell([e.utilisation for e in track], 100, ' %')} | "
                f"{_cell(fct_values, 1, ' s')} ({_change(fct_values, base_fct)}) | "
                f"{_cell([e.utilisation for e in runs], 100, ' %')} |"
            )
    flows = sorted({e.campus_flows for e in episodes if e.experiment == "transfer"})
    if len(flows) > 1:
        lines += ["", "## (d) FCT against the number of campus streams N_s (paper table 5)", ""]
        lines.append("| DTN CCA | strategy | " + " | ".join(f"N_s = {n}" for n in flows) + " |")
        lines.append("|---|---|" + "---:|" * len(flows))
        for cca in ("cubic", "bbr"):
            for strategy in ("trivial", "pi", "mlc"):
                cells = []
                for n in flows:
                    fcts = [e.fct_s for e in episodes if e.cca == cca and e.strategy == strategy
                            and e.experiment == "transfer" and e.campus_flows == n]  # fmt: skip
                    base = [e.fct_s for e in episodes if e.cca == cca and e.strategy == "trivial"
                            and e.experiment == "transfer" and e.campus_flows == n]  # fmt: skip
                    cells.append(f"{_cell(fcts, 1, ' s')} ({_change(fcts, base)})" if fcts else "—")
                if any(c != "—" for c in cells):
                    lines.append(f"| {cca} | {strategy} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paper, against trivial: MRAE −4.1 % (cubic) / −4.5 % (bbr); FCT −7.4 % / −21.72 %;",
        "ρ within 0.65 %. Lower MRAE and FCT are better.",
        "",
    ]
    return "\n".join(lines)


def plots(episodes: list[Episode], out_dir: Path) -> list[Path]:
    """CDFs of MRAE and FCT per strategy and CCA (the paper's figures 10–12)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for metric, label, experiment in (
        ("mrae", "MRAE", "tracking"),
        ("fct_s", "FCT of 10 GB (s)", "transfer"),
    ):
        figure, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
        for axis, cca in zip(axes, ("cubic", "bbr"), strict=True):
            for strategy in ("trivial", "pi", "mlc"):
                values = sorted(
                    getattr(e, metric) for e in episodes
                    if e.cca == cca and e.strategy == strategy and e.experiment == experiment
                    and e.campus_flows == 100 and math.isfinite(getattr(e, metric))
                )  # fmt: skip
                if values:
                    cdf = [(i + 1) / len(values) for i in range(len(values))]
                    axis.step(values, cdf, where="post", label=strategy)
            axis.set_title(f"{cca} DTN")
            axis.set_xlabel(label)
            axis.grid(alpha=0.3)
        axes[0].set_ylabel("CDF")
        axes[1].legend()
        figure.tight_layout()
        path = out_dir / f"{experiment}_{metric.removesuffix('_s')}_cdf.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written
