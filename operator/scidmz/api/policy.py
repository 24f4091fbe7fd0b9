"""The DTNTransferPolicy custom resource (group scidmz.io, version v1alpha1).

These pydantic models are the API's single source: ``crds/`` is generated from them
(:mod:`scidmz.api.crd`), the operator parses live objects with them, and every
``description`` here is what ``kubectl explain dtp.spec...`` prints. Cross-field rules
live in ``x-kubernetes-validations`` (CEL) so the API server rejects bad input before
the operator sees it; the same rules are re-checked here for objects read from files.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from scidmz.api.units import (
    DURATION_PATTERN,
    RATE_MAX_LENGTH,
    RATE_PATTERN,
    cel_rate_bps,
    parse_duration,
    parse_rate,
)

GROUP = "scidmz.io"
VERSION = "v1alpha1"
KIND = "DTNTransferPolicy"
PLURAL = "dtntransferpolicies"
SINGULAR = "dtntransferpolicy"
SHORT_NAMES = ["dtp"]

MIN_SAMPLE_TIME_S = 0.1
MAX_SAMPLE_TIME_S = 60.0

CongestionControl = Literal["cubic", "bbr"]
Strategy = Literal["mlc", "pi", "trivial"]
ActuatorType = Literal["tc", "sim", "dryRun"]


def _cidr(text: str) -> str:
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as error:
        raise ValueError(f"invalid CIDR prefix {text!r}: {error}") from None
    if "/" not in text:
        raise ValueError(f"invalid CIDR prefix {text!r}: a prefix length is required")
    return text


PREFIX_OVERLAP_MESSAGE = (
    "dtn.receiverPrefix and campus.remotePrefix overlap: the remote prefix must not equal or "
    "lie inside the DTN-r prefix (the DTN-r prefix may lie inside the remote prefix; the "
    "longer prefix wins)"
)


def prefixes_conflict(dtn_prefix: str, campus_prefix: str) -> bool:
    """Overlapping class prefixes that longest-prefix match cannot separate: equal ones, or
    a remote (campus) prefix inside the DTN-r prefix. A DTN-r host inside the remote network
    is the normal case: its longer prefix wins."""
    dtn, campus = ipaddress.ip_network(dtn_prefix), ipaddress.ip_network(campus_prefix)
    return dtn.version == campus.version and campus.subnet_of(dtn)  # type: ignore[arg-type]


_HOST_PORT_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$"


def _host_port(text: str) -> str:
    if re.match(_HOST_PORT_PATTERN, text) is None:
        raise ValueError(
            f"invalid switch address {text!r}: expected host:port, with IPv6 in brackets"
        )
    host, _, port = text.rpartition(":")
    if not 0 < int(port) <= 65535:
        raise ValueError(f"invalid switch address {text!r}: port must be 1-65535")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(f"invalid switch address {text!r}: bad IPv6 literal") from None
    return text


def _sample_time(text: str) -> str:
    seconds = parse_duration(text)
    if not MIN_SAMPLE_TIME_S <= seconds <= MAX_SAMPLE_TIME_S:
        raise ValueError(f"sampleTime {text!r} must be between 100ms and 60s")
    return text


Rate = Annotated[
    str,
    Field(
        pattern=RATE_PATTERN,
        max_length=RATE_MAX_LENGTH,
    ),
]
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=RATE_MAX_LENGTH)]
CidrPrefix = Annotated[
    str,
    Field(
        max_length=64,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "isCIDR(self)",
                    "message": "must be an IPv4 or IPv6 CIDR prefix, e.g. "
                    "203.0.113.10/32 or 2001:db8::/64",
                },
                {
                    "rule": "!isCIDR(self) || cidr(self) == cidr(self).masked()",
                    "message": "has host bits set: give the network address, e.g. "
                    "203.0.113.0/24 rather than 203.0.113.7/24",
                },
            ]
        },
    ),
    AfterValidator(_cidr),
]
HostPort = Annotated[
    str,
    Field(
        pattern=_HOST_PORT_PATTERN,
        max_length=255,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "int(self.substring(self.lastIndexOf(':') + 1)) <= 65535 && "
                    "int(self.substring(self.lastIndexOf(':') + 1)) > 0",
                    "message": "port must be between 1 and 65535",
                },
                {
                    "rule": "!self.startsWith('[') || "
                    "(isIP(self.substring(1, self.lastIndexOf(']'))) && "
                    "ip(self.substring(1, self.lastIndexOf(']'))).family() == 6)",
                    "message": "the bracketed host must be an IPv6 address, "
                    "e.g. [2001:db8::1]:9559",
                },
            ]
        },
    ),
    AfterValidator(_host_port),
]
Port = Annotated[int, Field(ge=0, le=511)]


class ApiModel(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected, immutable once parsed."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class DtnSpec(ApiModel):
    """The Science DMZ side: the DTN transfers whose rate is being protected."""

    receiver_prefix: CidrPrefix = Field(
        description="Destination prefix of the receiving DTN (DTN-r), matched by longest "
        "prefix on the tapped traffic; packets to it are the DTN class (paper algorithm 2).",
    )
    congestion_control: CongestionControl = Field(
        default="cubic",
        description="Congestion control of the sending DTN. Selects the inverse model and "
        "the default gains (tuned per CCA, models/<cca>/gains.yaml). One of: cubic, bbr.",
    )


class CampusSpec(ApiModel):
    """The general-purpose campus traffic that shares the bottleneck with the DTN."""

    remote_prefix: CidrPrefix = Field(
        description="Destination prefix of the remote network; packets to it that are not "
        "DTN traffic are the campus class (paper algorithm 2). May contain the DTN prefix.",
    )


class SwitchPorts(ApiModel):
    """Switch ports of the passive taps (see p4/README.md for the wiring)."""

    campus: Port = Field(default=1, description="Port tapping the campus side of the router.")
    dtn: Port = Field(default=2, description="Port tapping the Science DMZ (DTN) side.")
    bottleneck: Port = Field(
        default=3, description="Port tapping the bottleneck link (router egress)."
    )


class ConfigMapKeyRef(ApiModel):
    """A key in a ConfigMap in the policy's namespace."""

    name: str = Field(min_length=1, max_length=253, description="ConfigMap name.")
    p4info_key: str = Field(
        default="p4info.txtpb", description="Key holding the P4Info (text format)."
    )
    device_config_key: str = Field(
        default="device_config.bin",
        description="Key (in binaryData) holding the target-specific device config.",
    )


