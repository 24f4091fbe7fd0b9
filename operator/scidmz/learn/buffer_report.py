"""The report of ``scidmz bench buffer``: f̄ per arm, how often P4BS is best, and the
targets of seed 003's spec, from the episodes (pure: text in, text out)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from scidmz.control.quality import finite_mean
from scidmz.learn.buffer_bench import ARMS, BufferEpisode

BEST_SEEDS = 0.8
"""Target: P4BS best on f̄ on at least 8 seeds in 10 at every load."""
CAMPUS_QD_MS = 30.0
MRAE_POINTS = 0.005


def p4bs_best(episodes: Sequence[BufferEpisode]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per (cca, load): the seeds on which P4BS had the highest f̄ of every arm run (ties
    are not wins), and the seeds compared."""
    by_seed: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for e in episodes:
        by_seed[(e.cca, e.load, e.seed)][e.arm] = e.objective
    counts: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for (cca, load, _), arms in by_seed.items():
        if "p4bs" not in arms or len(arms) < 2:
            continue
        others = [f for arm, f in arms.items() if arm != "p4bs"]
        counts[(cca, load)][1] += 1
        counts[(cca, load)][0] += arms["p4bs"] > max(others)
    return {key: (won, total) for key, (won, total) in counts.items()}


def markdown(episodes: Sequence[BufferEpisode], command: str) -> str:
    """The whole report."""
    capacity = episodes[0].capacity_bps if episodes else 1e9
    cases = sorted({(e.cca, e.load) for e in episodes})
    arms = [a for a in ARMS if any(e.arm == a for e in episodes)]
    seeds = sorted({e.seed for e in episodes})
    lines = [
        "# Buffer sizing on the twin: P4BS against fixed buffers, the rate loop on",
        "",
        f"`{command}`: {capacity / 1e9:g} Gb/s, a {10 * capacity / 1e9:g} GB DTN transfer at R* = "
        f"{0.6 * capacity / 1e9:g} Gb/s (8 streams, 100 ms), N long campus flows (Cubic, "
        f"10 ms), seeds {seeds[0]}–{seeds[-1]} ({len(seeds)}). The rate loop is `pi` (with "
        "the DTN host's cap for a BBR DTN). Per episode, over the transfer after a 20 s "
        "warm-up: f̄ = mean of −[0.5·p/0.05 + 0.5·d/200 ms] (P4BS eq. 2 on the collector's "
        "loss and mean queuing delay; higher is better), P4BS's search included.",
        "",
        "## f̄ per arm (mean over seeds)",
        "",
        "| DTN | N | " + " | ".join(arms) + " |",
        "|---|---:|" + "---:|" * len(arms),
    ]
    for cca, load in cases:
        row = [
            finite_mean([e.objective for e in episodes if (e.cca, e.load, e.arm) == (cca, load, a)])
            for a in arms
        ]
        best = max((v for v in row if math.isfinite(v)), default=math.nan)
        cells = [f"**{v:.3f}**" if v == best else f"{v:.3f}" for v in row]
        lines.append(f"| {cca} | {load} | " + " | ".join(cells) + " |")
    lines += ["", "## Targets", ""]
    wins = p4bs_best(episodes)
    lines += [
        "| DTN | N | P4BS best on f̄ (≥ 8/10) | campus QD, P4BS (≤ 30 ms) | DTN MRAE, P4BS − 100 ms "
        "(≤ +0.5 pts) | loss, P4BS / 100 ms | FCT, P4BS / 100 ms | mean buffer, P4BS |",
        "|---|---:|---|---|---|---|---|---:|",
    ]
    for cca, load in cases:

        def of(arm: str, field: str, cca: str = cca, load: int = load) -> float:
            return finite_mean(
                [getattr(e, field) for e in episodes if (e.cca, e.load, e.arm) == (cca, load, arm)]
            )

        won, total = wins.get((cca, load), (0, 0))
        best_ok = total > 0 and won >= BEST_SEEDS * total
        qd = of("p4bs", "campus_qd_ms")
        mrae_rise = of("p4bs", "dtn_mrae") - of("100ms", "dtn_mrae")
        lines.append(
            f"| {cca} | {load} | {won}/{total} — {_verdict(best_ok)} | {qd:.1f} ms — "
            f"{_verdict(qd <= CAMPUS_QD_MS)} | {mrae_rise * 100:+.2f} pts — "
            f"{_verdict(mrae_rise <= MRAE_POINTS)} | {of('p4bs', 'loss'):.3%} / "
            f"{of('100ms', 'loss'):.3%} | {of('p4bs', 'fct_s'):.1f} / {of('100ms', 'fct_s'):.1f} s"
            f" | {of('p4bs', 'buffer_ms'):.1f} ms |"
        )
    p4bs = [e for e in episodes if e.arm == "p4bs"]
    if p4bs:
        under = sum(e.buffer_ms < 30 for e in p4bs)
        lines += [
            "",
            f"Buffers P4BS kept under 30 ms on average: {under}/{len(p4bs)} episodes "
            f"({under / len(p4bs):.0%}; P4BS's Science DMZ run: 80 %).",
        ]
    lines += [
        "",
        "## Every arm (means over seeds)",
        "",
        "| DTN | N | arm | f̄ | loss | campus QD (ms) | DTN MRAE | FCT (s) | buffer (ms) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cca, load in cases:
        for arm in arms:
            chosen = [e for e in episodes if (e.cca, e.load, e.arm) == (cca, load, arm)]
            lines.append(
                f"| {cca} | {load} | {arm} | {finite_mean([e.objective for e in chosen]):.3f} | "
                f"{finite_mean([e.loss for e in chosen]):.3%} | "
                f"{finite_mean([e.campus_qd_ms for e in chosen]):.1f} | "
                f"{finite_mean([e.dtn_mrae for e in chosen]):.3f} | "
                f"{finite_mean([e.fct_s for e in chosen]):.1f} | "
                f"{finite_mean([e.buffer_ms for e in chosen]):.1f} |"
            )
    return "\n".join(lines) + "\n"


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"
