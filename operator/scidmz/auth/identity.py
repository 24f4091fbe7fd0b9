"""Workload identities, and who each endpoint lets in.

An identity is a URI in the SPIFFE form (``spiffe://scidmz.io/link/<link>/<uid>/<component>``,
``<uid>`` the BorderLink's metadata.uid, so a link deleted and created again under the
same name accepts none of the old one's keys): every certificate the operator issues
carries exactly one, and a server authorises a peer by it, not by its address. The rules
(one place, so docs and tests read the same table):

| endpoint | lets in |
|---|---|
| a link's collector sample stream (gRPC) | that link's controller |
| a link's DTN shaper agents (gRPC) | that link's controller |
| /metrics and /state of any workload | the operator, metrics readers (Prometheus) |
| /healthz and /readyz | anyone (probes; they say only ready or not and why) |
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TRUST_DOMAIN = "scidmz.io"
_PREFIX = f"spiffe://{TRUST_DOMAIN}/"

OPERATOR = f"{_PREFIX}operator"
METRICS_READER = f"{_PREFIX}metrics-reader"
OBSERVERS = frozenset({OPERATOR, METRICS_READER})
"""Who may read a workload's /metrics and /state."""

WORKLOAD_SERVER_NAME = "workload.scidmz.invalid"
"""A host name every workload's certificate carries besides its Service's: Prometheus
checks it (one name for every target; its tls_config cannot vary per target). Clients of
the loop's own channels check the Service's name. ``.invalid`` never resolves."""

COLLECTOR = "collector"
CONTROLLER = "controller"
DTN_SHAPER = "dtn-shaper"


def link_identity(link: str, component: str, host: str | None = None, uid: str = "") -> str:
    """``spiffe://scidmz.io/link/<link>[/<uid>]/<component>[/<host>]`` (no ``<uid>``: a
    loop run without a cluster, the lab's and the tests')."""
    tail = f"/{host}" if host is not None else ""
    incarnation = f"/{uid}" if uid else ""
    return f"{_PREFIX}link/{link}{incarnation}/{component}{tail}"


@dataclass(frozen=True)
class PeerPolicy:
    """The identities an endpoint accepts; an empty set accepts nobody."""

    allowed: frozenset[str]

    def admits(self, identities: Iterable[str]) -> bool:
        """True when a presented identity is allowed (a certificate carries exactly one;
        one with several is refused rather than matched on any)."""
        presented = tuple(identities)
        return len(presented) == 1 and presented[0] in self.allowed

    def describe(self) -> str:
        return ", ".join(sorted(self.allowed)) or "nobody"


def controller_only(link: str, uid: str = "") -> PeerPolicy:
    """A link's collector stream and DTN shapers: only that link's controller (of this
    incarnation of the link, ``uid``)."""
    return PeerPolicy(frozenset({link_identity(link, CONTROLLER, uid=uid)}))


OBSERVER_POLICY = PeerPolicy(OBSERVERS)
