"""Which parts of a changed runtime config a running controller can take without a restart.

R*(t) is meant to move (the paper's tracking experiment changes it every 20 s; a
transfer scheduler may change it per transfer). A restart to take a new target costs the
filter's state, the two samples of history the inverse model needs, the learned base RTTs
and link goodput, and a spell at the fail-safe rate. So the setpoint, the gains, the
limits and the fail-safe settings are taken live, and so is the DTN's congestion control (a
tenant's field: the process loads the other inverse model); what the controller is built
around (strategy, sample time, collector, actuators, desired-state mode) needs a restart,
and a reload that changes it says so and leaves it as it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from scidmz.api.runtime import RuntimeConfig
from scidmz.control.loop import ControllerSettings
from scidmz.control.settings import controller_settings

LIVE_FIELDS = frozenset(
    {
        "setpoint",
        "gains",
        "limits",
        "stale_after_s",
        "failsafe_rate_bps",
        "dtn",
        "pinned_after_s",
        "policies",
    }
)
"""ControllerSettings fields a running controller takes from a reloaded config."""


@dataclass(frozen=True)
class LiveUpdate:
    settings: ControllerSettings
    """The running settings with every live field taken from the new config."""
    applied: tuple[str, ...]
    """Live fields that changed, now in ``settings``."""
    needs_restart: tuple[str, ...]
    """Fields that changed but are kept as they run (a restart applies them)."""


def live_update(
    running: ControllerSettings, wanted: ControllerSettings, other_changes: tuple[str, ...] = ()
) -> LiveUpdate:
    """Take ``wanted``'s live fields into ``running``; ``other_changes`` names changed parts
    of the runtime config outside ControllerSettings (actuators, model), which always need
    a restart. A DTN filter that appears or disappears needs a restart too: it comes with
    an actuator."""
    applied: list[str] = []
    restart = list(other_changes)
    taken: dict[str, object] = {}
    for field in fields(ControllerSettings):
        old, new = getattr(running, field.name), getattr(wanted, field.name)
        if old == new:
            continue
        if field.name == "dtn" and (old is None) != (new is None):
            restart.append(field.name)
        elif field.name in LIVE_FIELDS:
            applied.append(field.name)
            taken[field.name] = new
        else:
            restart.append(field.name)
    return LiveUpdate(replace(running, **taken), tuple(applied), tuple(restart))  # type: ignore[arg-type]


def _wiring(config: RuntimeConfig) -> tuple[object, ...]:
    """What the process opened at start-up from ``config``: the actuators (without the
    DTN filter's gains, fail-safe rate and floor, which ``controller_settings`` carries).
    The model, chosen by the DTN's congestion control, is swapped live (``model_change``)."""
    a = config.actuator
    dtn = (
        None
        if a.dtn is None
        else a.dtn.model_dump(exclude={"gains", "failsafe_rate_bps", "min_rate_bps", "held"})
    )
    return a.model_dump(exclude={"dtn"}), dtn


def model_change(running_config: RuntimeConfig, wanted_config: RuntimeConfig) -> bool:
    """Whether a reload needs the other congestion control's inverse model (mlc only)."""
    return (
        wanted_config.controller.strategy == "mlc"
        and running_config.dtn_congestion_control != wanted_config.dtn_congestion_control
    )


def plan_reload(
    running_config: RuntimeConfig, running: ControllerSettings, wanted_config: RuntimeConfig
) -> LiveUpdate:
    """``live_update`` for a reloaded runtime config; raises ``ConfigError`` (naming the
    field) for gains or limits a filter refuses, as at start-up."""
    other: tuple[str, ...] = ()
    if _wiring(running_config) != _wiring(wanted_config):
        other = ("actuator or model",)
    return live_update(running, controller_settings(wanted_config), other)
