"""Which DTN hosts keep their shaper after their policy went, and at what cap.

A DTN host's ``scidmz shaper`` is a privileged pod on that host's node. Were it created when
a policy is admitted and deleted when it goes, a tenant who creates and deletes a policy
(or whose namespace an administrator relabels back and forth) would create and delete a
privileged workload each time. So when the last admitted policy on a host with a tc shaper
goes, the host is *held* for the operator's grace period: its shaper stays, at the
administrators' fail-safe cap for the host (its ``shaper.failsafeRate``, or, with
``target``, the target last admitted there, never a refused policy's); a policy admitted
there again within the grace takes it back without a new pod. After the grace the shaper is
removed and the host's interface restored.

Each DTN host is held on its own: a policy admitted on another host does not end it, one
admitted on the same host does. A pure function of the link, the last plan and holds (the
link's status) and the clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from scidmz.api.admission import normalised_time, place_time
from scidmz.api.link import AdmittedPolicy, BorderLinkSpec, HeldDtnHost

DEFAULT_GRACE_S = 600.0
"""How long a DTN host's shaper is kept after its last policy went (the operator's
``dtnShaperGraceSeconds``)."""


def _tc_shaper(link: BorderLinkSpec, host: str) -> bool:
    found = link.dtn_host(host)
    return found is not None and found.shaper is not None and found.shaper.type == "tc"


def _parsed(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(normalised_time(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def held_dtn_hosts(
    link: BorderLinkSpec,
    previous: Sequence[HeldDtnHost],
    last_plan: Sequence[AdmittedPolicy],
    admitted_hosts: Sequence[str],
    now: dt.datetime,
    grace_s: float = DEFAULT_GRACE_S,
) -> list[HeldDtnHost]:
    """The hosts held after this pass, oldest hold first."""
    if grace_s <= 0:
        return []
    busy = set(admitted_hosts)
    held: dict[str, HeldDtnHost] = {}
    for hold in previous:
        since = _parsed(hold.since)
        if since is None or hold.host in busy or not _tc_shaper(link, hold.host):
            continue
        if (now - since).total_seconds() < grace_s:
            held[hold.host] = hold
    for item in last_plan:
        if item.dtn_host in held or item.dtn_host in busy or not _tc_shaper(link, item.dtn_host):
            continue
        host = link.dtn_host(item.dtn_host)
        assert host is not None and host.shaper is not None
        rate = host.shaper.failsafe_rate
        held[item.dtn_host] = HeldDtnHost(
            host=item.dtn_host,
            since=place_time(now),
            failsafe_rate=item.target_rate if rate == "target" else rate,
        )
    return sorted(held.values(), key=lambda h: (normalised_time(h.since), h.host))
