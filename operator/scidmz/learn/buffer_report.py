"""The report of ``scidmz bench buffer``: f̄ per arm, how often P4BS is best (the paper's
criterion and ours), the search's cost and the targets, from the episodes (pure: text
in, text out)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

from scidmz.control.quality import finite_mean
from scidmz.learn.buffer_bench import ARMS, FIXED_ARMS, SEARCH_ARMS, BufferEpisode

BEST_SEEDS = 0.8
"""Target: P4BS best on f̄ on at least 8 seeds in 10 at every load."""
CAMPUS_QD_MS = 30.0
QD_LOADS = 100
"""The campus queuing-delay target holds at N ≤ 100."""
MRAE_POINTS = 0.005
TRIAL_SHARE = 0.2
"""Target: at most a fifth of a steady episode spent in trials."""

Key = tuple[str, str, int]
"""(episode kind, cca, load)."""


def _seeds(
    episodes: Sequence[BufferEpisode],
) -> dict[tuple[str, str, int, int], dict[str, BufferEpisode]]:
    by_seed: dict[tuple[str, str, int, int], dict[str, BufferEpisode]] = defaultdict(dict)
    for e in episodes:
        by_seed[(e.episode, e.cca, e.load, e.seed)][e.arm] = e
    return by_seed


def p4bs_best(
    episodes: Sequence[BufferEpisode], arm: str = "p4bs", feasible_only: bool = True
) -> dict[Key, tuple[int, int]]:
    """Per (episode, cca, load): the seeds on which ``arm`` had a higher f̄ than every
    fixed arm run — only the feasible ones (ours; ``arm`` must be feasible itself) or all
    of them (the paper's) — and the seeds compared. Ties are not wins."""
    counts: dict[Key, list[int]] = defaultdict(lambda: [0, 0])
    for (kind, cca, load, _), arms in _seeds(episodes).items():
        mine = arms.get(arm)
        fixed = [e for name, e in arms.items() if name in FIXED_ARMS]
        if mine is None or not fixed:
            continue
        counts[(kind, cca, load)][1] += 1
        if feasible_only:
            fixed = [e for e in fixed if e.feasible]
            if not mine.feasible:
                continue
        counts[(kind, cca, load)][0] += all(mine.objective > e.objective for e in fixed)
    return {key: (won, total) for key, (won, total) in counts.items()}


def paired_gap(
    episodes: Sequence[BufferEpisode], key: Key, arm: str = "p4bs"
) -> tuple[float, float]:
    """``arm``'s f̄ less the best feasible fixed arm's, per seed: the mean and its
    standard error over the seeds (NaN without two seeds to pair)."""
    gaps = []
    for (kind, cca, load, _), arms in _seeds(episodes).items():
        if (kind, cca, load) != key or arm not in arms:
            continue
        fixed = [e.objective for n, e in arms.items() if n in FIXED_ARMS and e.feasible]
        if fixed:
            gaps.append(arms[arm].objective - max(fixed))
    if len(gaps) < 2:
        return math.nan, math.nan
    return statistics.fmean(gaps), statistics.stdev(gaps) / math.sqrt(len(gaps))


def _of(episodes: Sequence[BufferEpisode], key: Key, arm: str, field: str) -> float:
    return finite_mean(
        [getattr(e, field) for e in episodes if (e.episode, e.cca, e.load, e.arm) == (*key, arm)]
    )


def _feasible(episodes: Sequence[BufferEpisode], key: Key, arm: str) -> str:
    chosen = [e for e in episodes if (e.episode, e.cca, e.load, e.arm) == (*key, arm)]
    judged = [e for e in chosen if e.feasible is not None]
    return f"{sum(bool(e.feasible) for e in judged)}/{len(judged)}" if judged else "–"


def markdown(episodes: Sequence[BufferEpisode], command: str) -> str:
    """The whole report."""
    capacity = episodes[0].capacity_bps if episodes else 1e9
    keys = sorted({(e.episode, e.cca, e.load) for e in episodes})
    arms = [a for a in ARMS if any(e.arm == a for e in episodes)]
    seeds = sorted({e.seed for e in episodes})
    kinds = sorted({e.episode for e in episodes})
    lines = [
        "# Buffer sizing on the twin: P4BS against fixed buffers, the rate loop on",
        "",
        f"`{command}`: {capacity / 1e9:g} Gb/s, a DTN at R* = {0.6 * capacity / 1e9:g} Gb/s "
        f"(8 streams, 100 ms; episodes: {', '.join(kinds)}), N long campus flows (Cubic, "
        f"10 ms), seeds {seeds[0]}–{seeds[-1]} ({len(seeds)}). The rate loop is `pi` (with "
        "the DTN host's cap for a BBR DTN). `transfer`: a "
        f"{10 * capacity / 1e9:g} GB transfer; `steady`: 600 s of DTN traffic, the campus at "
        "N, 2N from 200 s, N/2 from 400 s. After a 20 s warm-up, every arm is judged the same "
        "way from the twin's ground truth: **f̄** = the mean of −[0.5·p/0.05 + 0.5·d/200 ms] "
        "(P4BS eq. 2) with p BR1's own loss (its dropped bytes over the bytes that reached "
        "it) and d its mean queuing delay; higher is better; P4BS's search included. "
        "**Feasible** (ours): in a transfer, the DTN's MRAE within +0.5 points of the same "
        "seed's 100 ms arm and its FCT within 2 % of it; in a steady episode, the DTN at "
        "≥ 0.95 of its target in every 10 s window. `p4bs` runs the product's defaults "
        "(`spec.buffer` with a sim actuator: the loss it reads is the queue's own drop "
        "counter).",
        "",
        "## f̄ per arm (mean over seeds; feasible seeds in brackets)",
        "",
        "| episode | DTN | N | " + " | ".join(arms) + " |",
        "|---|---|---:|" + "---:|" * len(arms),
    ]
    for key in keys:
        row = [_of(episodes, key, a, "objective") for a in arms]
        best = max((v for v in row if math.isfinite(v)), default=math.nan)
        cells = [
            (f"**{v:.3f}**" if v == best else f"{v:.3f}") + f" ({_feasible(episodes, key, a)})"
            for v, a in zip(row, arms, strict=True)
        ]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    lines += _targets(episodes, keys)
    lines += _signals(episodes, keys)
    lines += _cost(episodes, keys)
    lines += [
        "",
        "## Every arm (means over seeds)",
        "",
        "| episode | DTN | N | arm | f̄ | search's f̄ | BR1 loss | path loss | BR1 QD (ms) | "
        "campus QD (ms) | DTN MRAE | FCT (s) | lowest 10 s DTN / R* | buffer (ms) | feasible |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        for arm in arms:
            if not any((e.episode, e.cca, e.load, e.arm) == (*key, arm) for e in episodes):
                continue

            def of(field: str, arm: str = arm, key: Key = key) -> float:
                return _of(episodes, key, arm, field)

            lines.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {arm} | {of('objective'):.3f} | "
                f"{of('search_objective'):.3f} | {of('loss'):.3%} | {of('path_loss'):.3%} | "
                f"{of('mean_qd_ms'):.1f} | {of('campus_qd_ms'):.1f} | {of('dtn_mrae'):.2%} | "
                f"{of('fct_s'):.1f} | {of('min_window_ratio'):.3f} | {of('buffer_ms'):.1f} | "
                f"{_feasible(episodes, key, arm)} |"
            )
    return "\n".join(lines) + "\n"


def _targets(episodes: Sequence[BufferEpisode], keys: Sequence[Key]) -> list[str]:
    if not any(e.arm == "p4bs" for e in episodes):
        return []
    ours = p4bs_best(episodes)
    paper = p4bs_best(episodes, feasible_only=False)
    lines = [
        "",
        "## Targets",
        "",
        "Ours: P4BS feasible and above every feasible fixed arm on f̄ on ≥ 8/10 seeds (Cubic); "
        "for a BBR DTN, P4BS within the paired seed-to-seed noise of the best feasible fixed "
        "arm (its mean gap no lower than −2 standard errors). The paper's criterion (fig. 11): "
        "above every fixed arm, feasible or not. Campus queuing delay ≤ 30 ms at N ≤ 100 with "
        "the DTN's MRAE at most +0.5 points over the 100 ms buffer's.",
        "",
        "| episode | DTN | N | P4BS best among the feasible (ours) | P4BS best of all (the "
        "paper's) | gap to the best feasible fixed arm | campus QD, P4BS | DTN MRAE, P4BS − "
        "100 ms | P4BS feasible |",
        "|---|---|---:|---|---|---|---|---|---:|",
    ]
    for key in keys:
        won, total = ours.get(key, (0, 0))
        paper_won, paper_total = paper.get(key, (0, 0))
        gap, error = paired_gap(episodes, key)
        if key[1] == "bbr":
            within = math.isfinite(gap) and gap >= -2 * error
            best = f"{won}/{total} (BBR: judged by the gap)"
            gap_cell = f"{gap:+.3f} ± {error:.3f} — {_verdict(within)}"
        else:
            best = f"{won}/{total} — {_verdict(total > 0 and won >= BEST_SEEDS * total)}"
            gap_cell = f"{gap:+.3f} ± {error:.3f}"
        qd = _of(episodes, key, "p4bs", "campus_qd_ms")
        rise = _of(episodes, key, "p4bs", "dtn_mrae") - _of(episodes, key, "100ms", "dtn_mrae")
        qd_cell = f"{qd:.1f} ms" + (
            f" — {_verdict(qd <= CAMPUS_QD_MS)}" if key[2] <= QD_LOADS else ""
        )
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {best} | {paper_won}/{paper_total} | {gap_cell} "
            f"| {qd_cell} | {rise * 100:+.2f} pts — {_verdict(rise <= MRAE_POINTS)} | "
            f"{_feasible(episodes, key, 'p4bs')} |"
        )
    return lines


