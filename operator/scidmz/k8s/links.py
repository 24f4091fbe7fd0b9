"""Reconcile one BorderLink: admit its policies, run its loop, keep both statuses current.

One pass, a function of what the operator's indexes hold (the link, the policies that name
it, the namespaces' labels) and of the link's Deployments:

1. decide every attached policy (``scidmz.api.admission``) and write the decisions into
   the policies' status, with an Event for each decision that changed;
2. render the loop for the admitted policies (config, certificates, workloads, Services,
   NetworkPolicies) in the operator's namespace, and apply it all-or-nothing;
3. write the link's status: its conditions, the admitted policies, its host ports, and an
   Event when its rate plan changed.

Side effects go through :class:`scidmz.k8s.client.KubeClient`; the objects come from the
pure builders in :mod:`scidmz.k8s.manifests`, the conditions from :mod:`scidmz.k8s.status`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from scidmz.api import admission
from scidmz.api.admission import Decision, PolicyView
from scidmz.api.errors import describe_validation_error
from scidmz.api.holds import DEFAULT_GRACE_S, held_dtn_hosts
from scidmz.api.link import (
    KIND as LINK_KIND,
)
from scidmz.api.link import (
    AdmittedPolicy,
    BorderLinkSpec,
    DtnHost,
    HeldDtnHost,
    HostPortAllocation,
    PoliciesStatus,
    ShaperRestore,
    parse_link_spec,
    tls_secret_problem,
)
from scidmz.api.model_card import CardError, card_problems, parse_card
from scidmz.api.policy import KIND as POLICY_KIND
from scidmz.api.policy import AdmissionStatus, parse_spec
from scidmz.api.runtime import Admitted, ChannelSecurity, RuntimeConfig, resolve_runtime_config
from scidmz.api.types import GROUP
from scidmz.api.units import format_rate, parse_rate
from scidmz.auth import identity
from scidmz.k8s.certificates import (
    METRICS_READER_SECRET,
    AuthorityKeeper,
    CertificateCache,
    Wanted,
    metrics_reader_wanted,
    secret_object,
)
from scidmz.k8s.client import API, KubeApiError, KubeClient
from scidmz.k8s.events import EventRecorder, reference
from scidmz.k8s.host_ports import NoFreeHostPort, allocate_host_ports
from scidmz.k8s.manifests import (
    COLLECTOR,
    COLLECTOR_LIVE_ANNOTATION,
    COMPONENT_LABEL,
    CONTROLLER,
    DTN_SHAPER,
    IDENTITY_MOUNT,
    LINK_LABEL,
    LIVE_CONFIG_ANNOTATION,
    LinkRef,
    LinkWorkloads,
    WorkloadSettings,
    build_children,
    build_identity_secret,
    build_shaper_restore_job,
    child_name,
    collector_address,
    dtn_shaper_address,
    dtn_shaper_workload,
    host_port,
    identity_secret_name,
    instance_label,
    is_dtn_shaper,
    restore_job_name,
    selector_labels,
    server_names,
    shaper_restore_of,
    tc_caps,
)
from scidmz.k8s.status import (
    Outcome,
    WorkloadState,
    compute_conditions,
    conditions_equal,
    deployment_state,
    policy_conditions,
    with_dtn_shaper,
)
from scidmz.k8s.tap import (
    TAP,
    build_tap_deployment,
    build_tap_service,
    tap_address,
    tap_pod_problem,
    with_tap,
)

log = logging.getLogger(__name__)


PLACE_MEMORY_S = 60.0
"""How long a place this process decided stands in for the index's (which shows it within
a second or two of the status write)."""


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PolicySummary:
    """What the operator keeps of a policy in its index (enough to decide and to skip
    unchanged writes without reading it again)."""

    namespace: str
    name: str
    uid: str
    created: str
    generation: int
    link: str
    spec: Mapping[str, Any]
    conditions: tuple[Mapping[str, Any], ...] = ()
    live: Mapping[str, Any] = field(default_factory=dict)
    """status.state and status.tracking as last written."""
    admission: Mapping[str, Any] | None = None
    """status.admission as last written (the policy's place)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def place(self) -> AdmissionStatus | None:
        """The place recorded in status. A policy admitted by an operator that kept no
        places (Accepted=True for its current generation, no status.admission) keeps its
        place from when it was accepted, so an upgrade evicts nobody."""
        if self.admission is not None:
            try:
                return AdmissionStatus.model_validate(self.admission)
            except ValidationError:
                return None
        accepted = next((c for c in self.conditions if c.get("type") == "Accepted"), None)
        target, host = self.spec.get("targetRate"), self.spec.get("dtnHost")
        if (
            accepted is None
            or accepted.get("status") != "True"
            or accepted.get("observedGeneration") != self.generation
            or not isinstance(target, str)
            or not isinstance(host, str)
        ):
            return None
        since = admission.normalised_time(str(accepted.get("lastTransitionTime", "")))
        return AdmissionStatus(link=self.link, dtn_host=host, queued_at=since,
                               admitted_at=since, admitted_target=target)  # fmt: skip

    def view(self, place: AdmissionStatus | None = None) -> PolicyView:
        """What admission reads of it; ``place`` (what this process last wrote) stands in
        for the recorded one, which the index may not show yet."""
        place = place if place is not None else self.place
        try:
            spec = parse_spec(dict(self.spec))
        except ValidationError as error:
            return PolicyView(
                self.namespace, self.name, self.created, None,
                describe_validation_error(error, "spec."), place,
            )  # fmt: skip
        return PolicyView(self.namespace, self.name, self.created, spec, place=place)

    def body(self) -> dict[str, Any]:
        """Enough of the object for an Event about it."""
        return {
            "apiVersion": API,
            "kind": POLICY_KIND,
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
        }


def summarize_policy(body: Mapping[str, Any]) -> PolicySummary:
    meta, spec = body["metadata"], body.get("spec") or {}
    status = body.get("status") or {}
    return PolicySummary(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid", ""),
        created=meta.get("creationTimestamp", ""),
        generation=int(meta.get("generation", 1)),
        link=str((spec.get("linkRef") or {}).get("name", "")),
        spec=dict(spec),
        conditions=tuple(dict(c) for c in status.get("conditions") or []),
        live={k: status[k] for k in ("state", "tracking") if k in status},
        admission=dict(status["admission"]) if isinstance(status.get("admission"), dict) else None,
    )


@dataclass(frozen=True)
class LinkSummary:
    """What the operator keeps of a link in its index."""

    name: str
    uid: str
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    deleting: bool = False

    @property
    def host_ports(self) -> list[HostPortAllocation]:
        return [HostPortAllocation.model_validate(a) for a in self.status.get("hostPorts") or []]

    def body(self) -> dict[str, Any]:
        return {
            "apiVersion": API,
            "kind": LINK_KIND,
            "metadata": {"name": self.name, "uid": self.uid},
        }

    def ready(self) -> tuple[bool, str, str] | None:
        for condition in self.status.get("conditions") or []:
            if condition.get("type") == "Ready":
                return (
                    condition.get("status") == "True",
                    str(condition.get("reason", "")),
                    str(condition.get("message", "")),
                )
        return None


def summarize_link(body: Mapping[str, Any]) -> LinkSummary:
    meta = body["metadata"]
    return LinkSummary(
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 1)),
        spec=dict(body.get("spec") or {}),
        status=dict(body.get("status") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
    )