class PipelineSpec(ApiModel):
    """A P4 pipeline to push at connect time; omit to use what the switch already runs."""

    config_map_ref: ConfigMapKeyRef = Field(
        description="ConfigMap holding the P4Info and the compiled device config."
    )


TLS_CA_KEY = "ca.crt"
TLS_CERT_KEY = "tls.crt"
TLS_PRIVATE_KEY_KEY = "tls.key"


def tls_secret_problem(keys: set[str]) -> str | None:
    """What a switch TLS Secret with these keys lacks (None: usable)."""
    if TLS_CA_KEY not in keys:
        return f"no key {TLS_CA_KEY} (the CA that signed the switch's certificate)"
    if (TLS_CERT_KEY in keys) != (TLS_PRIVATE_KEY_KEY in keys):
        return (
            f"{TLS_CERT_KEY} and {TLS_PRIVATE_KEY_KEY} go together (the collector's client "
            "certificate)"
        )
    return None


class TlsSpec(ApiModel):
    """TLS for the P4Runtime channel: the collector verifies the switch's certificate and,
    for mutual TLS, presents its own."""

    secret_name: str = Field(
        min_length=1,
        max_length=253,
        description="Secret in the policy's namespace with ca.crt (the CA that signed the "
        "switch's certificate), and tls.crt/tls.key (the collector's client certificate) "
        "for mutual TLS. Mounted into the collector only.",
    )
    server_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$",
        description="Name the switch's certificate must be issued for; default: the host "
        "of switch.address.",
    )


