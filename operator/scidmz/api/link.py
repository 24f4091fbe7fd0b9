"""The BorderLink custom resource: a shared border link, owned by network administrators.

Cluster-scoped, like the Gateway API's infrastructure objects. It holds everything
privileged: the link's capacity, the P4 switch that taps it (address, election id, TLS),
the campus shaper (node and interface), the DTN hosts that may be shaped on their side,
the control law and fail-safe, and which namespaces may attach a
:class:`~scidmz.api.policy.DTNTransferPolicy` to it and how much of the link their
targets may take in total. The operator runs one loop per link (one collector, one
controller, the shaper agents), in its own namespace.

These pydantic models are the API's single source: ``crds/`` is generated from them, and
every ``description`` is what ``kubectl explain borderlink.spec...`` prints.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_snake

from scidmz.api.buffer import BufferSpec
from scidmz.api.rules import Rule
from scidmz.api.selection import NamespaceSelection
from scidmz.api.types import (
    MAX_GAIN,
    MAX_RATE_BPS,
    PREFIX_OVERLAP_MESSAGE,
    ActuatorType,
    ApiModel,
    CidrPrefix,
    Condition,
    ConfigMapKey,
    CongestionControl,
    DesiredRtt,
    DigestHold,
    DnsLabel,
    DtnFailsafeRate,
    FailsafeRate,
    HostPort,
    Interface,
    ObjectName,
    PinnedAfter,
    Port,
    Rate,
    SampleTime,
    StaleAfter,
    Strategy,
    TelemetryDuration,
    prefixes_conflict,
    tc_settings_required,
)
from scidmz.api.units import cel_rate_bps, parse_duration, parse_rate
from scidmz.contract.classes import DTN_CLASSES

KIND = "BorderLink"
PLURAL = "borderlinks"
SINGULAR = "borderlink"
SHORT_NAMES = ["bl"]

MAX_DTN_HOSTS = DTN_CLASSES
"""Each DTN host of a link is its own class in the switch (`contract.classes`)."""
MAX_TOLERATIONS = 16


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
    """A key in a ConfigMap in the operator's namespace."""

    name: ObjectName = Field(description="ConfigMap name, in the operator's namespace.")
    p4info_key: str = Field(
        default="p4info.txtpb",
        max_length=253,
        description="Key holding the P4Info (text format).",
    )
    device_config_key: str = Field(
        default="device_config.bin",
        max_length=253,
        description="Key (in binaryData) holding the target-specific device config.",
    )


class PipelineSpec(ApiModel):
    """A P4 pipeline to push at connect time; omit to use what the switch already runs."""

    config_map_ref: ConfigMapKeyRef = Field(
        description="ConfigMap (in the operator's namespace) holding the P4Info and the "
        "compiled device config."
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

    secret_name: ObjectName = Field(
        description="Secret in the operator's namespace with ca.crt (the CA that signed the "
        "switch's certificate), and tls.crt/tls.key (the collector's client certificate) "
        "for mutual TLS. Mounted into the collector only (and into the controller of a "
        "sim actuator, which talks to the simulator on the switch's port).",
    )
    server_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$",
        description="Name the switch's certificate must be issued for; default: the host "
        "of switch.address.",
    )


MAX_TAP_DTN_INTERFACES = 28
"""A tap reads at most 32 interfaces (``tapreader.c``): campus, bottleneck, acks and these."""

_TAP_SIDES = (
    "[self.interfaces.campus] + self.interfaces.dtn"
    " + (has(self.interfaces.bottleneck) ? [self.interfaces.bottleneck] : [])"
    " + (has(self.interfaces.acks) ? [self.interfaces.acks] : [])"
    " + (has(self.interfaces.border) ? [self.interfaces.border] : [])"
)
_TAP = {"nodeName": "tap-1", "interfaces": {"campus": "m0", "dtn": ["m1"], "border": "m2"}}
"""A software tap as the rules' examples give it."""


class TapInterfaces(ApiModel):
    """The tap node's mirror interfaces, each carrying copies of one side of the border
    router (see docs/operating/network.md for the mirror sessions)."""

    campus: Interface = Field(description="Frames entering the router from the campus.")
    dtn: list[Interface] = Field(
        min_length=1,
        max_length=MAX_TAP_DTN_INTERFACES,
        description="Frames entering the router from the DTN hosts, one interface per link "
        "from them (the hosts are told apart by their receiver prefixes).",
    )
    bottleneck: Interface | None = Field(
        default=None,
        description="Frames leaving the router onto the border link (after its queue); "
        "with acks, in place of border.",
    )
    acks: Interface | None = Field(
        default=None,
        description="Frames coming back over the border link (the ACKs); with bottleneck, "
        "in place of border.",
    )
    border: Interface | None = Field(
        default=None,
        description="One mirror port carrying both directions of the border link, in place "
        "of bottleneck and acks: a frame to the campus's or a DTN host's remote prefix is "
        "data leaving, one from them an ACK.",
    )