class LinkRefused(Exception):
    """The link passed the API schema but its loop cannot run (yet): nothing is applied."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class ReconcilerState:
    """What one operator process remembers between passes (never the truth: a restart
    recomputes it all from the API)."""

    identities: dict[str, str] = field(default_factory=dict)
    """Per link, the hash of the certificate Secrets last applied (a change nudges pods)."""
    applied: dict[str, str] = field(default_factory=dict)
    """The hash of the objects last applied per link: an unchanged set is not re-sent."""
    certificates: CertificateCache = field(default_factory=CertificateCache)
    host_ports: dict[str, list[HostPortAllocation]] = field(default_factory=dict)
    """Each link's host ports as this process allocated them: links reconcile in parallel,
    and one's allocation must count for the next before it reaches its status."""
    ports_lock: threading.Lock = field(default_factory=threading.Lock)
    places: dict[str, dict[str, tuple[AdmissionStatus | None, float]]] = field(default_factory=dict)
    """Per link, the place this process last decided for each policy (by UID) and when:
    the index shows a status write a moment after it, and a pass in between must not take
    a policy it just admitted for a newcomer. Trusted for ``PLACE_MEMORY_S``."""
    restores: dict[str, dict[str, ShaperRestore]] = field(default_factory=dict)
    """Per link and DTN host, a removed shaper's interface still to be restored
    (``prune``)."""
    plans: dict[str, tuple[PoliciesStatus, list[HeldDtnHost]]] = field(default_factory=dict)
    """Per link, the rate plan and holds this process last applied (the link's status
    shows them a moment later)."""
    clock: Callable[[], float] = time.monotonic

    def last_plan(self, link: LinkSummary) -> tuple[PoliciesStatus, list[HeldDtnHost]]:
        """The plan and holds the loop last ran: this process's, else the link's status."""
        if link.name in self.plans:
            return self.plans[link.name]
        try:
            plan = PoliciesStatus.model_validate(link.status.get("policies") or {})
            holds = [HeldDtnHost.model_validate(h) for h in link.status.get("heldDtnHosts") or []]
        except ValidationError:
            return PoliciesStatus(), []
        return plan, holds

    def remembered(self, link: str, uid: str) -> AdmissionStatus | None:
        entry = self.places.get(link, {}).get(uid)
        if entry is None or self.clock() - entry[1] > PLACE_MEMORY_S:
            return None
        return entry[0]

    def remember(self, link: str, places: Mapping[str, AdmissionStatus | None]) -> None:
        now = self.clock()
        self.places[link] = {uid: (place, now) for uid, place in places.items()}


@dataclass(frozen=True)
class Context:
    client: KubeClient
    settings: WorkloadSettings
    authority: AuthorityKeeper
    events: EventRecorder
    host_port_base: int = 9500
    host_port_pairs: int = 250
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    dtn_shaper_grace_s: float = DEFAULT_GRACE_S


# ---- 1. admission ---------------------------------------------------------------------


def decide(
    link_name: str,
    link: LinkSummary | None,
    policies: Sequence[PolicySummary],
    namespace_labels: Mapping[str, Mapping[str, str]],
    now: str = "",
    places: Mapping[str, AdmissionStatus] | None = None,
) -> tuple[BorderLinkSpec | None, dict[tuple[str, str], Decision], str | None]:
    """The parsed link (None: absent or unusable), every policy's decision, and why the
    link is unusable (None: it is fine or absent). ``places``: by policy UID, the places
    this process decided last (newer than the index's)."""
    places = places or {}
    views = [p.view(places.get(p.uid)) for p in policies]
    if link is None or link.deleting:
        return None, admission.admit(link_name, None, views, namespace_labels), None
    try:
        spec = parse_link_spec(dict(link.spec))
    except ValidationError as error:
        problem = describe_validation_error(error, "spec.")
        refusal = Decision(
            False,
            "LinkInvalid",
            f"spec.linkRef.name: BorderLink {link_name} cannot be used: {problem}",
        )
        return None, {v.key: refusal for v in views}, problem
    return spec, admission.admit(link_name, spec, views, namespace_labels, now, link.uid), None


def write_policy_statuses(
    client: KubeClient,
    events: EventRecorder,
    policies: Sequence[PolicySummary],
    decisions: Mapping[tuple[str, str], Decision],
    link_ready: tuple[bool, str, str] | None,
    now: str,
) -> int:
    """Each policy's conditions, written only where they changed, with an Event when its
    admission decision (Accepted's status or reason) changed. Returns the writes made."""
    written = 0
    for policy in policies:
        decision = decisions[policy.key]
        previous = [dict(c) for c in policy.conditions]
        conditions = policy_conditions(
            previous,
            policy.generation,
            decision.accepted,
            decision.reason,
            decision.message,
            decision.refs_resolved,
            link_ready if decision.accepted else None,
            now,
        )
        place = (
            decision.place.model_dump(by_alias=True, exclude_none=True)
            if decision.place is not None
            else None
        )
        place_changed = (dict(policy.admission) if policy.admission else None) != place
        if conditions_equal(previous, conditions) and not place_changed:
            continue
        patch: dict[str, Any] = {"conditions": conditions, "observedGeneration": policy.generation}
        if place_changed:
            patch["admission"] = place  # None clears it (a merge patch)
        try:
            client.patch_policy_status(policy.namespace, policy.name, None, patch)
        except KubeApiError as error:
            if error.is_not_found:
                continue  # deleted meanwhile
            raise
        written += 1
        before = next((c for c in previous if c.get("type") == "Accepted"), None)
        if before is None or (before.get("status"), before.get("reason")) != (
            "True" if decision.accepted else "False",
            decision.reason,
        ):
            events.emit(
                reference(policy.body()),
                "Normal" if decision.accepted else "Warning",
                decision.reason,
                decision.message,
                "Admit",
            )
    return written