class SwitchSpec(ApiModel):
    """The P4 switch (or `scidmz target`) that computes the network state at line rate."""

    address: HostPort = Field(
        description="P4Runtime gRPC endpoint as host:port (IPv6 in brackets, e.g. "
        "[2001:db8::1]:9559)."
    )
    device_id: int = Field(default=1, ge=0, description="P4Runtime device id.")
    election_id: int = Field(
        default=10,
        ge=1,
        description="P4Runtime election id of the collector; the highest connected id is "
        "primary. Give a standby collector a lower one.",
    )
    ports: SwitchPorts = Field(
        default_factory=SwitchPorts, description="Tap port numbers on the switch."
    )
    pipeline: PipelineSpec | None = Field(
        default=None, description="Optional pipeline to push (SetForwardingPipelineConfig)."
    )
    tls: TlsSpec | None = Field(
        default=None, description="TLS settings; plaintext gRPC when omitted."
    )

    @model_validator(mode="after")
    def _distinct_ports(self) -> SwitchSpec:
        ports = (self.ports.campus, self.ports.dtn, self.ports.bottleneck)
        if len(set(ports)) != len(ports):
            raise ValueError("switch.ports: campus, dtn and bottleneck must be distinct")
        return self


class Gains(ApiModel):
    """Anti-windup PI gains (paper figure 5); tuned by GA per congestion control."""

    kp: float = Field(ge=0, le=100, description="Proportional gain Kp (>= 0).")
    ki: float = Field(ge=0, le=100, description="Integral gain Ki (>= 0), per second.")
    kw: float = Field(ge=0, le=100, description="Anti-windup back-calculation gain Kw (>= 0).")


class Limits(ApiModel):
    """Bounds on the campus rate limit u(t)."""

    min: Rate = Field(default="0bps", description="Lowest campus rate limit u(t).")
    max: Rate | None = Field(
        default=None, description="Highest campus rate limit u(t); default bottleneckCapacity."
    )
    max_step: Rate | None = Field(
        default=None,
        description="Largest change of u(t) per sample that the filter makes (slew limit, "
        "the saturator's ±Δu of paper figure 5); a change of targetRate moves u(t) at once by "
        "the same amount. Default 20% of bottleneckCapacity.",
    )


class DesiredState(ApiModel):
    """Parts of the desired state y_d(t) (paper table 3) that are not derived."""

    mode: Literal["reachable", "table3"] = Field(
        default="reachable",
        description="reachable: the delays of y(t-T) (a full drop-tail link keeps its queue "
        "whatever the split; the controller moves the split); table3: the paper's base RTTs "
        "and zero queuing delay, a state the inverse model never saw.",
    )

    dtn_rtt: Duration | None = Field(
        default=None, description="Desired DTN RTT; default: the measured base RTT."
    )
    campus_rtt: Duration | None = Field(
        default=None, description="Desired campus RTT; default: the measured base RTT."
    )


class ControllerSpec(ApiModel):
    """How u(t), the campus token-bucket rate, is computed every sample time T."""

    strategy: Strategy = Field(
        default="mlc",
        description="mlc: ANN inverse model + anti-windup PI (paper eq. 1, fig. 5); "
        "pi: the same filter around the trivial rate; trivial: u = B_max - R* (paper §3.7).",
    )
    gains: Gains | None = Field(
        default=None,
        description="PI gains; default per dtn.congestionControl and strategy: the gains "
        "`scidmz tune` found on the simulator (models/<cca>/gains.yaml; paper table 4's, "
        "cubic 0.285/1.486/1.565 and bbr 0.388/1.918/1.340, tracked worse there).",
    )
    limits: Limits = Field(default_factory=Limits, description="Bounds and slew of u(t).")
    desired_state: DesiredState = Field(
        default_factory=DesiredState, description="Overrides for the desired state y_d(t)."
    )