class SoftwareTapSpec(ApiModel):
    """`scidmz target --source packets`, run by the operator on a node that receives the
    border router's mirror sessions: the telemetry a P4 switch would compute, from copies
    of the frames."""

    node_name: ObjectName = Field(description="Node whose interfaces receive the mirrors.")
    interfaces: TapInterfaces = Field(description="The mirror interfaces on nodeName.")
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_TOLERATIONS,
        description="Taints of nodeName the tap's pod tolerates, exactly as listed.",
    )

    RULES = (
        Rule(
            cel="has(self.interfaces.border) ? !has(self.interfaces.bottleneck) && "
            "!has(self.interfaces.acks) : has(self.interfaces.bottleneck) && "
            "has(self.interfaces.acks)",
            check=lambda t: (
                t.interfaces.bottleneck is None and t.interfaces.acks is None
                if t.interfaces.border is not None
                else t.interfaces.bottleneck is not None and t.interfaces.acks is not None
            ),
            message="switch.tap.interfaces: give border (one mirror port with both directions "
            "of the border link) or both bottleneck and acks",
            violation={**_TAP, "interfaces": {"campus": "m0", "dtn": ["m1"], "bottleneck": "m2"}},
            field_path=".interfaces",
        ),
        Rule(
            cel=f"({_TAP_SIDES}).all(i, ({_TAP_SIDES}).filter(j, j == i).size() == 1)",
            check=lambda t: len(sides := _tap_sides(t.interfaces)) == len(set(sides)),
            message="switch.tap.interfaces: each interface carries one side (names must differ)",
            violation={**_TAP, "interfaces": {"campus": "m0", "dtn": ["m1", "m0"], "border": "m2"}},
            field_path=".interfaces",
        ),
    )


def _tap_sides(interfaces: TapInterfaces) -> list[str]:
    optional = (interfaces.bottleneck, interfaces.acks, interfaces.border)
    return [interfaces.campus, *interfaces.dtn, *(i for i in optional if i is not None)]