def link_event_reference(link: str, namespace: str) -> dict[str, str]:
    """What a link's Events regard: its ConfigMap in the operator's namespace (the API
    server keeps Events about a cluster-scoped object in ``default``, where tenants read
    them; see :mod:`scidmz.k8s.events`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": child_name(link, "config"),
            "namespace": namespace}  # fmt: skip


def link_event(
    events: EventRecorder, link: LinkSummary, namespace: str, kind: str, reason: str,
    message: str, action: str = "Reconcile",
) -> None:  # fmt: skip
    """An Event about a link, for its administrators."""
    events.emit(
        link_event_reference(link.name, namespace), kind, reason, message, action,
        related=reference(link.body()),
    )  # fmt: skip


# ---- 2. the loop's objects -------------------------------------------------------------


def check_model(client: KubeClient, namespace: str, spec: BorderLinkSpec) -> str | None:
    """A custom inverse model's ConfigMap must hold the model and a card that covers the
    link; returns the model's sha256 (None: the image's model). Raises ``LinkRefused``."""
    ref = spec.controller.model_ref
    if ref is None:
        return None
    config_map = client.get("v1", "ConfigMap", namespace, ref.config_map_name)
    where = f"ConfigMap {namespace}/{ref.config_map_name}"
    if config_map is None:
        raise LinkRefused(
            "ModelConfigMapNotFound", f"spec.controller.modelRef: {where} does not exist"
        )
    model = (config_map.get("binaryData") or {}).get(ref.model_key)
    card_text = (config_map.get("data") or {}).get(ref.card_key)
    missing = [
        *([f"{ref.model_key} (binaryData)"] if model is None else []),
        *([f"{ref.card_key} (data)"] if card_text is None else []),
    ]
    if model is None or card_text is None:
        raise LinkRefused("ModelConfigMapKeyMissing", f"{where} has no {' and no '.join(missing)}")
    try:
        problems = card_problems(parse_card(card_text), spec)
    except CardError as error:
        raise LinkRefused("ModelCardInvalid", f"{where} {ref.card_key}: {error}") from None
    if problems:
        raise LinkRefused(
            "ModelCardMismatch",
            f"{where}: the model's card does not cover this link: {'; '.join(problems)}",
        )
    return hashlib.sha256(base64.b64decode(model)).hexdigest()


def check_references(client: KubeClient, namespace: str, spec: BorderLinkSpec) -> str | None:
    """The switch's TLS Secret and pipeline ConfigMap, in the operator's namespace, must
    exist with the keys they need, a software tap's node, and a custom model with a card
    that covers the link. Returns the custom model's digest. Raises ``LinkRefused``."""
    digest = check_model(client, namespace, spec)
    tap = spec.switch.tap
    if tap is not None and client.get("v1", "Node", None, tap.node_name) is None:
        raise LinkRefused(
            "TapNodeNotFound",
            f"spec.switch.tap.nodeName: node {tap.node_name} does not exist; nothing of the "
            "loop is created until it does",
        )
    pipeline = spec.switch.pipeline
    if pipeline is not None:
        ref = pipeline.config_map_ref
        config_map = client.get("v1", "ConfigMap", namespace, ref.name)
        if config_map is None:
            raise LinkRefused(
                "PipelineConfigMapNotFound",
                f"spec.switch.pipeline.configMapRef: ConfigMap {namespace}/{ref.name} "
                "does not exist",
            )
        keys = set(config_map.get("data") or {}) | set(config_map.get("binaryData") or {})
        missing = [k for k in (ref.p4info_key, ref.device_config_key) if k not in keys]
        if missing:
            raise LinkRefused(
                "PipelineConfigMapKeyMissing",
                f"ConfigMap {namespace}/{ref.name} has no key(s) {', '.join(missing)}",
            )
    tls = spec.switch.tls
    if tls is None:
        return digest
    secret = client.get("v1", "Secret", namespace, tls.secret_name)
    if secret is None:
        raise LinkRefused(
            "TlsSecretNotFound",
            f"spec.switch.tls.secretName: Secret {namespace}/{tls.secret_name} does not exist",
        )
    problem = tls_secret_problem(set(secret.get("data") or {}))
    if problem:
        raise LinkRefused("TlsSecretKeyMissing", f"Secret {namespace}/{tls.secret_name}: {problem}")
    return digest


def admitted_of(
    policies: Sequence[PolicySummary], decisions: Mapping[tuple[str, str], Decision]
) -> list[Admitted]:
    """The admitted policies in the order they were admitted, each at the target its
    place holds (a raise that does not fit yet keeps the earlier one)."""
    out = []
    for view in admission.admitted([p.view() for p in policies], decisions):
        assert view.spec is not None
        held = decisions[view.key].target or view.spec.target_rate
        out.append(
            Admitted(view.namespace, view.name, view.spec.model_copy(update={"target_rate": held}))
        )
    return out


def shaper_hosts(
    spec: BorderLinkSpec, admitted: Sequence[Admitted], held: Sequence[HeldDtnHost]
) -> list[DtnHost]:
    """The DTN hosts with a tc shaper the loop runs an agent for: the admitted ones', and
    a held one (``api.holds``)."""
    names = [p.spec.dtn_host for p in admitted] + [h.host for h in held]
    hosts = [spec.dtn_host(name) for name in names]
    return [
        h
        for h in hosts
        if h is not None and h.shaper is not None and h.shaper.type == "tc" and h.shaper.tc
    ]


def tc_workloads(
    spec: BorderLinkSpec, admitted: Sequence[Admitted], held: Sequence[HeldDtnHost] = ()
) -> list[tuple[str, str]]:
    """The link's host-network workloads and their nodes: a software tap, a tc
    controller, and the DTN shaper of an admitted or held host with a tc shaper."""
    wanted = []
    if spec.switch.tap is not None:
        wanted.append((TAP, spec.switch.tap.node_name))
    if spec.actuator.type == "tc" and spec.actuator.tc is not None:
        wanted.append((CONTROLLER, spec.actuator.tc.node_name))
    for host in shaper_hosts(spec, admitted, held):
        assert host.shaper is not None and host.shaper.tc is not None
        wanted.append((dtn_shaper_workload(host.name), host.shaper.tc.node_name))
    return wanted


