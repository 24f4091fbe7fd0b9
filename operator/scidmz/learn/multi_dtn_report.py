"""The report of ``scidmz bench multi-dtn``: per case, arm and DTN, and the targets."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scidmz.learn.multi_dtn_bench import ARMS, CASES, DTNS, MultiDtnEpisode

MRAE_TARGET = 0.05
SUM_TARGET = 0.02
UTILISATION_POINTS = 0.5
DISTURBANCE_TARGET = 0.10


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


def _spread(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "–"
    mean = statistics.fmean(finite)
    sd = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return f"{mean:.3f} ± {sd:.3f}"


def _episode_figure(rows: Sequence[MultiDtnEpisode], name: str) -> list[float]:
    """An episode-wide figure, once per episode (it is repeated on each DTN's row)."""
    seen: dict[int, float] = {}
    for row in rows:
        seen.setdefault(row.seed, getattr(row, name))
    return list(seen.values())


def _worst_dtn(rows: Sequence[MultiDtnEpisode], name: str) -> float:
    """The largest of each DTN's mean ``name`` over seeds (DTNs without one left out)."""
    means = [_mean([getattr(e, name) for e in rows if e.dtn == d.name]) for d in DTNS]
    return max((m for m in means if math.isfinite(m)), default=math.nan)


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def markdown(
    episodes: Sequence[MultiDtnEpisode], command: str, where: str = "twin", runs: str = "seeds"
) -> str:
    seeds = sorted({e.seed for e in episodes})
    lines = [
        f"# Several DTNs on one link ({where})",
        "",
        f"`{command}` — {runs} {seeds[0]}–{seeds[-1]} ({len(seeds)}), mean ± sd over {runs}.",
        "",
        "1 Gb/s, 100 Cubic campus flows (10 ms), 180 s; dtn-1 Cubic 100 ms at 300 Mb/s, "
        "dtn-2 Cubic 50 ms at 200 Mb/s (admitted and sending 60–120 s), dtn-3 BBR 80 ms at "
        "150 Mb/s. `static`: campus tbf at B − ΣR*, each shaped DTN capped at its R*. "
        "`mlc` runs the Cubic inverse model (the link's choice for this mix; no model is "
        "identified on mixed congestion control). MRAE and rate over each DTN's own active "
        "time after 20 s; sum ratio Σ R_i / Σ R*_i of the admitted DTNs each T after 20 s; "
        "worst disturbance: the largest deviation of a DTN's per-T rate over the 10 s "
        "after another DTN starts or stops, from its mean over the 10 s before, as a share "
        "of its target (first 2 T ignored).",
        "",
    ]
    for case in CASES:
        rows = [e for e in episodes if e.case == case]
        if not rows:
            continue
        lines += [
            f"## Case `{case}`",
            "",
            "| arm | DTN | rate Mb/s (target) | MRAE | worst disturbance |",
            "|---|---|---|---|---|",
        ]
        for arm in ARMS:
            for dtn in DTNS:
                mine = [e for e in rows if e.arm == arm and e.dtn == dtn.name]
                if not mine:
                    continue
                lines.append(
                    f"| {arm} | {dtn.name} ({dtn.cca}) | "
                    f"{_mean([e.rate_mbps for e in mine]):.1f} ({dtn.target_bps / 1e6:.0f}) | "
                    f"{_spread([e.mrae for e in mine])} | "
                    f"{_spread([e.worst_disturbance for e in mine])} |"
                )
        lines += [
            "",
            "| arm | sum ratio | utilisation | campus queuing delay ms |",
            "|---|---|---|---|",
        ]
        for arm in ARMS:
            mine = [e for e in rows if e.arm == arm]
            if mine:
                lines.append(
                    f"| {arm} | {_spread(_episode_figure(mine, 'sum_ratio'))} | "
                    f"{_spread(_episode_figure(mine, 'utilisation'))} | "
                    f"{_mean(_episode_figure(mine, 'campus_qd_ms')):.1f} |"
                )
        lines.append("")
    lines += _headline(episodes)
    lines += _targets(episodes)
    return "\n".join(lines) + "\n"


def _headline(episodes: Sequence[MultiDtnEpisode]) -> list[str]:
    """Case ``capped`` in one line per arm: the sum's signed error, the worst DTN's MRAE
    and worst disturbance (each DTN's mean over seeds), the campus's queuing delay."""
    rows = [e for e in episodes if e.case == "capped"]
    lines = [
        "## Headline (case `capped`)",
        "",
        "| arm | sum off Σ R* | worst DTN's MRAE | worst disturbance | campus queuing delay |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        mine = [e for e in rows if e.arm == arm]
        if not mine:
            continue
        sums = _mean(_episode_figure(mine, "sum_ratio")) - 1
        worst = _worst_dtn(mine, "mrae")
        disturbance = _worst_dtn(mine, "worst_disturbance")
        qd = _mean(_episode_figure(mine, "campus_qd_ms"))
        lines.append(f"| {arm} | {sums:+.1%} | {worst:.1%} | {disturbance:.0%} | {qd:.0f} ms |")
    return [*lines, ""]


def _targets(episodes: Sequence[MultiDtnEpisode]) -> list[str]:
    rows = [e for e in episodes if e.case == "capped"]
    static = _mean(_episode_figure([e for e in rows if e.arm == "static"], "utilisation"))
    lines = [
        "## Targets (case `capped`)",
        "",
        "| arm | target | figure | verdict |",
        "|---|---|---|---|",
    ]
    for arm in ("pi", "mlc"):
        mine = [e for e in rows if e.arm == arm]
        if not mine:
            continue
        worst_mrae = _worst_dtn(mine, "mrae")
        sums = _mean([abs(s - 1) for s in _episode_figure(mine, "sum_ratio")])
        used = _mean(_episode_figure(mine, "utilisation"))
        disturbance = _worst_dtn(mine, "worst_disturbance")
        lines += [
            f"| {arm} | each DTN's MRAE ≤ 5 % | worst DTN {worst_mrae:.1%} | "
            f"{_verdict(worst_mrae <= MRAE_TARGET)} |",
            f"| {arm} | sum within 2 % of ΣR* | {sums:.2%} off | {_verdict(sums <= SUM_TARGET)} |",
            f"| {arm} | utilisation within 0.5 pt of static ({static:.1%}) | {used:.1%} | "
            f"{_verdict(abs(used - static) * 100 <= UTILISATION_POINTS)} |",
            f"| {arm} | worst disturbance ≤ 10 % | worst DTN {disturbance:.1%} | "
            f"{_verdict(disturbance <= DISTURBANCE_TARGET)} |",
        ]
    return [*lines, ""]