class TcActuator(ApiModel):
    """Linux tc token bucket on the campus egress interface."""

    node_name: str = Field(
        min_length=1, max_length=253, description="Node that owns the campus interface."
    )
    interface: str = Field(
        min_length=1,
        max_length=15,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Interface whose egress tbf qdisc carries u(t), e.g. eth1.",
    )


class SimActuator(ApiModel):
    """Rate changes sent to the simulator behind `scidmz target --source sim`."""

    address: HostPort | None = Field(
        default=None, description="Target's control endpoint; default: switch.address."
    )


class DtnActuatorSpec(ApiModel):
    """A cap on the DTN's sending rate: a second actuator for DTNs that ignore campus
    shaping (BBR). ESnet's DTN practice is pacing (fq maxrate, SO_MAX_PACING_RATE); where
    fq is not available, a tbf on the DTN host's egress does it, and that is what `tc`
    installs (through a `scidmz shaper` agent on that node)."""

    type: ActuatorType = Field(
        description="tc: a tbf on the DTN host's interface (a `scidmz shaper` pod on "
        "tc.nodeName, host networking, NET_ADMIN); sim: the embedded simulator's DTN; "
        "dryRun: compute and export only.",
    )
    tc: TcActuator | None = Field(
        default=None, description="Required when type is tc: the DTN host's node and interface."
    )
    sim: SimActuator | None = Field(default=None, description="Options when type is sim.")
    gains: Gains | None = Field(
        default=None,
        description="Gains of the DTN cap's anti-windup filter (feed-forward R*, error "
        "R* - R_DTN); default: the shipped tuned gains for dtn.congestionControl.",
    )
    failsafe_rate: str = Field(
        default="target",
        max_length=RATE_MAX_LENGTH,
        description="The cap applied when telemetry goes stale or the controller stops: "
        "'target' (R*) or a rate such as 600Mbps. The shaper agent also applies it on its own "
        "when the controller goes quiet.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self == 'target' || self.matches('{RATE_PATTERN}')",
                    "message": "must be 'target' or a rate with a unit, e.g. 600Mbps",
                }
            ]
        },
    )

    @model_validator(mode="after")
    def _checked(self) -> DtnActuatorSpec:
        if self.type == "tc" and self.tc is None:
            raise ValueError("actuator.dtn.tc is required when actuator.dtn.type is tc")
        if self.failsafe_rate != "target":
            parse_rate(self.failsafe_rate)
        return self


class ActuatorSpec(ApiModel):
    """Where u(t) is applied."""

    type: ActuatorType = Field(
        default="dryRun",
        description="tc: a tbf qdisc on a node (needs NET_ADMIN and host networking); "
        "sim: the embedded simulator; dryRun: compute and export only.",
    )
    tc: TcActuator | None = Field(default=None, description="Required when type is tc.")
    sim: SimActuator | None = Field(default=None, description="Options when type is sim.")
    dtn: DtnActuatorSpec | None = Field(
        default=None,
        description="Optional second actuator capping the DTN's sending rate around R*; "
        "the controller then runs a second anti-windup filter (a DTN above target lowers "
        "its cap). Needed to hold a BBR DTN, which ignores campus shaping.",
    )

    @model_validator(mode="after")
    def _tc_needs_settings(self) -> ActuatorSpec:
        if self.type == "tc" and self.tc is None:
            raise ValueError("actuator.tc is required when actuator.type is tc")
        return self


class FailsafeSpec(ApiModel):
    """What to do when telemetry goes stale, and on shutdown."""

    stale_after: Duration = Field(
        default="3s", description="Apply the fail-safe rate when no sample arrives for this long."
    )
    rate: str = Field(
        default="trivial",
        max_length=RATE_MAX_LENGTH,
        description="Fail-safe campus rate: 'trivial' (B_max - R*) or a rate such as 400Mbps.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self == 'trivial' || self.matches('{RATE_PATTERN}')",
                    "message": "must be 'trivial' or a rate with a unit, e.g. 400Mbps",
                }
            ]
        },
    )

    @model_validator(mode="after")
    def _rate_grammar(self) -> FailsafeSpec:
        if self.rate != "trivial":
            parse_rate(self.rate)
        return self