def wanted_certificates(
    link: str, config: RuntimeConfig, settings: WorkloadSettings
) -> dict[str, Wanted]:
    """The certificate each of the loop's workloads needs, by component; every identity
    names this incarnation of the link (its UID)."""
    uid = config.link_uid
    wanted = {
        COLLECTOR: Wanted(
            identity_secret_name(link, COLLECTOR),
            identity.link_identity(link, identity.COLLECTOR, uid=uid),
            tuple(server_names(link, COLLECTOR, settings)),
        ),
        CONTROLLER: Wanted(
            identity_secret_name(link, CONTROLLER),
            identity.link_identity(link, identity.CONTROLLER, uid=uid),
            tuple(server_names(link, CONTROLLER, settings)),
        ),
    }
    if config.switch.tap_server_name:
        wanted[TAP] = Wanted(
            identity_secret_name(link, TAP),
            identity.link_identity(link, TAP, uid=uid),
            tuple(server_names(link, TAP, settings)),
        )
    for dtn in tc_caps(config):
        component = dtn_shaper_workload(dtn.host)
        wanted[component] = Wanted(
            identity_secret_name(link, component),
            identity.link_identity(link, identity.DTN_SHAPER, dtn.host, uid=uid),
            tuple(server_names(link, component, settings)),
        )
    return wanted


@dataclass(frozen=True)
class Rendered:
    config: RuntimeConfig
    objects: list[dict[str, Any]]
    host_ports: list[HostPortAllocation]
    reissued: list[str]


def render(
    ctx: Context,
    state: ReconcilerState,
    link: LinkSummary,
    spec: BorderLinkSpec,
    admitted: Sequence[Admitted],
    others_ports: Sequence[HostPortAllocation],
    held: Sequence[HeldDtnHost] = (),
    tap_only: bool = False,
    model_digest: str | None = None,
) -> Rendered:
    """Every object of the link's loop, certificates included; ``tap_only``: only what
    its software tap needs (until the tap first runs, nothing else is created). Raises
    ``LinkRefused``."""
    settings = ctx.settings
    with state.ports_lock:
        taken = [
            *others_ports,
            *(a for other, held in state.host_ports.items() if other != link.name for a in held),
        ]
        try:
            ports = allocate_host_ports(
                tc_workloads(spec, admitted, held),
                state.host_ports.get(link.name) or link.host_ports,
                taken,
                ctx.host_port_base,
                ctx.host_port_pairs,
            )
        except NoFreeHostPort as error:
            raise LinkRefused("NoFreeHostPort", str(error)) from None
        state.host_ports[link.name] = ports
    work = LinkWorkloads(
        paused=spec.paused,
        tolerations=tuple(spec.actuator.tc.tolerations) if spec.actuator.tc else (),
        host_ports=tuple(ports),
    )
    shapers: dict[str, tuple[str, str]] = {}
    tolerations = []
    for host in shaper_hosts(spec, admitted, held):
        assert host.shaper is not None and host.shaper.tc is not None
        tolerations.append((host.name, tuple(host.shaper.tc.tolerations)))
        component = dtn_shaper_workload(host.name)
        http = host_port(work, component)
        if http is not None:
            shapers[host.name] = (
                dtn_shaper_address(link.name, settings, http + 1, host.name),
                server_names(link.name, component, settings)[1],
            )
    work = replace(work, dtn_tolerations=tuple(tolerations))
    security = ChannelSecurity(
        identity_dir=IDENTITY_MOUNT,
        collector_server_name=server_names(link.name, COLLECTOR, settings)[1],
    )
    tap_port = host_port(work, TAP)
    tap = None
    if spec.switch.tap is not None and tap_port is not None:
        tap_name = server_names(link.name, TAP, settings)[1]
        tap = (tap_address(link.name, settings, tap_port), tap_name)
    config = resolve_runtime_config(
        link.name,
        link.generation,
        spec,
        admitted,
        collector_address(link.name, settings),
        shapers,
        security,
        held,
        link.uid,
        tap,
        model_digest,
    )
    ref = LinkRef(link.name, link.uid)
    wanted = wanted_certificates(link.name, config, settings)
    if tap_only:
        wanted = {TAP: wanted[TAP]}
    authorities = ctx.authority.current()
    pairs, reissued = state.certificates.certificates(
        ctx.client, settings.namespace, authorities, list(wanted.values()), ctx.now()
    )
    secrets = [
        build_identity_secret(
            ref,
            component,
            settings,
            authorities.bundle(),
            pairs[want.secret].cert_pem,
            pairs[want.secret].key_pem,
        )
        for component, want in wanted.items()
    ]
    taps = []
    if tap_port is not None:
        taps = [
            build_tap_service(ref, settings, tap_port),
            build_tap_deployment(ref, spec, settings, work),
        ]
    children = build_children(ref, config, settings, work)
    if tap_only:  # the ServiceAccount and the ConfigMap (apply_loop reads it), then the tap
        children = [o for o in children if o["kind"] in ("ServiceAccount", "ConfigMap")]
    objects = [*secrets, *children[:2], *taps, *children[2:]]
    return Rendered(config, objects, ports, reissued)