def _signals(episodes: Sequence[BufferEpisode], keys: Sequence[Key]) -> list[str]:
    searched = [a for a in SEARCH_ARMS if any(e.arm == a for e in episodes)]
    if len(searched) < 2:
        return []
    lines = [
        "",
        "## The loss signal (what chose `lossSignal`'s default)",
        "",
        "The same search reading the queue's own drop counter (`p4bs`, `actuator`), the tap's "
        "retransmissions (`p4bs-path`, method 1: the campus shaper's drops too) and method 2 "
        "(`p4bs-bottleneck`). f̄ as judged (ground truth), the search's own f̄ on its signal, "
        "and the seeds it was feasible on.",
        "",
        "| episode | DTN | N | "
        + " | ".join(f"{a}: f̄ / search's / feasible" for a in searched)
        + " |",
        "|---|---|---:|" + "---|" * len(searched),
    ]
    for key in keys:
        cells = [
            f"{_of(episodes, key, a, 'objective'):.3f} / "
            f"{_of(episodes, key, a, 'search_objective'):.3f} / {_feasible(episodes, key, a)}"
            for a in searched
        ]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    return lines


def _cost(episodes: Sequence[BufferEpisode], keys: Sequence[Key]) -> list[str]:
    if not any(e.arm == "p4bs" for e in episodes):
        return []
    lines = [
        "",
        "## The search's cost (P4BS)",
        "",
        "The share of the judged samples spent in trials (EXPAND and SEARCH), f̄ over those "
        "samples and over the rest (the buffer held), searches per episode, and the mean "
        "buffer in force. Target: ≤ 20 % of a steady episode in trials.",
        "",
        "| episode | DTN | N | in trials | f̄ in trials | f̄ held | searches | buffer (ms) |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for key in keys:
        share = _of(episodes, key, "p4bs", "trial_share")
        verdict = f" — {_verdict(share <= TRIAL_SHARE)}" if key[0] == "steady" else ""
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {share:.0%}{verdict} | "
            f"{_of(episodes, key, 'p4bs', 'trial_objective'):.3f} | "
            f"{_of(episodes, key, 'p4bs', 'held_objective'):.3f} | "
            f"{_of(episodes, key, 'p4bs', 'searches'):.1f} | "
            f"{_of(episodes, key, 'p4bs', 'buffer_ms'):.1f} |"
        )
    return lines


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"