class SwitchSpec(ApiModel):
    """The P4 switch (or `scidmz target`) that computes the network state at line rate: an
    external P4Runtime endpoint (address), or a software tap the operator runs (tap)."""

    address: HostPort | None = Field(
        default=None,
        description="P4Runtime gRPC endpoint as host:port (IPv6 in brackets, e.g. "
        "[2001:db8::1]:9559). Exactly one of address and tap.",
    )
    tap: SoftwareTapSpec | None = Field(
        default=None,
        description="Run a software tap on a node instead of dialling a switch: the operator "
        "deploys `scidmz target --source packets` there (host network, CAP_NET_RAW only), "
        "issues its certificate and lets in only this link's collector. Exactly one of "
        "address and tap.",
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
        default=None,
        description="TLS to the switch; required unless plaintext is true or the switch is "
        "a tap (whose certificates the operator issues).",
    )
    plaintext: bool = Field(
        default=False,
        description="Talk P4Runtime without TLS. Anyone on the network path can then read "
        "the telemetry and, with a higher election id, take the switch over: for a lab "
        "switch on an isolated network only. The link's status says so (Degraded, "
        "reason PlaintextSwitch).",
    )

    RULES = (
        Rule(
            cel="has(self.address) != has(self.tap)",
            check=lambda s: (s.address is None) != (s.tap is None),
            message="switch: give address (a P4Runtime switch) or tap (a software tap the "
            "operator runs), exactly one",
            violation={"tap": _TAP},
        ),
        Rule(
            cel="has(self.tls) || (has(self.plaintext) && self.plaintext) || has(self.tap)",
            check=lambda s: s.tls is not None or s.plaintext or s.tap is not None,
            message="switch.tls is required (P4Runtime over mutual TLS); set "
            "switch.plaintext: true to go without it on an isolated lab network",
            violation={"tls": None, "plaintext": False},
            field_path=".tls",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.tls) || !has(self.plaintext) || !self.plaintext",
            check=lambda s: s.tls is None or not s.plaintext,
            message="switch.tls and switch.plaintext: true contradict each other",
            violation={"tls": {"secretName": "switch-tls"}, "plaintext": True},
            field_path=".plaintext",
        ),
        Rule(
            cel="!has(self.tap) || (!has(self.tls) && !has(self.pipeline) && "
            "!(has(self.plaintext) && self.plaintext))",
            check=lambda s: (
                s.tap is None or (s.tls is None and s.pipeline is None and not s.plaintext)
            ),
            message="switch.tap: the operator issues the tap's certificates and it runs the "
            "scidmz pipeline: leave out tls, plaintext and pipeline",
            violation={"tap": _TAP, "address": None},
            field_path=".tap",
        ),
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
        default=None, description="Highest campus rate limit u(t); default capacity."
    )
    max_step: Rate | None = Field(
        default=None,
        description="Largest change of u(t) per sample that the filter makes (slew limit, "
        "the saturator's ±Δu of paper figure 5); a change of the targets moves u(t) at once "
        "by the same amount. Default 20% of capacity.",
    )
    integral_band: Rate | None = Field(
        default=None,
        description="The campus filter's integral accumulates only while the DTN rate "
        "error |R_DTN − R*| is within this band (conditional integration): the ramp after a "
        "change of target is left to the proportional and feed-forward paths instead of "
        "being summed and unwound later as overshoot. A band of capacity or more integrates "
        "always (paper figure 5), as the DTN cap's filter does. Default: 5% of capacity "
        "for a cubic DTN; capacity for bbr (its shipped gains were tuned without a band).",
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


class ModelRef(ApiModel):
    """An inverse model retrained for this link, shipped in a ConfigMap of the operator's
    namespace: the ONNX model (binaryData) and its card (data), as `scidmz train` writes
    them (inverse.onnx, card.yaml)."""

    config_map_name: ObjectName = Field(
        description="ConfigMap in the operator's namespace holding the model and its card."
    )
    model_key: ConfigMapKey = Field(
        default="inverse.onnx",
        description="Key (in binaryData) of the ONNX inverse model.",
    )
    card_key: ConfigMapKey = Field(
        default="card.yaml",
        description="Key (in data) of its card: congestion control, capacities, sample time "
        "and RTTs it was identified on; the link must lie within them.",
    )


class ControllerSpec(ApiModel):
    """How u(t), the campus token-bucket rate, is computed every sample time T."""

    strategy: Strategy = Field(
        default="mlc",
        description="mlc: ANN inverse model + anti-windup PI (paper eq. 1, fig. 5); "
        "pi: the same filter around the trivial rate; trivial: u = B_max - R* (paper §3.7).",
    )
    model: CongestionControl | None = Field(
        default=None,
        description="The DTN congestion control whose inverse model (mlc) and tuned gains "
        "the campus loop uses. Default: the admitted DTNs' own when they all share one; "
        "with DTNs of mixed congestion control no model is identified, so mlc runs as pi "
        "(on the cubic gains) until this is set.",
    )
    model_ref: ModelRef | None = Field(
        default=None,
        description="Run this inverse model instead of the image's for spec.controller.model "
        "(which it needs): one retrained for this link. The operator checks its card "
        "against the link (congestion control, capacity, sample time, desired RTTs) and "
        "refuses the link, saying what is outside, before anything restarts; a new model in "
        "the ConfigMap restarts the controller on it.",
    )
    gains: Gains | None = Field(
        default=None,
        description="PI gains; default per the model (spec.controller.model) and the "
        "strategy: the gains `scidmz tune` found on the simulator (models/<cca>/gains.yaml; "
        "paper table 4's, cubic 0.285/1.486/1.565 and bbr 0.388/1.918/1.340, tracked worse "
        "there).",
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

    RULES = (
        Rule(
            cel="!has(self.modelRef) || (has(self.model) && "
            "(!has(self.strategy) || self.strategy == 'mlc'))",
            check=lambda c: c.model_ref is None or (c.model is not None and c.strategy == "mlc"),
            message="spec.controller.modelRef needs spec.controller.model (the congestion "
            "control it was identified for) and strategy mlc",
            violation={"modelRef": {"configMapName": "my-model"}, "model": None},
            field_path=".modelRef",
        ),
    )


TolerationOperator = Literal["Exists", "Equal"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(ApiModel):
    """A toleration (core/v1 Toleration) for a node taint."""

    key: str | None = Field(
        default=None, min_length=1, max_length=317, description="The taint key to tolerate."
    )
    operator: TolerationOperator = Field(default="Equal", description="Exists or Equal.")
    value: str | None = Field(
        default=None, max_length=63, description="The taint value (operator Equal)."
    )
    effect: TaintEffect | None = Field(
        default=None,
        description="NoSchedule, PreferNoSchedule or NoExecute; all effects when empty.",
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="How long a NoExecute taint is tolerated before eviction.",
    )

    RULES = (
        Rule(
            cel="has(self.key) || (has(self.operator) && self.operator == 'Exists')",
            check=lambda t: t.key is not None or t.operator == "Exists",
            message="a toleration without a key must use operator Exists (it tolerates "
            "every taint: list the taints instead)",
            violation={"key": None, "operator": "Equal"},
            field_path=".key",
        ),
    )


class TcActuator(ApiModel):
    """Linux tc token bucket on a node's interface, set by a pod on that node's network."""

    node_name: ObjectName = Field(description="Node that owns the interface.")
    interface: Interface = Field(
        description="Interface whose egress tbf qdisc carries the rate, e.g. eth1."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_TOLERATIONS,
        description="Taints of nodeName the shaping pod tolerates, exactly as listed (e.g. a "
        "dedicated border node's). None by default: a pod that tolerated everything would "
        "also land beside the control plane.",
    )


class SimActuator(ApiModel):
    """Rate changes sent to the simulator behind `scidmz switch --source sim`."""

    address: HostPort | None = Field(
        default=None, description="Simulator's control endpoint; default: switch.address."
    )


class ActuatorSpec(ApiModel):
    """Where u(t), the campus rate limit, is applied."""

    type: ActuatorType = Field(
        default="dryRun",
        description="tc: a tbf qdisc on a node (the controller runs there, host networking, "
        "NET_ADMIN); sim: the embedded simulator; dryRun: compute and export only.",
    )
    tc: TcActuator | None = Field(
        default=None, description="Required when type is tc: the node and its interface."
    )
    sim: SimActuator | None = Field(default=None, description="Options when type is sim.")

    RULES = (tc_settings_required("actuator"),)


class DtnShaperSpec(ApiModel):
    """A cap on a DTN host's sending rate: a second actuator for DTNs that ignore campus
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
        "R* - R_DTN); default: the shipped tuned gains for the policy's congestion control.",
    )
    failsafe_rate: DtnFailsafeRate = Field(
        default="target",
        description="The cap applied when telemetry goes stale or the controller stops: "
        "'target' (the admitted policy's R*) or a rate such as 600Mbps. The shaper agent "
        "also applies it on its own when the controller goes quiet.",
    )
    min_rate: Rate | None = Field(
        default=None,
        description="The lowest cap the controller may set and the shaper agent applies: "
        "a lower request is raised to it. Default: half the admitted policy's target (a cap "
        "further below the target never helps to hold it, and a bug or a compromised "
        "controller must not be able to stall the host's transfers).",
    )

    RULES = (tc_settings_required("shaper"),)


class DtnHost(ApiModel):
    """A Data Transfer Node whose transfers tenants may ask a rate for."""

    name: DnsLabel = Field(description="The host's name on this link; policies ask for it.")
    receiver_prefix: CidrPrefix = Field(
        description="Destination prefix of the receiving DTN (DTN-r) for this host's "
        "transfers, matched by longest prefix on the tapped traffic (paper algorithm 2).",
    )
    allowed_namespaces: NamespaceSelection | None = Field(
        default=None,
        description="Namespaces that may ask for this host; default: those the link's "
        "tenants.namespaces allows. A namespace needs both.",
    )
    shaper: DtnShaperSpec | None = Field(
        default=None,
        description="Optional cap on this host's sending rate around its policy's R*; the "
        "controller then runs a second anti-windup filter. Needed to hold a BBR DTN.",
    )


class FailsafeSpec(ApiModel):
    """What to do when telemetry goes stale, and on shutdown."""

    stale_after: StaleAfter | None = Field(
        default=None,
        description="Apply the fail-safe rate when no sample arrives for this long: at least "
        "sampleTime, at most 60m; default 3 sample times.",
    )
    rate: FailsafeRate = Field(
        default="trivial",
        description="Fail-safe campus rate: 'trivial' (capacity minus the admitted targets) "
        "or a rate such as 400Mbps.",
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


class TenantsSpec(ApiModel):
    """Who may attach DTNTransferPolicies to the link, and how much of it they may ask for."""

    namespaces: NamespaceSelection = Field(
        default_factory=NamespaceSelection,
        description="Namespaces whose policies may attach (the Gateway API's "
        "allowedRoutes.namespaces). Policies from other namespaces are refused by the API "
        "server (the chart's ValidatingAdmissionPolicy) and, should one get stored, by the "
        "operator (Accepted=False, NamespaceNotAllowed).",
    )
    max_target_percent: int = Field(
        default=90,
        ge=1,
        le=99,
        description="The share of capacity, in percent, that the admitted policies' targets "
        "may take together; the rest is the campus's. Policies are admitted in the order "
        "they ask (status.admission) until it is used up; lowered, the policies admitted "
        "last give way first.",
    )


_CAPACITY = cel_rate_bps("self.capacity")


def _present(path: str) -> str:
    """CEL: every part of ``path`` below the spec is set (``has(self.a) && has(self.a.b)``)."""
    parts = path.split(".")
    return " && ".join(f"has(self.{'.'.join(parts[: k + 1])})" for k in range(len(parts)))


def _value_at(spec: Any, path: str) -> Any:
    """The parsed value at a camelCase ``path`` of the spec (None when a part is absent)."""
    node = spec
    for part in path.split("."):
        node = getattr(node, to_snake(part), None)
        if node is None:
            return None
    return node


def _bps(rate: str | None) -> float:
    return parse_rate(rate) if rate is not None else 0.0


def _within_capacity(path: str, keyword: str | None = None, violation: str = "2Gbps") -> Rule:
    """``path`` (a rate, or ``keyword``) must not exceed capacity; absent passes."""
    present = _present(path)
    exempt = f" || self.{path} == '{keyword}'" if keyword else ""

    def check(spec: Any) -> bool:
        value = _value_at(spec, path)
        if value is None or value == keyword:
            return True
        return parse_rate(value) <= parse_rate(spec.capacity)

    return Rule(
        cel=f"!({present}){exempt} || {cel_rate_bps(f'self.{path}')} <= {_CAPACITY}",
        check=check,
        message=f"{path} must not exceed capacity",
        violation={path: violation},
        field_path=f".{path}",
    )


_LIMITS = "self.controller.limits"


def _has_limits(field: str) -> str:
    return _present(f"controller.limits.{field}")


def _hosts_overlap(spec: Any) -> bool:
    hosts = spec.dtn_hosts
    return any(
        a.name != b.name and prefixes_conflict(a.receiver_prefix, b.receiver_prefix)
        for a in hosts
        for b in hosts
    )


def _shaper_failsafe_within(spec: Any) -> bool:
    capacity = parse_rate(spec.capacity)
    return all(
        h.shaper is None
        or h.shaper.failsafe_rate == "target"
        or parse_rate(h.shaper.failsafe_rate) <= capacity
        for h in spec.dtn_hosts
    )


def _shaper_floor_within(spec: Any) -> bool:
    capacity = parse_rate(spec.capacity)
    return all(
        h.shaper is None or h.shaper.min_rate is None or parse_rate(h.shaper.min_rate) <= capacity
        for h in spec.dtn_hosts
    )


_CIDRS = "isCIDR(h.receiverPrefix)"


def _buffer_tc_beside_the_campus_shaper(spec: BorderLinkSpec) -> bool:
    buffer = spec.buffer
    if buffer is None or buffer.actuator.type != "tc" or buffer.actuator.tc is None:
        return True
    campus = spec.actuator.tc
    return (
        spec.actuator.type == "tc"
        and campus is not None
        and campus.node_name == buffer.actuator.tc.node_name
        and campus.interface != buffer.actuator.tc.interface
    )


_BUFFER_TC = "has(self.buffer) && has(self.buffer.actuator) && has(self.buffer.actuator.type)"
BUFFER_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"!({_BUFFER_TC} && self.buffer.actuator.type == 'tc' && "
        "has(self.buffer.actuator.tc)) || (has(self.actuator) && has(self.actuator.type) && "
        "self.actuator.type == 'tc' && has(self.actuator.tc) && "
        "self.actuator.tc.nodeName == self.buffer.actuator.tc.nodeName && "
        "self.actuator.tc.interface != self.buffer.actuator.tc.interface)",
        check=_buffer_tc_beside_the_campus_shaper,
        message="buffer.actuator.tc needs actuator.type tc on the same node (the controller "
        "runs there and sets both) and another interface than the campus shaper's",
        violation={
            "controller.strategy": "pi",
            "actuator": {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}},
            "buffer": {
                "actuator": {"type": "tc", "tc": {"nodeName": "edge-2", "interface": "eth2"}}
            },
        },
        field_path=".buffer.actuator.tc",
    ),
    Rule(
        cel="!has(self.buffer) || !has(self.controller) || !has(self.controller.strategy) || "
        "self.controller.strategy != 'mlc'",
        check=lambda spec: spec.buffer is None or spec.controller.strategy != "mlc",
        message="buffer needs controller.strategy pi or trivial: the MLC's inverse model was "
        "identified at one buffer, and other buffers take its inputs out of range",
        violation={"controller.strategy": "mlc", "buffer": {}},
        field_path=".buffer",
    ),
)


LINK_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"{_CAPACITY} > 0.0",
        check=lambda spec: parse_rate(spec.capacity) > 0,
        message="capacity must be greater than 0",
        violation={"capacity": "0bps"},
        field_path=".capacity",
    ),
    Rule(
        cel=f"{_CAPACITY} <= {MAX_RATE_BPS:.1e}",
        check=lambda spec: parse_rate(spec.capacity) <= MAX_RATE_BPS,
        message="capacity must be at most 10Tbps",
        violation={"capacity": "10.5Tbps"},
        field_path=".capacity",
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
            or 0 < parse_rate(spec.controller.limits.max_step) <= parse_rate(spec.capacity)
        ),
        message="controller.limits.maxStep must be greater than 0 and at most capacity",
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
    Rule(
        cel=f"!isCIDR(self.campus.remotePrefix) || self.dtnHosts.all(h, !{_CIDRS} || "
        "!cidr(h.receiverPrefix).containsCIDR(cidr(self.campus.remotePrefix)))",
        check=lambda spec: (
            not any(
                prefixes_conflict(h.receiver_prefix, spec.campus.remote_prefix)
                for h in spec.dtn_hosts
            )
        ),
        message=PREFIX_OVERLAP_MESSAGE,
        violation={
            "dtnHosts": [{"name": "dtn-1", "receiverPrefix": "203.0.113.0/24"}],
            "campus.remotePrefix": "203.0.113.0/25",
        },
        field_path=".dtnHosts",
    ),
    Rule(
        cel=f"self.dtnHosts.all(a, self.dtnHosts.all(h, a.name == h.name || !{_CIDRS} || "
        "!isCIDR(a.receiverPrefix) || "
        "!cidr(a.receiverPrefix).containsCIDR(cidr(h.receiverPrefix))))",
        check=lambda spec: not _hosts_overlap(spec),
        message="dtnHosts' receiver prefixes must not overlap: the longer prefix would count "
        "the other host's transfers as its own",
        violation={
            "dtnHosts": [
                {"name": "dtn-1", "receiverPrefix": "192.0.2.0/24"},
                {"name": "dtn-2", "receiverPrefix": "192.0.2.10/32"},
            ]
        },
        field_path=".dtnHosts",
    ),
    Rule(
        cel="self.dtnHosts.all(h, !has(h.shaper) || !has(h.shaper.failsafeRate) || "
        f"h.shaper.failsafeRate == 'target' || "
        f"{cel_rate_bps('h.shaper.failsafeRate')} <= {_CAPACITY})",
        check=_shaper_failsafe_within,
        message="dtnHosts[].shaper.failsafeRate must not exceed capacity",
        violation={
            "dtnHosts": [
                {
                    "name": "dtn-1",
                    "receiverPrefix": "203.0.113.10/32",
                    "shaper": {"type": "dryRun", "failsafeRate": "2Gbps"},
                }
            ]
        },
        field_path=".dtnHosts",
    ),
    Rule(
        cel="self.dtnHosts.all(h, !has(h.shaper) || !has(h.shaper.minRate) || "
        f"{cel_rate_bps('h.shaper.minRate')} <= {_CAPACITY})",
        check=_shaper_floor_within,
        message="dtnHosts[].shaper.minRate must not exceed capacity",
        violation={
            "dtnHosts": [
                {
                    "name": "dtn-1",
                    "receiverPrefix": "203.0.113.10/32",
                    "shaper": {"type": "dryRun", "minRate": "2Gbps"},
                }
            ]
        },
        field_path=".dtnHosts",
    ),
)
"""The spec's cross-field rules (at ``spec``; CEL paths are relative to it)."""


class CampusSpec(ApiModel):
    """The general-purpose campus traffic that shares the link with the DTNs."""

    remote_prefix: CidrPrefix = Field(
        description="Destination prefix of the remote network; packets to it that are not "
        "an admitted DTN host's are the campus class (paper algorithm 2). May contain the "
        "DTN hosts' prefixes.",
    )


DtnHosts = Annotated[
    list[DtnHost],
    Field(
        min_length=1,
        max_length=MAX_DTN_HOSTS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    ),
]


class BorderLinkSpec(ApiModel):
    """A shared border link and everything privileged about it."""

    RULES = (*LINK_RULES, *BUFFER_RULES)

    capacity: Rate = Field(
        description="B_max, the capacity of the shared bottleneck link (e.g. 1Gbps).",
    )
    sample_time: SampleTime = Field(
        default="1s",
        description="T, the control and telemetry sample time, 100ms to 60s (paper: 1s).",
    )
    campus: CampusSpec = Field(description="The campus traffic sharing the link.")
    dtn_hosts: DtnHosts = Field(
        description="The DTN hosts on this link that policies may ask a rate for (1 to 64, "
        "names unique, prefixes not overlapping)."
    )
    switch: SwitchSpec = Field(description="The P4 switch that taps the border router.")
    controller: ControllerSpec = Field(
        default_factory=ControllerSpec, description="The control law computing u(t)."
    )
    actuator: ActuatorSpec = Field(
        default_factory=ActuatorSpec, description="Where u(t), the campus rate limit, is applied."
    )
    failsafe: FailsafeSpec = Field(
        default_factory=FailsafeSpec, description="Behaviour on stale telemetry and shutdown."
    )
    telemetry: TelemetrySpec = Field(
        default_factory=TelemetrySpec,
        description="Estimator settings of the collector (RTT smoothing, active-flow rule).",
    )
    tenants: TenantsSpec = Field(
        default_factory=TenantsSpec,
        description="Which namespaces may attach policies, and the share of the link their "
        "targets may take.",
    )
    paused: bool = Field(
        default=False,
        description="Stop the loop (the controller applies the fail-safe rate first), keeping "
        "its configuration and the admitted policies.",
    )
    buffer: BufferSpec | None = Field(
        default=None,
        description="Size the border router's buffer while the link runs (P4BS buffer "
        "sizing; needs controller.strategy pi or trivial). Absent: the buffer is left alone.",
    )

    def dtn_host(self, name: str) -> DtnHost | None:
        return next((h for h in self.dtn_hosts if h.name == name), None)


class DtnHostState(ApiModel):
    """One DTN host's own class in the latest sample, in API units."""

    model_config = ConfigDict(extra="ignore")

    host: str = Field(description="The DTN host (spec.dtnHosts[].name).")
    rate: str | None = Field(default=None, description="Its rate at the tap, e.g. 298.7Mbps.")
    rtt: str | None = Field(default=None, description="Its round-trip time.")
    queuing_delay: str | None = Field(default=None, description="Its last BR1 sojourn.")
    target_rate: str | None = Field(
        default=None, description="The target the running controller holds for its policy."
    )
    enforced_by: Literal["DtnCap", "LinkSum"] | None = Field(
        default=None,
        description="How its rate is held: DtnCap, by its shaper's own cap loop; LinkSum, "
        "only through the campus loop on the targets' sum (its host has no shaper).",
    )
    rate_limit: str | None = Field(
        default=None, description="The cap in force on the host (DtnCap), e.g. 312.4Mbps."
    )


class LinkStateStatus(ApiModel):
    """The latest network state y(t) on the link and the control input u(t), in API units."""

    model_config = ConfigDict(extra="ignore")

    dtn_rate: str | None = Field(
        default=None, description="R_DTN, e.g. 598.2Mbps: the DTN hosts' rates summed."
    )
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
        description="R*, the admitted targets' sum the running controller holds (taken "
        "without a restart once it has read its updated ConfigMap).",
    )
    campus_share: str | None = Field(
        default=None,
        description="What the plan leaves to the campus: capacity minus R* (the desired "
        "campus rate of paper table 3). campusRateLimit is what the loop applies to reach "
        "the targets.",
    )
    sampled_at: str | None = Field(default=None, description="Sample time (RFC 3339).")
    failsafe_active: bool | None = Field(
        default=None,
        description="True while the controller holds the fail-safe rate instead of "
        "controlling (samples stale or implausible); the link is then Degraded=True "
        "FailSafe and its policies Ready=False FailSafe.",
    )
    dtn_hosts: list[DtnHostState] | None = Field(
        default=None,
        max_length=MAX_DTN_HOSTS,
        description="The link's plan and each DTN host's own figures: its target, how its "
        "rate is held and its cap, and its rate, RTT and sojourn as its own class at the tap.",
    )


class TrackingStatus(ApiModel):
    """How well the DTN rate follows the target (paper eq. 3)."""

    model_config = ConfigDict(extra="ignore")

    mrae: float | None = Field(default=None, description="Mean relative absolute error.")
    window: str | None = Field(default=None, description="Window the MRAE covers, e.g. 120s.")


class BufferStatus(ApiModel):
    """The buffer search of ``spec.buffer`` (P4BS), as the controller reports it."""

    model_config = ConfigDict(extra="ignore")

    in_force: str | None = Field(default=None, description="The buffer in force, e.g. 28.5ms.")
    phase: str | None = Field(
        default=None,
        description="idle (the link is not full: nothing searched), expand, search, or hold "
        "(on the best buffer found, watching for a change).",
    )
    best_buffer: str | None = Field(default=None, description="The best buffer tried.")
    best_objective: float | None = Field(
        default=None, description="Its objective f = -[w1 p/lossScale + w2 d/maxQueueDelay]."
    )
    searches: int | None = Field(default=None, description="Searches since the start.")
    loss_signal: str | None = Field(
        default=None, description="The loss the search reads (spec.buffer.lossSignal)."
    )
    message: str | None = Field(
        default=None,
        description="Why the search holds spec.buffer.default: no buffer tried kept every "
        "DTN at its target, or its loss signal is not measured.",
    )
    degraded: bool | None = Field(
        default=None,
        description="True while the search is stopped for want of its loss signal (the "
        "link is then Degraded, reason BufferLossSignal).",
    )


class AdmittedPolicy(ApiModel):
    """A policy the link holds a rate for."""

    model_config = ConfigDict(extra="ignore")

    namespace: str = Field(description="The policy's namespace.")
    name: str = Field(description="The policy's name.")
    dtn_host: str = Field(description="The DTN host it asked for.")
    target_rate: str = Field(description="Its target rate.")


class PoliciesStatus(ApiModel):
    """The policies that reference the link, and what they were granted."""

    model_config = ConfigDict(extra="ignore")

    attached: int = Field(default=0, description="Policies that name this link.")
    admitted: int = Field(default=0, description="Of those, admitted.")
    admitted_target: str = Field(default="0bps", description="The sum of admitted targets.")
    items: list[AdmittedPolicy] = Field(
        default_factory=list,
        max_length=MAX_DTN_HOSTS,
        description="The admitted policies (one per DTN host at most).",
    )


class HostPortAllocation(ApiModel):
    """A port on a node's network that one of the link's host-network pods listens on."""

    model_config = ConfigDict(extra="ignore")

    workload: str = Field(description="controller, or dtn-shaper-<host>.")
    node: str = Field(description="The node.")
    port: int = Field(description="The first of the workload's ports (HTTP; gRPC is port+1).")


class HeldDtnHost(ApiModel):
    """A DTN host whose shaper the link keeps after its policy went (``dtnShaperGrace``):
    a policy that comes and goes neither creates nor deletes a privileged workload each
    time, and meanwhile the host's cap is the administrators' fail-safe."""

    model_config = ConfigDict(extra="ignore")

    host: str = Field(description="The DTN host.")
    since: str = Field(description="When its last admitted policy went (RFC 3339).")
    failsafe_rate: str = Field(
        description="The cap its shaper agent holds meanwhile: the host's shaper.failsafeRate, "
        "or with 'target' the target last admitted there (never a refused policy's)."
    )


class ShaperRestore(ApiModel):
    """A DTN host's interface to give back its original root qdisc, once its shaper is
    gone for good: the operator runs ``scidmz shaper --restore`` there (a Job)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    node: str = Field(description="The DTN host's node.")
    interface: str = Field(description="Its interface the shaper's tbf was on.")
    tolerations: list[Toleration] = Field(
        default_factory=list, description="The taints of the node the Job tolerates."
    )
    host: str = Field(
        default="",
        max_length=63,
        description="The DTN host (empty: a link's only shaper, as recorded before shapers "
        "were per host).",
    )


class BorderLinkStatus(ApiModel):
    """Observed state, written by the operator."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation the workloads were last applied for."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Reconciled, TelemetryReady, ControllerReady, Degraded.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    state: LinkStateStatus | None = Field(default=None, description="Latest y(t) and u(t).")
    tracking: TrackingStatus | None = Field(default=None, description="Tracking quality.")
    buffer: BufferStatus | None = Field(
        default=None, description="The buffer search, with spec.buffer."
    )
    policies: PoliciesStatus | None = Field(
        default=None, description="Attached and admitted policies."
    )
    host_ports: list[HostPortAllocation] = Field(
        default_factory=list,
        description="Ports the link's host-network pods use, per node; kept for the link's "
        "life so that two links on one node never collide.",
    )
    pending_restores: list[ShaperRestore] = Field(
        default_factory=list,
        max_length=MAX_DTN_HOSTS,
        description="Removed DTN shapers whose interfaces are being given back their "
        "original root qdisc (a Job <link>-dtn-shaper-<host>-restore on each node).",
    )
    pending_restore: ShaperRestore | None = Field(
        default=None,
        description="Deprecated: the one restore an older operator recorded; read once "
        "and moved to pendingRestores.",
    )
    held_dtn_hosts: list[HeldDtnHost] = Field(
        default_factory=list,
        max_length=MAX_DTN_HOSTS,
        description="DTN hosts whose shaper is kept, at its fail-safe cap, after their "
        "policy went; removed (and the host's interface restored) after the operator's "
        "dtnShaperGraceSeconds.",
    )


def parse_link_spec(raw: dict[str, Any]) -> BorderLinkSpec:
    """Validate a spec dict from the API (camelCase) into the typed model."""
    return BorderLinkSpec.model_validate(raw)
