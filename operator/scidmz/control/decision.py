"""What one sample led to: the type the loop produces and the exporter renders.

It stands apart from both so that the exporter depends on the decision, not on the loop
(the loop imports the exporter to publish its snapshots).
"""

from __future__ import annotations

from dataclasses import dataclass

from scidmz.control.antiwindup import FilterOutput


@dataclass(frozen=True)
class Decision:
    """What one sample led to (exported on /state and as metrics)."""

    sequence: int
    u_bps: float
    u_hat_bps: float
    error_bps: float
    output: FilterOutput | None
    dt_s: float
    """The time since the previous decision on the injected clock (the integral's dt)."""
    dtn_cap_bps: float | None = None
    """The first DTN cap decided (None: none)."""
    dtn_output: FilterOutput | None = None
    """The first DTN cap's filter terms (None: not stepped)."""
    dtn_caps: tuple[tuple[str, float], ...] = ()
    """Every cap decided, by DTN host."""

    @property
    def campus_starved_for_dtn(self) -> bool:
        """The campus loop could do no more for the DTN: its filter held u up (it asked for
        less, ``FilterOutput.held_up``) and no DTN cap holds the DTNs' rates instead. With
        caps the campus rate is pinned near B − Σ caps by design and held up every sample,
        which says nothing of the DTNs."""
        return bool(self.output and self.output.held_up and not self.dtn_caps)
