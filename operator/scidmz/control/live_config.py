"""Which parts of a changed runtime config a running controller can take without a restart.

R*(t) is meant to move (the paper's tracking experiment changes it every 20 s; a
transfer scheduler may change it per transfer). A restart to take a new target costs the
filter's state, the two samples of history the inverse model needs, the learned base RTTs
and link goodput, and a spell at the fail-safe rate. So the setpoint, the gains, the
limits and the fail-safe settings are taken live, and so is the DTN's congestion control (a
tenant's field: the process loads the other inverse model), and the strategy between
``mlc`` and ``pi`` (a policy admitted with another congestion control makes a mix, on which
``mlc`` runs as ``pi``); what the controller is built around (a strategy change to or
from ``trivial``, sample time, collector, actuators, desired-state mode) needs a restart,
and a reload that changes it says so and leaves it as it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from scidmz.api.runtime import CAP_LIVE_FIELDS, RATE_LOOP_STRATEGIES, RuntimeConfig
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
        "more_dtns",
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
    new_caps: frozenset[str] = frozenset()
    """DTN hosts whose cap actuator is to be opened (capped anew, or re-wired)."""


def live_update(
    running: ControllerSettings, wanted: ControllerSettings, other_changes: tuple[str, ...] = ()
) -> LiveUpdate:
    """Take ``wanted``'s live fields into ``running``; ``other_changes`` names changed parts
    of the runtime config outside ControllerSettings (actuators, model), which always need
    a restart. DTN caps come and go live (a policy admitted or removed): the caller opens
    the actuators of ``new_caps``."""
    applied: list[str] = []
    restart = list(other_changes)
    taken: dict[str, object] = {}
    for field in fields(ControllerSettings):
        old, new = getattr(running, field.name), getattr(wanted, field.name)
        if old == new:
            continue
        if field.name in LIVE_FIELDS or (
            field.name == "strategy" and {old, new} <= RATE_LOOP_STRATEGIES
        ):
            applied.append(field.name)
            taken[field.name] = new
        else:
            restart.append(field.name)
    before = {c.host for c in running.dtns}
    new_caps = frozenset(c.host for c in wanted.dtns if c.host not in before)
    return LiveUpdate(
        replace(running, **taken),  # type: ignore[arg-type]
        tuple(applied),
        tuple(restart),
        new_caps,
    )


def _wiring(config: RuntimeConfig) -> object:
    """What the process opened at start-up from ``config``: the campus actuator. The DTN
    caps' actuators are opened and closed live (``cap_wiring``); the model, chosen by the
    DTN's congestion control, is swapped live (``model_change``)."""
    return config.actuator.model_dump(exclude={"dtn", "more_dtns"})


def cap_wiring(config: RuntimeConfig) -> dict[str, object]:
    """Each DTN cap's actuator wiring, by host."""
    return {c.host: c.model_dump(exclude=set(CAP_LIVE_FIELDS)) for c in config.actuator.dtns}


def model_change(running_config: RuntimeConfig, wanted_config: RuntimeConfig) -> bool:
    """Whether a reload needs an inverse model it has not loaded (mlc only): the other
    congestion control's, or any after running as ``pi``."""
    return wanted_config.controller.strategy == "mlc" and (
        running_config.controller.strategy != "mlc"
        or running_config.dtn_congestion_control != wanted_config.dtn_congestion_control
    )


def plan_reload(
    running_config: RuntimeConfig, running: ControllerSettings, wanted_config: RuntimeConfig
) -> LiveUpdate:
    """``live_update`` for a reloaded runtime config; raises ``ConfigError`` (naming the
    field) for gains or limits a filter refuses, as at start-up."""
    other: tuple[str, ...] = ()
    if _wiring(running_config) != _wiring(wanted_config):
        other = ("actuator or model",)
    update = live_update(running, controller_settings(wanted_config), other)
    was, now = cap_wiring(running_config), cap_wiring(wanted_config)
    rewired = {host for host, wiring in now.items() if host in was and was[host] != wiring}
    return replace(update, new_caps=update.new_caps | rewired)
