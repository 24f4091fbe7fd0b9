"""What the scidmz.io API's two resources share: the group, the string types with their
rules (rates, durations, prefixes, addresses), the base model and status conditions.

Every rule beyond the schema's types, bounds and patterns is a
:class:`scidmz.api.rules.Rule`: its CEL goes into the CRD's ``x-kubernetes-validations``
(the API server rejects bad input before the operator sees it), and its Python twin is the
check run on objects read from the API or from files.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from scidmz.api.rules import Checked, Rule, RuledModel
from scidmz.api.units import (
    DURATION_PATTERN,
    RATE_MAX_LENGTH,
    RATE_PATTERN,
    parse_duration,
)

GROUP = "scidmz.io"
VERSION = "v1alpha1"

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
    "dtnHosts[].receiverPrefix and campus.remotePrefix overlap: the remote prefix must not "
    "equal or lie inside a DTN-r prefix (a DTN-r prefix may lie inside the remote prefix; "
    "the longer prefix wins)"
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


def duration_rule(low: str, high: str, low_open: bool = False) -> Rule:
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
SampleTime = Annotated[Duration, Checked(duration_rule("100ms", "60s"))]
TelemetryDuration = Annotated[Duration, Checked(duration_rule("0s", "60m", low_open=True))]
DigestHold = Annotated[Duration, Checked(duration_rule("1ms", "30s"))]
StaleAfter = Annotated[Duration, Checked(duration_rule("0s", "60m", low_open=True))]
DesiredRtt = Annotated[Duration, Checked(duration_rule("0s", "60s", low_open=True))]
PinnedAfter = Annotated[Duration, Checked(duration_rule("1s", "60m"))]
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


def tc_settings_required(path: str) -> Rule:
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


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str = Field(description="The condition's type, e.g. Accepted or Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase machine-readable reason.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int = Field(
        default=0, description="metadata.generation this condition was computed for."
    )


DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
"""A DNS-1123 label: a namespace's name, a DTN host's name on its link."""
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
"""A DNS-1123 subdomain: the name of most Kubernetes objects."""
Interface = Annotated[str, Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:-]+$")]
"""A Linux interface name (IFNAMSIZ: 15 characters)."""
ConfigMapKey = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
"""A key of a ConfigMap's data or binaryData: also the file's name where it is mounted."""