def objects_hash(objects: Sequence[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


def apply_all_or_nothing(client: KubeClient, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dry-run every object first, so a rejected object leaves no partial set behind.
    Returns the objects as the server stored them, in order."""
    for obj in objects:
        client.apply(obj, dry_run=True)
    return [client.apply(obj) for obj in objects]


OPTIONAL = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "Secret"),
)
"""Kinds of the children that exist only while a host has a tc shaper (one set per host)."""


def _component(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, ""))


def shaper_children(
    client: KubeClient,
    link: str,
    namespace: str,
    kinds: Sequence[tuple[str, str]] = OPTIONAL,
) -> list[tuple[str, str, dict[str, Any]]]:
    """The link's DTN shaper objects of ``kinds`` that exist now: (api version, kind,
    object), found by their component label (``dtn-shaper-<host>``), and the single
    shaper's objects an older operator named ``<link>-dtn-shaper``."""
    found = []
    for api_version, kind in kinds:
        for item in client.list_objects(
            api_version, kind, namespace, {LINK_LABEL: instance_label(link)}
        ):
            component = _component(item)
            if is_dtn_shaper(component) or component == DTN_SHAPER:
                found.append((api_version, kind, item))
    return found


def prune(client: KubeClient, state: ReconcilerState, link: str, namespace: str,
          objects: Sequence[dict[str, Any]]) -> None:  # fmt: skip
    """Delete the DTN shaper objects this pass no longer renders: each shaper Deployment
    found (one list call), with its Service and certificate Secret; and a software tap
    the link no longer has. A shaper removed for
    good leaves its interface to be restored (``state.restores``, then the link's
    status): its Deployment says which node, interface and host."""
    wanted = {(o["kind"], o["metadata"]["name"]) for o in objects}
    deployments = [("apps/v1", "Deployment")]
    for _, _, found in shaper_children(client, link, namespace, deployments):
        name = found["metadata"]["name"]
        if ("Deployment", name) in wanted:
            continue
        restore = shaper_restore_of(found)
        if restore is not None:
            state.restores.setdefault(link, {})[restore.host] = restore
        component = _component(found)
        for api_version, kind, child in (
            ("apps/v1", "Deployment", name),
            ("v1", "Service", name),
            ("v1", "Secret", identity_secret_name(link, component)),
        ):
            if client.delete_if_present(api_version, kind, namespace, child) and kind == "Secret":
                state.certificates.forget(namespace, child)
    tap = child_name(link, TAP)
    if ("Deployment", tap) not in wanted and client.get("apps/v1", "Deployment", namespace, tap):
        for api_version, kind, child in tap_objects(link):  # the link left its tap
            if client.delete_if_present(api_version, kind, namespace, child) and kind == "Secret":
                state.certificates.forget(namespace, child)


def progress_restore(
    ctx: Context, link: LinkSummary, restore: ShaperRestore, shaper_rendered: bool
) -> ShaperRestore | None:
    """One step of giving a removed shaper's interface back its original root qdisc: wait
    for the shaper's pods to be gone (on the way out each leaves its fail-safe cap), run
    ``scidmz shaper --restore`` on its node (a Job), and report how it ended. Returns the
    restore while it is still under way. A shaper rendered again meanwhile cancels it
    (the node's record of the original stays for that shaper's own removal)."""
    client, namespace = ctx.client, ctx.settings.namespace
    job_name = restore_job_name(link.name, restore.host)
    if shaper_rendered:
        client.delete_if_present("batch/v1", "Job", namespace, job_name)
        return None
    shaper = dtn_shaper_workload(restore.host) if restore.host else DTN_SHAPER
    if client.list_names("v1", "Pod", namespace, selector_labels(link.name, shaper)):
        return restore
    job = client.get("batch/v1", "Job", namespace, job_name)
    if job is None:
        ref = LinkRef(link.name, link.uid)
        client.apply(build_shaper_restore_job(ref, restore, ctx.settings))
        log.info("%s: restoring %s on %s (Job %s)", link.name, restore.interface,
                 restore.node, job_name)  # fmt: skip
        return restore
    status = job.get("status") or {}
    failed = any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not status.get("succeeded") and not failed:
        return restore
    client.delete_if_present("batch/v1", "Job", namespace, job_name)
    if failed:
        link_event(
            ctx.events, link, namespace, "Warning", "ShaperNotRestored",
            f"the original root qdisc of {restore.interface} on node {restore.node} was not "
            f"restored (Job {job_name} failed; its pod's log says why): the shaper's last "
            "cap stays there",
        )  # fmt: skip
    else:
        link_event(
            ctx.events, link, namespace, "Normal", "ShaperRestored",
            f"{restore.interface} on node {restore.node} has its original root qdisc again",
        )  # fmt: skip
    return None


ALL_COMPONENTS = (COLLECTOR, CONTROLLER)
IDENTITY_ANNOTATION = f"{GROUP}/identity-hash"
"""On a running pod: the hash of its link's certificates the operator last nudged it for
(its kubelet then refreshes the mounted Secret at once)."""
LIVE_COMPONENTS = (CONTROLLER,)
"""Workloads that follow their mounted ConfigMap live: the controller (R*, gains, limits,
fail-safe settings), and each DTN shaper agent (its fail-safe cap and bounds:
``shaper_components``); the collector too, nudged only when its DTN classes change
(``COLLECTOR_LIVE_ANNOTATION``)."""


def shaper_components(objects: Sequence[dict[str, Any]]) -> list[str]:
    """The DTN shaper agents among the rendered ``objects`` (their components)."""
    return [
        _component(o) for o in objects if o["kind"] == "Deployment" and is_dtn_shaper(_component(o))
    ]


def nudge_live_pods(
    client: KubeClient,
    link: str,
    namespace: str,
    live_hash: str,
    annotation_key: str = LIVE_CONFIG_ANNOTATION,
    components: Sequence[str] = LIVE_COMPONENTS,
) -> list[str]:
    """Annotate the link's running ``components`` pods (the controller and DTN shaper,
    which follow their config) with the new config's hash. They take a new target rate
    (and the other live settings) from their mounted ConfigMap, and a renewed certificate
    or CA bundle from their mounted Secret, without a restart, but the kubelet refreshes
    those files only when it syncs the pod: at its periodic sync (1 min by default) or at
    once when the pod's metadata changes, which this write does. Returns the pods
    annotated; a pod gone in between is skipped. The nudge only hastens what the kubelet
    does anyway, so it never fails the reconcile: an error is logged and the pods get the
    new file at the kubelet's next sync."""
    annotation = {annotation_key: live_hash}
    nudged = []
    try:
        for component in components:
            for pod in client.list_names("v1", "Pod", namespace, selector_labels(link, component)):
                try:
                    client.annotate("v1", "Pod", namespace, pod, annotation)
                except KubeApiError as error:
                    if not error.is_not_found:
                        raise
                    continue
                nudged.append(pod)
    except KubeApiError as error:
        log.warning(
            "%s: pods not nudged (%s); they take the new config at the kubelet's next sync "
            "(up to a minute)", link, error,
        )  # fmt: skip
    return nudged


def _version(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def apply_loop(ctx: Context, state: ReconcilerState, link: str, rendered: Rendered) -> bool:
    """Apply the rendered objects unless the same set was applied last; prune what is no
    longer rendered; nudge the live pods when the config changed. True when applied."""
    digest = objects_hash(rendered.objects)
    if state.applied.get(link) == digest:
        return False
    namespace = ctx.settings.namespace
    config_map = next(o for o in rendered.objects if o["kind"] == "ConfigMap")
    stored = ctx.client.get("v1", "ConfigMap", namespace, config_map["metadata"]["name"])
    applied = apply_all_or_nothing(ctx.client, rendered.objects)
    prune(ctx.client, state, link, namespace, rendered.objects)
    stored_after = applied[rendered.objects.index(config_map)]
    shapers = shaper_components(rendered.objects)
    if stored is not None and _version(stored) != _version(stored_after):
        annotations = config_map["metadata"]["annotations"]
        live_hash = annotations[LIVE_CONFIG_ANNOTATION]
        # the collector follows its DTN classes live: nudged only when they changed
        classes_changed = (stored["metadata"].get("annotations") or {}).get(
            COLLECTOR_LIVE_ANNOTATION
        ) != annotations[COLLECTOR_LIVE_ANNOTATION]
        followers = [*LIVE_COMPONENTS, *([COLLECTOR] if classes_changed else []), *shapers]
        nudged = nudge_live_pods(ctx.client, link, namespace, live_hash, components=followers)
        log.info("%s: new config %s, pods nudged: %s", link, live_hash, ", ".join(nudged) or "none")
    identities = objects_hash([o for o in rendered.objects if o["kind"] == "Secret"])[:16]
    if state.identities.get(link, identities) != identities:
        components = [*ALL_COMPONENTS, *shapers]
        nudged = nudge_live_pods(
            ctx.client, link, namespace, identities, IDENTITY_ANNOTATION, components
        )
        log.info("%s: new certificates, pods nudged: %s", link, ", ".join(nudged) or "none")
    state.identities[link] = identities
    state.applied[link] = digest
    return True


# ---- 3. the link's status --------------------------------------------------------------


def workload_states(
    client: KubeClient,
    link: str,
    namespace: str,
    paused: bool,
    shapers: Sequence[str] = (),
    tap: bool = False,
) -> tuple[Any, Any]:
    """The collector's (with its software tap's, ``tap``) and the controller's (with its
    DTN shapers') readiness; ``shapers``: the DTN hosts whose shaper agent the loop runs."""
    collector = client.get("apps/v1", "Deployment", namespace, child_name(link, COLLECTOR))
    controller = client.get("apps/v1", "Deployment", namespace, child_name(link, CONTROLLER))
    state = deployment_state(controller, paused)
    for host in shapers:
        name = child_name(link, dtn_shaper_workload(host))
        shaper = client.get("apps/v1", "Deployment", namespace, name)
        state = with_dtn_shaper(state, deployment_state(shaper, paused))
    collecting = deployment_state(collector, paused)
    if tap:
        collecting = with_tap(collecting, tap_state(client, link, namespace, paused))
    return collecting, state


def tap_state(client: KubeClient, link: str, namespace: str, paused: bool) -> WorkloadState:
    """The software tap's readiness; when not ready, why its pod does not run (its
    capture's refusal, a taint) in place of the Deployment's counts."""
    deployment = client.get("apps/v1", "Deployment", namespace, child_name(link, TAP))
    state = deployment_state(deployment, paused)
    if state.ready or deployment is None or paused:
        return state
    pods = client.list_objects("v1", "Pod", namespace, selector_labels(link, TAP))
    problem = tap_pod_problem(pods)
    return WorkloadState(False, *problem) if problem else state


def policies_status(
    policies: Sequence[PolicySummary],
    decisions: Mapping[tuple[str, str], Decision],
) -> PoliciesStatus:
    by_key = {p.key: p for p in policies}
    admitted = [by_key[v.key] for v in admission.admitted([p.view() for p in policies], decisions)]

    def held(policy: PolicySummary) -> str:
        return decisions[policy.key].target or str(policy.spec.get("targetRate", "0bps"))

    total = sum(parse_rate(held(p)) for p in admitted)
    return PoliciesStatus(
        attached=len(policies),
        admitted=len(admitted),
        admitted_target=format_rate(total),
        items=[
            AdmittedPolicy(
                namespace=p.namespace,
                name=p.name,
                dtn_host=str(p.spec.get("dtnHost", "")),
                target_rate=held(p),
            )
            for p in admitted
        ],
    )


def plan_text(status: PoliciesStatus) -> str:
    items = ", ".join(
        f"{p.namespace}/{p.name} {p.target_rate} on {p.dtn_host}" for p in status.items
    )
    return f"{status.admitted_target} admitted ({items or 'none'})"


def write_link_status(
    client: KubeClient,
    events: EventRecorder,
    namespace: str,
    link: LinkSummary,
    outcome: Outcome,
    states: tuple[Any, Any],
    paused: bool,
    policies: PoliciesStatus,
    host_ports: Sequence[HostPortAllocation],
    warning: tuple[str, str] | None,
    now: str,
    held: Sequence[HeldDtnHost] = (),
    restores: Sequence[ShaperRestore] = (),
) -> bool:
    """The link's conditions, policies and host ports, written only when they changed;
    an Event when the rate plan (the admitted policies) changed. True when written."""
    status = link.status
    previous = [dict(c) for c in status.get("conditions") or []]
    conditions = compute_conditions(
        previous, link.generation, outcome, states[0], states[1], paused, now, warning
    )
    patch: dict[str, Any] = {}
    if not conditions_equal(previous, conditions):
        patch["conditions"] = conditions
    policies_json = policies.model_dump(by_alias=True)
    if status.get("policies") != policies_json:
        patch["policies"] = policies_json
    ports_json = [a.model_dump(by_alias=True) for a in host_ports]
    if (status.get("hostPorts") or []) != ports_json:
        patch["hostPorts"] = ports_json
    held_json = [h.model_dump(by_alias=True) for h in held]
    if (status.get("heldDtnHosts") or []) != held_json:
        patch["heldDtnHosts"] = held_json
    restores_json = [r.model_dump(by_alias=True, exclude_none=True) for r in restores]
    if (status.get("pendingRestores") or []) != restores_json:
        patch["pendingRestores"] = restores_json
    if status.get("pendingRestore") is not None:
        patch["pendingRestore"] = None  # an older operator's: now in pendingRestores
    if outcome.ok and status.get("observedGeneration") != outcome.generation:
        patch["observedGeneration"] = outcome.generation
    if not patch:
        return False
    try:
        client.patch_link_status(link.name, patch)
    except KubeApiError as error:
        if error.is_not_found:
            return False
        raise
    before = status.get("policies")
    if "policies" in patch and (before or {}).get("items") != policies_json["items"]:
        old = PoliciesStatus.model_validate(before) if before else PoliciesStatus()
        link_event(
            events, link, namespace, "Normal", "RatePlanChanged",
            f"{plan_text(policies)}; was {plan_text(old)}",
        )  # fmt: skip
    return True


def pending_restores_of(link: LinkSummary) -> dict[str, ShaperRestore]:
    """The restores the link's status says are under way (an earlier process's), by DTN
    host; an older operator's single ``pendingRestore`` among them."""
    found = [*(link.status.get("pendingRestores") or [])]
    if link.status.get("pendingRestore"):
        found.append(link.status["pendingRestore"])
    restores = {}
    for item in found:
        try:
            restore = ShaperRestore.model_validate(item)
        except ValidationError:
            continue
        restores[restore.host] = restore
    return restores


def restores_in_progress(
    ctx: Context, state: ReconcilerState, link: LinkSummary, rendered_shapers: Collection[str]
) -> dict[str, ShaperRestore]:
    """One step of each pending restore (``progress_restore``); those still under way.
    ``rendered_shapers``: the DTN hosts whose shaper this pass renders again."""
    # this process's record once it has one (the status shows it a pass later)
    known = link.name in state.restores
    pending = state.restores[link.name] if known else pending_restores_of(link)
    left = {}
    for host, restore in pending.items():
        kept = progress_restore(ctx, link, restore, host in rendered_shapers)
        if kept is not None:
            left[host] = kept
    state.restores[link.name] = left
    return left


def failsafe_held(status: Mapping[str, Any]) -> str | None:
    """Why the link's controller holds its fail-safe rate, from the last ``status.state``
    the operator read (None: it controls)."""
    state = status.get("state") or {}
    if not state.get("failsafeActive"):
        return None
    held = state.get("campusRateLimit")
    rate = f" (u(t) = {held})" if held else ""
    return (
        f"the controller holds the fail-safe rate{rate}: its samples are stale or "
        "implausible; its log and the collector's say why"
    )


def buffer_stopped(status: Mapping[str, Any]) -> str | None:
    """Why the link's buffer search is stopped for want of its loss signal, from the last
    ``status.buffer`` the operator read (None: it runs, or there is none)."""
    buffer = status.get("buffer") or {}
    if not buffer.get("degraded"):
        return None
    return str(buffer.get("message") or "the buffer search's loss signal is not measured")


# ---- the pass --------------------------------------------------------------------------


@dataclass(frozen=True)
class PassResult:
    """What one pass did (for logs, tests and the daemon's next wait)."""

    ready: bool
    applied: bool
    policy_writes: int
    link_written: bool


def tap_has_run(client: KubeClient, link: str, namespace: str) -> bool:
    """Whether the rest of a tap link's loop may be created: its tap has been available,
    or the rest is there already (a tap that stops later never takes it down)."""
    if client.get("apps/v1", "Deployment", namespace, child_name(link, COLLECTOR)) is not None:
        return True
    tap = client.get("apps/v1", "Deployment", namespace, child_name(link, TAP))
    return deployment_state(tap, False).ready


def renew_metrics_reader(ctx: Context, state: ReconcilerState) -> bool:
    """Prometheus's client certificate (``scidmz-metrics-reader``), issued or renewed as
    the workloads' are and applied when it or the CA bundle changed. True when applied."""
    namespace = ctx.settings.namespace
    authorities = ctx.authority.current()
    wanted = metrics_reader_wanted()
    pairs, reissued = state.certificates.certificates(
        ctx.client, namespace, authorities, [wanted], ctx.now()
    )
    obj = secret_object(METRICS_READER_SECRET, namespace, authorities, pairs[wanted.secret])
    digest = objects_hash([obj])
    with state.ports_lock:  # passes run in parallel; one of them applies it
        if state.applied.get(METRICS_READER_SECRET) == digest:
            return False
        ctx.client.apply(obj)
        state.applied[METRICS_READER_SECRET] = digest
    for line in reissued:
        log.info("certificate issued (%s)", line)
    return True


def reconcile_link(
    ctx: Context,
    state: ReconcilerState,
    link: LinkSummary,
    policies: Sequence[PolicySummary],
    namespace_labels: Mapping[str, Mapping[str, str]],
    others_ports: Sequence[HostPortAllocation],
) -> PassResult:
    """One pass over a link (see the module's docstring). Raises ``KubeApiError`` for the
    caller to retry; a link its loop cannot run for is reported in status, not raised."""
    now = utc_now()
    renew_metrics_reader(ctx, state)
    remembered = {p.uid: place for p in policies if (place := state.remembered(link.name, p.uid))}
    spec, decisions, problem = decide(
        link.name, link, policies, namespace_labels, admission.place_time(ctx.now()), remembered
    )
    state.remember(link.name, {p.uid: decisions[p.key].place for p in policies})
    admitted = admitted_of(policies, decisions) if spec is not None else []
    namespace = ctx.settings.namespace
    applied = False
    host_ports = link.host_ports
    warning = None
    failsafe = failsafe_held(link.status)  # from the last /state the operator read
    plan = policies_status(policies, decisions)
    last_plan, last_holds = state.last_plan(link)
    held = last_holds
    shapers: list[str] = []
    if spec is not None:
        admitted_hosts = [a.spec.dtn_host for a in admitted]
        held = held_dtn_hosts(
            spec, last_holds, last_plan.items, admitted_hosts, ctx.now(), ctx.dtn_shaper_grace_s
        )
        shapers = [h.name for h in shaper_hosts(spec, admitted, held)]
    if spec is None:
        outcome = Outcome(
            False, "InvalidSpec", problem or "the spec does not parse", link.generation
        )
    else:
        if spec.switch.plaintext:
            warning = (
                "PlaintextSwitch",
                "spec.switch.plaintext is true: P4Runtime runs without TLS (lab use only)",
            )
        stopped = buffer_stopped(link.status)
        if stopped is not None:
            warning = ("BufferLossSignal", stopped)
        if failsafe is not None:
            warning = ("FailSafe", failsafe)
        try:
            model_digest = check_references(ctx.client, namespace, spec)
            tap_only = spec.switch.tap is not None and not tap_has_run(
                ctx.client, link.name, namespace
            )
            rendered = render(
                ctx, state, link, spec, admitted, others_ports, held, tap_only, model_digest
            )
            applied = apply_loop(ctx, state, link.name, rendered)
            state.plans[link.name] = (plan, list(held))
            restores_in_progress(ctx, state, link, shapers)
            host_ports = rendered.host_ports
            for line in rendered.reissued:
                log.info("%s: certificate issued (%s)", link.name, line)
            outcome = Outcome(
                True, "Applied", f"{len(rendered.objects)} objects applied", link.generation
            )
        except LinkRefused as refusal:
            outcome = Outcome(False, refusal.reason, refusal.message, link.generation)
            state.applied.pop(link.name, None)
            if link.status.get("conditions") is None or not any(
                c.get("reason") == refusal.reason for c in link.status.get("conditions") or []
            ):
                link_event(ctx.events, link, namespace, "Warning", refusal.reason, refusal.message)
        except KubeApiError as error:
            if error.is_transient or error.is_conflict or error.is_not_found:
                raise
            # rejected by the API server (admission, a quota): visible, retried later
            state.applied.pop(link.name, None)
            outcome = Outcome(False, "ApplyRejected", str(error), link.generation)
    paused = bool(spec.paused) if spec is not None else False
    tapped = spec is not None and spec.switch.tap is not None
    states = workload_states(ctx.client, link.name, namespace, paused, shapers, tapped)
    link_written = write_link_status(
        ctx.client, ctx.events, namespace, link, outcome, states, paused,
        plan, host_ports, warning, now, held, list(state.restores.get(link.name, {}).values()),
    )  # fmt: skip
    ready = outcome.ok and states[0].ready and states[1].ready and not paused
    if paused:
        link_ready: tuple[bool, str, str] = (False, "Paused", "the link's spec.paused is true")
    elif not outcome.ok:
        link_ready = (False, outcome.reason, outcome.message)
    elif not ready:
        link_ready = (False, "LoopNotReady", "; ".join(
            s.message for s in states if not s.ready
        ))  # fmt: skip
    elif failsafe is not None:
        link_ready = (False, "FailSafe", failsafe)
    else:
        link_ready = (True, "Ready", "")
    writes = write_policy_statuses(ctx.client, ctx.events, policies, decisions, link_ready, now)
    ctx.events.flush()
    return PassResult(ready, applied, writes, link_written)


def refuse_orphans(
    client: KubeClient,
    events: EventRecorder,
    link_name: str,
    policies: Sequence[PolicySummary],
) -> int:
    """Policies naming a link that does not exist: LinkNotFound (the link's deletion, or
    a policy written before its link)."""
    _, decisions, _ = decide(link_name, None, policies, {})
    return write_policy_statuses(client, events, policies, decisions, None, utc_now())


def restore_on_teardown(
    ctx: Context, state: ReconcilerState, link: LinkSummary, waited_s: float, limit_s: float
) -> bool:
    """A deleted link's DTN shapers: removed, and their interfaces given back their
    original root qdisc before the rest goes. True when done (or given up after
    ``limit_s``, with a Warning Event per interface); False: call again."""
    namespace = ctx.settings.namespace
    prune(ctx.client, state, link.name, namespace, [])
    left = restores_in_progress(ctx, state, link, ())
    if not left:
        state.restores.pop(link.name, None)
        return True
    if waited_s < limit_s:
        return False
    for restore in left.values():
        link_event(
            ctx.events, link, namespace, "Warning", "ShaperNotRestored",
            f"the original root qdisc of {restore.interface} on node {restore.node} was not "
            f"restored within {limit_s:.0f} s of the link's deletion: removing the loop "
            "regardless",
            action="Delete",
        )  # fmt: skip
    return True


def teardown_order(link: str) -> list[tuple[str, str, str]]:
    """What deleting a link removes, in order, once its controller has stopped (its
    fail-safe first, through the shapers that must still be there) and its DTN shapers
    are gone (``remove_loop``): an older operator's restore Job, then the rest."""
    return [
        ("batch/v1", "Job", restore_job_name(link)),
        ("apps/v1", "Deployment", child_name(link, COLLECTOR)),
        ("v1", "Service", child_name(link, COLLECTOR)),
        ("v1", "Service", child_name(link, CONTROLLER)),
        ("networking.k8s.io/v1", "NetworkPolicy", child_name(link, COLLECTOR)),
        ("networking.k8s.io/v1", "NetworkPolicy", child_name(link, CONTROLLER)),
        ("v1", "ConfigMap", child_name(link, "config")),
        ("v1", "Secret", identity_secret_name(link, COLLECTOR)),
        ("v1", "Secret", identity_secret_name(link, CONTROLLER)),
        *tap_objects(link),
        ("v1", "ServiceAccount", child_name(link, "scidmz")),
    ]


def tap_objects(link: str) -> list[tuple[str, str, str]]:
    """A software tap's objects (after the collector, its one client)."""
    return [
        ("apps/v1", "Deployment", child_name(link, TAP)),
        ("v1", "Service", child_name(link, TAP)),
        ("v1", "Secret", identity_secret_name(link, TAP)),
    ]


def controller_stopped(client: KubeClient, link: str, namespace: str) -> bool:
    """Delete the link's controller (its pod restores the fail-safe rates as it stops)
    and say whether its pods are all gone."""
    client.delete_if_present("apps/v1", "Deployment", namespace, child_name(link, CONTROLLER))
    return not client.list_names("v1", "Pod", namespace, selector_labels(link, CONTROLLER))


def remove_loop(client: KubeClient, state: ReconcilerState, link: str, namespace: str) -> None:
    shapers = [
        (api_version, kind, obj["metadata"]["name"])
        for api_version, kind, obj in shaper_children(client, link, namespace)
    ]
    for api_version, kind, name in [*shapers, *teardown_order(link)]:
        client.delete_if_present(api_version, kind, namespace, name)
        if kind == "Secret":
            state.certificates.forget(namespace, name)
    state.applied.pop(link, None)
    state.plans.pop(link, None)
    state.places.pop(link, None)
    state.restores.pop(link, None)
    with state.ports_lock:
        state.host_ports.pop(link, None)