class TelemetrySpec(ApiModel):
    """How the collector turns the switch's reports into y(t) (paper algorithms 4 and 7)."""

    rtt_smoothing: float = Field(
        default=0.875,
        ge=0,
        lt=1,
        description="alpha of the campus RTT moving average (algorithm 4): RTT <- alpha*RTT + "
        "(1-alpha)*mean of the per-flow RTTs, once per sample time. The paper leaves it open; "
        "0.875 is TCP's SRTT weight, also used by P4BS. 0 takes each sample's mean as is.",
    )
    flow_timeout: Duration = Field(
        default="2s",
        description="A campus flow without an RTT sample for this long leaves the RTT vector "
        "(algorithm 4).",
    )
    active_flow_packets: int = Field(
        default=10,
        ge=1,
        le=65535,
        description="C_TH: packets a flow must send, each within activeFlowWindow of the "
        "previous, before it counts as active (algorithm 7).",
    )
    active_flow_window: Duration = Field(
        default="100ms", description="T_TH of the active-flow rule (algorithm 7)."
    )
    idle_timeout: Duration = Field(
        default="2s", description="An active flow silent this long is reported stopped."
    )
    rtt_horizon: Duration = Field(
        default="1s",
        description="A data packet's timestamp slot expires after this long: later ACKs "
        "give no RTT sample.",
    )
    digest_hold: Duration = Field(
        default="10ms",
        description="How long the switch may hold RTT digests to batch them (P4Runtime "
        "max_timeout_ns), 1ms to half of sampleTime. Longer holds cost the collector less CPU "
        "with many flows (bench/results/collector_scale*.md) and make per-flow RTTs older.",
    )

    @model_validator(mode="after")
    def _positive_durations(self) -> TelemetrySpec:
        for name in ("flow_timeout", "active_flow_window", "idle_timeout", "rtt_horizon"):
            seconds = parse_duration(getattr(self, name))
            if not 0 < seconds <= 3600:
                raise ValueError(f"telemetry.{to_camel(name)} must be between 0 and 1h")
        if not 0.001 <= parse_duration(self.digest_hold) <= 30:
            raise ValueError("telemetry.digestHold must be between 1ms and 30s")
        return self


