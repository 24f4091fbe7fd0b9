"""The DTNTransferPolicy custom resource (group scidmz.io, version v1alpha1).

These pydantic models are the API's single source: ``crds/`` is generated from them
(:mod:`scidmz.api.crd`), the operator parses live objects with them, and every
``description`` here is what ``kubectl explain dtp.spec...`` prints. Every rule beyond
the schema's types, bounds and patterns is a :class:`scidmz.api.rules.Rule` (``RULES`` of a
model, ``Checked`` on a field): its CEL goes into ``x-kubernetes-validations``, so the API
server rejects bad input before the operator sees it, and its Python twin is the check
this module runs on objects read from the API or from files.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel, to_snake

from scidmz.api.rules import Checked, Rule, RuledModel
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

MAX_RATE_BPS = 1e13
"""10 Tb/s, the largest capacity accepted (every other rate is bounded by the capacity)."""
MAX_GAIN = 100.0
"""The largest Kp, Ki or Kw anywhere (policy, runtime config, the filter itself)."""
MIN_SAMPLE_TIME_S = 0.1
MAX_SAMPLE_TIME_S = 60.0

CongestionControl = Literal["cubic", "bbr"]
Strategy = Literal["mlc", "pi", "trivial"]
ActuatorType = Literal["tc", "sim", "dryRun"]


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _network_address(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError:
        return not _is_cidr(text)  # not a prefix at all: the other rule reports it
    return True


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
_PORT_OF = "int(self.substring(self.lastIndexOf(':') + 1))"
_BRACKETED = "self.substring(1, self.lastIndexOf(']'))"


def _port_in_range(text: str) -> bool:
    return 0 < int(text.rpartition(":")[2]) <= 65535


def _bracketed_ipv6(text: str) -> bool:
    if not text.startswith("["):
        return True
    try:
        ipaddress.IPv6Address(text[1 : text.rindex("]")])
    except ValueError:
        return False
    return True


def _duration_rule(low: str, high: str, low_open: bool = False) -> Rule:
    """``low <= d <= high`` (``low < d`` when ``low_open``) for a Duration string."""
    low_s, high_s = parse_duration(low), parse_duration(high)

    def within(text: str) -> bool:
        seconds = parse_duration(text)
        return (low_s < seconds if low_open else low_s <= seconds) and seconds <= high_s

    return Rule(
        cel=f"duration(self) {'>' if low_open else '>='} duration('{low}') && "
        f"duration(self) <= duration('{high}')",
        check=within,
        message=f"must be above {low} and at most {high}"
        if low_open
        else f"must be between {low} and {high}",
        violation=low if low_open else "0s",
    )


def _rate_or(keyword: str, example: str) -> Rule:
    return Rule(
        cel=f"self == '{keyword}' || self.matches('{RATE_PATTERN}')",
        check=lambda text: text == keyword or re.match(RATE_PATTERN, text) is not None,
        message=f"must be '{keyword}' or a rate with a unit, e.g. {example}",
        violation="fast",
    )


Rate = Annotated[str, Field(pattern=RATE_PATTERN, max_length=RATE_MAX_LENGTH)]
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=RATE_MAX_LENGTH)]
SampleTime = Annotated[Duration, Checked(_duration_rule("100ms", "60s"))]
TelemetryDuration = Annotated[Duration, Checked(_duration_rule("0s", "60m", low_open=True))]
DigestHold = Annotated[Duration, Checked(_duration_rule("1ms", "30s"))]
StaleAfter = Annotated[Duration, Checked(_duration_rule("0s", "60m", low_open=True))]
DesiredRtt = Annotated[Duration, Checked(_duration_rule("0s", "60s", low_open=True))]
PinnedAfter = Annotated[Duration, Checked(_duration_rule("1s", "60m"))]
CidrPrefix = Annotated[
    str,
    Field(max_length=64),
    Checked(
        Rule(
            cel="isCIDR(self)",
            check=_is_cidr,
            message="must be an IPv4 or IPv6 CIDR prefix, e.g. 203.0.113.10/32 or 2001:db8::/64",
            violation="203.0.113.300/32",
        ),
        Rule(
            cel="!isCIDR(self) || cidr(self) == cidr(self).masked()",
            check=_network_address,
            message="has host bits set: give the network address, e.g. 203.0.113.0/24 "
            "rather than 203.0.113.7/24",
            violation="203.0.113.7/24",
        ),
    ),
]
HostPort = Annotated[
    str,
    Field(pattern=_HOST_PORT_PATTERN, max_length=255),
    Checked(
        Rule(
            cel=f"{_PORT_OF} <= 65535 && {_PORT_OF} > 0",
            check=_port_in_range,
            message="port must be between 1 and 65535",
            violation="switch-1:70000",
        ),
        Rule(
            cel=f"!self.startsWith('[') || (isIP({_BRACKETED}) && ip({_BRACKETED}).family() == 6)",
            check=_bracketed_ipv6,
            message="the bracketed host must be an IPv6 address, e.g. [2001:db8::1]:9559",
            violation="[10.0.0.1]:9559",
        ),
    ),
]
Port = Annotated[int, Field(ge=0, le=511)]
FailsafeRate = Annotated[
    str, Field(max_length=RATE_MAX_LENGTH), Checked(_rate_or("trivial", "400Mbps"))
]
DtnFailsafeRate = Annotated[
    str, Field(max_length=RATE_MAX_LENGTH), Checked(_rate_or("target", "600Mbps"))
]


def _tc_settings_required(path: str) -> Rule:
    """An actuator at ``path`` of type tc needs its ``tc`` settings (node, interface)."""
    return Rule(
        cel="!has(self.type) || self.type != 'tc' || has(self.tc)",
        check=lambda actuator: actuator.type != "tc" or actuator.tc is not None,
        message=f"{path}.tc (nodeName, interface) is required when {path}.type is tc",
        violation={"type": "tc", "tc": None},
        field_path=".tc",
        reason="FieldValueRequired",
    )


class ApiModel(RuledModel):
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

    RULES = (
        Rule(
            cel="self.campus != self.dtn && self.campus != self.bottleneck && "
            "self.dtn != self.bottleneck",
            check=lambda p: len({p.campus, p.dtn, p.bottleneck}) == 3,
            message="switch.ports campus, dtn and bottleneck must be distinct",
            violation={"dtn": 1, "campus": 1},
        ),
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


class Gains(ApiModel):
    """Anti-windup PI gains (paper figure 5); tuned by GA per congestion control."""

    kp: float = Field(ge=0, le=MAX_GAIN, description="Proportional gain Kp (>= 0).")
    ki: float = Field(ge=0, le=MAX_GAIN, description="Integral gain Ki (>= 0), per second.")
    kw: float = Field(ge=0, le=MAX_GAIN, description="Anti-windup back-calculation gain Kw (>= 0).")


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
    integral_band: Rate | None = Field(
        default=None,
        description="The campus filter's integral accumulates only while the DTN rate "
        "error |R_DTN − R*| is within this band (conditional integration): the ramp after a "
        "change of targetRate is left to the proportional and feed-forward paths instead of "
        "being summed and unwound later as overshoot. A band of bottleneckCapacity or more "
        "integrates always (paper figure 5), as the DTN cap's filter does. Default: 5% of "
        "bottleneckCapacity for a cubic DTN; bottleneckCapacity for bbr (its shipped gains "
        "were tuned without a band).",
    )

    RULES = (
        Rule(
            cel=f"!has(self.max) || {cel_rate_bps('self.max')} > 0.0",
            check=lambda limits: limits.max is None or parse_rate(limits.max) > 0,
            message="controller.limits.max must be greater than 0",
            violation={"max": "0Mbps"},
            field_path=".max",
        ),
        Rule(
            cel=f"!has(self.integralBand) || {cel_rate_bps('self.integralBand')} > 0.0",
            check=lambda limits: (
                limits.integral_band is None or parse_rate(limits.integral_band) > 0
            ),
            message="controller.limits.integralBand must be greater than 0",
            violation={"integralBand": "0Mbps"},
            field_path=".integralBand",
        ),
    )


class DesiredState(ApiModel):
    """Parts of the desired state y_d(t) (paper table 3) that are not derived."""

    mode: Literal["reachable", "table3"] = Field(
        default="reachable",
        description="reachable: campus rate G - R*, G the link's goodput when full as "
        "measured (B - R* asks for the frame headers' share too), and the delays of y(t-T) "
        "(a full drop-tail link keeps its queue whatever the split; the controller moves the "
        "split); table3: the paper's B - R*, base RTTs and zero queuing delay, a state the "
        "inverse model never saw.",
    )

    dtn_rtt: DesiredRtt | None = Field(
        default=None, description="Desired DTN RTT; default: the measured base RTT."
    )
    campus_rtt: DesiredRtt | None = Field(
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
    pinned_after: PinnedAfter = Field(
        default="60s",
        description="How long u(t) may stay at limits.min or limits.max held there by the "
        "filter's integral (without it the filter would be inside) before the controller "
        "reports not ready and ScidmzControllerPinned fires: 1s to 60m.",
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


class _ActuatorSettings(ApiModel):
    """The settings an actuator of each type takes (one of them is used)."""

    tc: TcActuator | None = Field(
        default=None, description="Required when type is tc: the node and its interface."
    )
    sim: SimActuator | None = Field(default=None, description="Options when type is sim.")


class DtnActuatorSpec(_ActuatorSettings):
    """A cap on the DTN's sending rate: a second actuator for DTNs that ignore campus
    shaping (BBR). ESnet's DTN practice is pacing (fq maxrate, SO_MAX_PACING_RATE); where
    fq is not available, a tbf on the DTN host's egress does it, and that is what `tc`
    installs (through a `scidmz shaper` agent on that node)."""

    type: ActuatorType = Field(
        description="tc: a tbf on the DTN host's interface (a `scidmz shaper` pod on "
        "tc.nodeName, host networking, NET_ADMIN); sim: the embedded simulator's DTN; "
        "dryRun: compute and export only.",
    )
    gains: Gains | None = Field(
        default=None,
        description="Gains of the DTN cap's anti-windup filter (feed-forward R*, error "
        "R* - R_DTN); default: the shipped tuned gains for dtn.congestionControl.",
    )
    failsafe_rate: DtnFailsafeRate = Field(
        default="target",
        description="The cap applied when telemetry goes stale or the controller stops: "
        "'target' (R*) or a rate such as 600Mbps. The shaper agent also applies it on its own "
        "when the controller goes quiet.",
    )

    RULES = (_tc_settings_required("actuator.dtn"),)


class ActuatorSpec(_ActuatorSettings):
    """Where u(t) is applied."""

    type: ActuatorType = Field(
        default="dryRun",
        description="tc: a tbf qdisc on a node (needs NET_ADMIN and host networking); "
        "sim: the embedded simulator; dryRun: compute and export only.",
    )
    dtn: DtnActuatorSpec | None = Field(
        default=None,
        description="Optional second actuator capping the DTN's sending rate around R*; "
        "the controller then runs a second anti-windup filter (a DTN above target lowers "
        "its cap). Needed to hold a BBR DTN, which ignores campus shaping.",
    )

    RULES = (_tc_settings_required("actuator"),)


class FailsafeSpec(ApiModel):
    """What to do when telemetry goes stale, and on shutdown."""

    stale_after: StaleAfter | None = Field(
        default=None,
        description="Apply the fail-safe rate when no sample arrives for this long: at least "
        "sampleTime, at most 60m; default 3 sample times.",
    )
    rate: FailsafeRate = Field(
        default="trivial",
        description="Fail-safe campus rate: 'trivial' (B_max - R*) or a rate such as 400Mbps.",
    )


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
    flow_timeout: TelemetryDuration = Field(
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
    active_flow_window: TelemetryDuration = Field(
        default="100ms", description="T_TH of the active-flow rule (algorithm 7)."
    )
    idle_timeout: TelemetryDuration = Field(
        default="2s", description="An active flow silent this long is reported stopped."
    )
    rtt_horizon: TelemetryDuration = Field(
        default="1s",
        description="A data packet's timestamp slot expires after this long: later ACKs "
        "give no RTT sample.",
    )
    max_active_flows: int = Field(
        default=65536,
        ge=1,
        le=10_000_000,
        description="The most active flows the data plane can report (its flow register's "
        "size; the shipped P4 programs hold 65536). A sample reporting more is physically "
        "impossible: the controller skips it rather than feed it to the model.",
    )
    digest_hold: DigestHold = Field(
        default="10ms",
        description="How long the switch may hold RTT digests to batch them (P4Runtime "
        "max_timeout_ns), 1ms to half of sampleTime. Longer holds cost the collector less CPU "
        "with many flows (bench/results/collector_scale*.md) and make per-flow RTTs older.",
    )


def _bps(rate: str | None) -> float:
    return parse_rate(rate) if rate is not None else 0.0


_TARGET = cel_rate_bps("self.targetRate")
_CAPACITY = cel_rate_bps("self.bottleneckCapacity")


def _present(path: str) -> str:
    """CEL: every part of ``path`` below the spec is set (``has(self.a) && has(self.a.b)``)."""
    parts = path.split(".")
    return " && ".join(f"has(self.{'.'.join(parts[: k + 1])})" for k in range(len(parts)))


def _has_limits(field: str) -> str:
    return _present(f"controller.limits.{field}")


def _value_at(spec: Any, path: str) -> Any:
    """The parsed value at a camelCase ``path`` of the spec (None when a part is absent)."""
    node = spec
    for part in path.split("."):
        node = getattr(node, to_snake(part), None)
        if node is None:
            return None
    return node


def _positive(field: str) -> Rule:
    """The required rate ``field`` of the spec must be above 0."""
    return Rule(
        cel=f"{cel_rate_bps(f'self.{field}')} > 0.0",
        check=lambda spec: parse_rate(_value_at(spec, field)) > 0,
        message=f"{field} must be greater than 0",
        violation={field: "0bps"},
        field_path=f".{field}",
    )


def _within_capacity(path: str, keyword: str | None = None, violation: str = "2Gbps") -> Rule:
    """``path`` (a rate, or ``keyword``) must not exceed bottleneckCapacity; absent passes."""
    present = _present(path)
    exempt = f" || self.{path} == '{keyword}'" if keyword else ""

    def check(spec: Any) -> bool:
        value = _value_at(spec, path)
        if value is None or value == keyword:
            return True
        return parse_rate(value) <= parse_rate(spec.bottleneck_capacity)

    return Rule(
        cel=f"!({present}){exempt} || {cel_rate_bps(f'self.{path}')} <= {_CAPACITY}",
        check=check,
        message=f"{path} must not exceed bottleneckCapacity",
        violation={path: violation},
        field_path=f".{path}",
    )


_LIMITS = "self.controller.limits"

SPEC_RULES: tuple[Rule, ...] = (
    _positive("targetRate"),
    _positive("bottleneckCapacity"),
    Rule(
        cel=f"{_CAPACITY} <= {MAX_RATE_BPS:.1e}",
        check=lambda spec: parse_rate(spec.bottleneck_capacity) <= MAX_RATE_BPS,
        message="bottleneckCapacity must be at most 10Tbps",
        violation={"bottleneckCapacity": "10.5Tbps"},
        field_path=".bottleneckCapacity",
    ),
    Rule(
        cel=f"{_TARGET} < {_CAPACITY}",
        check=lambda spec: parse_rate(spec.target_rate) < parse_rate(spec.bottleneck_capacity),
        message="targetRate must be below bottleneckCapacity",
        violation={"targetRate": "1Gbps"},
        field_path=".targetRate",
    ),
    _within_capacity("controller.limits.min"),
    _within_capacity("controller.limits.max"),
    Rule(
        cel=f"!({_has_limits('max')} && has({_LIMITS}.min)) || "
        f"{cel_rate_bps(f'{_LIMITS}.min')} <= {cel_rate_bps(f'{_LIMITS}.max')}",
        check=lambda spec: (
            spec.controller.limits.max is None
            or _bps(spec.controller.limits.min) <= _bps(spec.controller.limits.max)
        ),
        message="controller.limits.min must not exceed controller.limits.max",
        violation={"controller.limits.min": "800Mbps", "controller.limits.max": "200Mbps"},
        field_path=".controller.limits.min",
    ),
    Rule(
        cel=f"!({_has_limits('maxStep')}) || ({cel_rate_bps(f'{_LIMITS}.maxStep')} > 0.0 && "
        f"{cel_rate_bps(f'{_LIMITS}.maxStep')} <= {_CAPACITY})",
        check=lambda spec: (
            spec.controller.limits.max_step is None
            or 0
            < parse_rate(spec.controller.limits.max_step)
            <= parse_rate(spec.bottleneck_capacity)
        ),
        message="controller.limits.maxStep must be greater than 0 and at most bottleneckCapacity",
        violation={"controller.limits.maxStep": "0bps"},
        field_path=".controller.limits.maxStep",
    ),
    _within_capacity("failsafe.rate", keyword="trivial"),
    Rule(
        cel="!has(self.failsafe) || !has(self.failsafe.staleAfter) || "
        "duration(self.failsafe.staleAfter) >= duration(self.sampleTime)",
        check=lambda spec: (
            spec.failsafe.stale_after is None
            or parse_duration(spec.failsafe.stale_after) >= parse_duration(spec.sample_time)
        ),
        message="failsafe.staleAfter must be at least sampleTime",
        violation={"failsafe.staleAfter": "500ms", "sampleTime": "1s"},
        field_path=".failsafe.staleAfter",
    ),
    _within_capacity("actuator.dtn.failsafeRate", keyword="target"),
    Rule(
        cel="!isCIDR(self.dtn.receiverPrefix) || !isCIDR(self.campus.remotePrefix) || "
        "!cidr(self.dtn.receiverPrefix).containsCIDR(cidr(self.campus.remotePrefix))",
        check=lambda spec: (
            not prefixes_conflict(spec.dtn.receiver_prefix, spec.campus.remote_prefix)
        ),
        message=PREFIX_OVERLAP_MESSAGE,
        violation={"dtn.receiverPrefix": "203.0.113.0/24", "campus.remotePrefix": "203.0.113.0/25"},
        field_path=".dtn.receiverPrefix",
    ),
    Rule(
        cel="!has(self.telemetry) || !has(self.telemetry.digestHold) || "
        "duration(self.telemetry.digestHold) + duration(self.telemetry.digestHold) <= "
        "duration(self.sampleTime)",
        check=lambda spec: (
            2 * parse_duration(spec.telemetry.digest_hold) <= parse_duration(spec.sample_time)
        ),
        message="telemetry.digestHold must be at most half of sampleTime",
        violation={"telemetry.digestHold": "900ms", "sampleTime": "1s"},
        field_path=".telemetry.digestHold",
    ),
)
"""The spec's cross-field rules (at ``spec``; CEL paths are relative to it)."""


class DTNTransferPolicySpec(ApiModel):
    """Desired behaviour: keep the DTN at targetRate on a link of bottleneckCapacity."""

    RULES = SPEC_RULES

    target_rate: Rate = Field(
        description="R*_DTN, the DTN rate to hold, with a unit: bps, kbps, Mbps, Gbps or Tbps "
        "(e.g. 600Mbps). Must be above 0 and below bottleneckCapacity.",
    )
    bottleneck_capacity: Rate = Field(
        description="B_max, the capacity of the shared bottleneck link (e.g. 1Gbps).",
    )
    sample_time: SampleTime = Field(
        default="1s",
        description="T, the control and telemetry sample time, 100ms to 60s (paper: 1s).",
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
    target_rate: str | None = Field(
        default=None,
        description=(
            "R* the running controller decides on. A new spec.targetRate is taken without "
            "a restart and shows here once the controller has read its updated ConfigMap "
            "(seconds; at most the kubelet's sync period)."
        ),
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