def _spec_rules() -> list[dict[str, str]]:
    target = cel_rate_bps("self.targetRate")
    capacity = cel_rate_bps("self.bottleneckCapacity")
    limits = "self.controller.limits"
    lmin = cel_rate_bps(f"{limits}.min")
    lmax = cel_rate_bps(f"{limits}.max")
    step = cel_rate_bps(f"{limits}.maxStep")
    failsafe = cel_rate_bps("self.failsafe.rate")
    dtn_failsafe = cel_rate_bps("self.actuator.dtn.failsafeRate")
    has_limits = "has(self.controller) && has(self.controller.limits)"
    return [
        {
            "rule": f"{target} > 0.0",
            "message": "targetRate must be greater than 0",
            "fieldPath": ".targetRate",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"{capacity} > 0.0",
            "message": "bottleneckCapacity must be greater than 0",
            "fieldPath": ".bottleneckCapacity",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"{target} < {capacity}",
            "message": "targetRate must be below bottleneckCapacity",
            "fieldPath": ".targetRate",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"!({has_limits} && has({limits}.min)) || {lmin} <= {capacity}",
            "message": "controller.limits.min must not exceed bottleneckCapacity",
            "fieldPath": ".controller.limits.min",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"!({has_limits} && has({limits}.max)) || {lmax} <= {capacity}",
            "message": "controller.limits.max must not exceed bottleneckCapacity",
            "fieldPath": ".controller.limits.max",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"!({has_limits} && has({limits}.max) && has({limits}.min)) || "
            f"{lmin} <= {lmax}",
            "message": "controller.limits.min must not exceed controller.limits.max",
            "fieldPath": ".controller.limits.min",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"!({has_limits} && has({limits}.maxStep)) || "
            f"({step} > 0.0 && {step} <= {capacity})",
            "message": "controller.limits.maxStep must be greater than 0 and at most "
            "bottleneckCapacity",
            "fieldPath": ".controller.limits.maxStep",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.failsafe) || !has(self.failsafe.rate) || "
            f"self.failsafe.rate == 'trivial' || {failsafe} <= {capacity}",
            "message": "failsafe.rate must not exceed bottleneckCapacity",
            "fieldPath": ".failsafe.rate",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.actuator) || !has(self.actuator.type) || "
            "self.actuator.type != 'tc' || has(self.actuator.tc)",
            "message": "actuator.tc (nodeName, interface) is required when actuator.type is tc",
            "fieldPath": ".actuator.tc",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "!has(self.actuator) || !has(self.actuator.dtn) || "
            "self.actuator.dtn.type != 'tc' || has(self.actuator.dtn.tc)",
            "message": "actuator.dtn.tc (nodeName, interface) is required when "
            "actuator.dtn.type is tc",
            "fieldPath": ".actuator.dtn.tc",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "!has(self.actuator) || !has(self.actuator.dtn) || "
            "!has(self.actuator.dtn.failsafeRate) || self.actuator.dtn.failsafeRate == 'target' "
            f"|| {dtn_failsafe} <= {capacity}",
            "message": "actuator.dtn.failsafeRate must not exceed bottleneckCapacity",
            "fieldPath": ".actuator.dtn.failsafeRate",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.switch.ports) || "
            "(self.switch.ports.campus != self.switch.ports.dtn && "
            "self.switch.ports.campus != self.switch.ports.bottleneck && "
            "self.switch.ports.dtn != self.switch.ports.bottleneck)",
            "message": "switch.ports campus, dtn and bottleneck must be distinct",
            "fieldPath": ".switch.ports",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!isCIDR(self.dtn.receiverPrefix) || !isCIDR(self.campus.remotePrefix) || "
            "!cidr(self.dtn.receiverPrefix).containsCIDR(cidr(self.campus.remotePrefix))",
            "message": PREFIX_OVERLAP_MESSAGE,
            "fieldPath": ".dtn.receiverPrefix",
            "reason": "FieldValueInvalid",
        },
    ]


class DTNTransferPolicySpec(ApiModel):
    """Desired behaviour: keep the DTN at targetRate on a link of bottleneckCapacity."""

    model_config = ConfigDict(
        json_schema_extra=cast(JsonDict, {"x-kubernetes-validations": _spec_rules()}),
    )

    target_rate: Rate = Field(
        description="R*_DTN, the DTN rate to hold, with a unit: bps, kbps, Mbps, Gbps or Tbps "
        "(e.g. 600Mbps). Must be above 0 and below bottleneckCapacity.",
    )
    bottleneck_capacity: Rate = Field(
        description="B_max, the capacity of the shared bottleneck link (e.g. 1Gbps).",
    )
    sample_time: Duration = Field(
        default="1s",
        description="T, the control and telemetry sample time, 100ms to 60s (paper: 1s).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "duration(self) >= duration('100ms') && "
                    "duration(self) <= duration('60s')",
                    "message": "must be between 100ms and 60s",
                }
            ]
        },
    )
    dtn: DtnSpec = Field(description="The Science DMZ transfer node.")
    campus: CampusSpec = Field(description="The campus traffic sharing the bottleneck.")
    switch: SwitchSpec = Field(description="The P4 switch that taps the border router.")
    controller: ControllerSpec = Field(
        default_factory=ControllerSpec, description="The control law computing u(t)."
    )
    actuator: ActuatorSpec = Field(
        default_factory=ActuatorSpec, description="Where u(t) is applied."
    )
    failsafe: FailsafeSpec = Field(
        default_factory=FailsafeSpec, description="Behaviour on stale telemetry and shutdown."
    )
    telemetry: TelemetrySpec = Field(
        default_factory=TelemetrySpec,
        description="Estimator settings of the collector (RTT smoothing, active-flow rule).",
    )
    paused: bool = Field(
        default=False,
        description="Scale the collector and controller to zero, keeping their configuration.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> DTNTransferPolicySpec:
        _sample_time(self.sample_time)
        target = parse_rate(self.target_rate)
        capacity = parse_rate(self.bottleneck_capacity)
        if target <= 0:
            raise ValueError("targetRate must be greater than 0")
        if target >= capacity:
            raise ValueError("targetRate must be below bottleneckCapacity")
        limits = self.controller.limits
        low = parse_rate(limits.min)
        high = parse_rate(limits.max) if limits.max is not None else capacity
        if high > capacity:
            raise ValueError("controller.limits.max must not exceed bottleneckCapacity")
        if low > high:
            raise ValueError("controller.limits.min must not exceed controller.limits.max")
        if limits.max_step is not None:
            step = parse_rate(limits.max_step)
            if not 0 < step <= capacity:
                raise ValueError(
                    "controller.limits.maxStep must be greater than 0 and at most "
                    "bottleneckCapacity"
                )
        if self.failsafe.rate != "trivial" and parse_rate(self.failsafe.rate) > capacity:
            raise ValueError("failsafe.rate must not exceed bottleneckCapacity")
        dtn = self.actuator.dtn
        dtn_failsafe = (
            parse_rate(dtn.failsafe_rate) if dtn and dtn.failsafe_rate != "target" else 0.0
        )
        if dtn_failsafe > capacity:
            raise ValueError("actuator.dtn.failsafeRate must not exceed bottleneckCapacity")
        if prefixes_conflict(self.dtn.receiver_prefix, self.campus.remote_prefix):
            raise ValueError(PREFIX_OVERLAP_MESSAGE)
        if 2 * parse_duration(self.telemetry.digest_hold) > parse_duration(self.sample_time):
            raise ValueError("telemetry.digestHold must be at most half of sampleTime")
        return self


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str = Field(description="Ready, TelemetryReady, ControllerReady, Reconciled or Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase machine-readable reason.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int = Field(
        default=0, description="metadata.generation this condition was computed for."
    )


class StateStatus(ApiModel):
    """The latest network state y(t) and control input u(t), in API units."""

    model_config = ConfigDict(extra="ignore")

    dtn_rate: str | None = Field(default=None, description="R_DTN, e.g. 598.2Mbps.")
    campus_rate: str | None = Field(default=None, description="R_campus.")
    dtn_rtt: str | None = Field(default=None, description="RTT_DTN, e.g. 101.3ms.")
    campus_rtt: str | None = Field(default=None, description="RTT_campus.")
    dtn_queuing_delay: str | None = Field(default=None, description="QD_DTN.")
    campus_queuing_delay: str | None = Field(default=None, description="QD_campus.")
    active_flows: int | None = Field(default=None, description="AF, active flows.")
    campus_rate_limit: str | None = Field(
        default=None, description="u(t), the applied campus rate limit."
    )
    sampled_at: str | None = Field(default=None, description="Sample time (RFC 3339).")


class TrackingStatus(ApiModel):
    """How well the DTN rate follows the target (paper eq. 3)."""

    model_config = ConfigDict(extra="ignore")

    mrae: float | None = Field(default=None, description="Mean relative absolute error.")
    window: str | None = Field(default=None, description="Window the MRAE covers, e.g. 120s.")


class DTNTransferPolicyStatus(ApiModel):
    """Observed state, written by the operator."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation the workloads were last applied for."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, TelemetryReady, ControllerReady, Reconciled, Degraded.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    state: StateStatus | None = Field(default=None, description="Latest y(t) and u(t).")
    tracking: TrackingStatus | None = Field(default=None, description="Tracking quality.")


def parse_spec(raw: dict[str, Any]) -> DTNTransferPolicySpec:
    """Validate a spec dict from the API (camelCase) into the typed model."""
    return DTNTransferPolicySpec.model_validate(raw)
