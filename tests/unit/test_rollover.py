"""The operator's CA rolled over with an overlap (scidmz.auth.rollover, and the leaves
renewed by scidmz.k8s.certificates' rule), as a pure timeline: a CA valid for minutes,
stepped a second at a time through two rollovers and past the first CA's expiry, with every
workload's certificate checked against every other workload's trust store as the kubelet
would have refreshed it a few seconds late. Nobody ever presents a certificate its peer
cannot verify, and each certificate is reissued once per renewal, not once per pass."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from scidmz.auth.pki import (
    KeyPair,
    PkiError,
    Validity,
    issue_certificate,
    new_certificate_authority,
    renewal_due,
)
from scidmz.auth.rollover import Authorities, plan_rollover

START = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.UTC)
VALIDITY = Validity(
    ca=dt.timedelta(seconds=120),
    ca_renew_before=dt.timedelta(seconds=60),
    ca_overlap=dt.timedelta(seconds=15),
    leaf=dt.timedelta(seconds=30),
)
PROPAGATION_S = 5
"""How late a workload sees a Secret the operator wrote (the kubelet's refresh)."""
WORKLOADS = ("collector", "controller", "dtn-shaper")


def _new_ca(now: dt.datetime) -> KeyPair:
    return new_certificate_authority("test CA", now, valid_for=VALIDITY.ca)


def _verifies(leaf_pem: bytes, bundle: bytes, now: dt.datetime) -> bool:
    """As a TLS peer checks: the leaf in its validity, signed by a CA of ``bundle`` that is
    in its validity."""
    leaf = x509.load_pem_x509_certificate(leaf_pem)
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        return False
    for ca in x509.load_pem_x509_certificates(bundle):
        if ca.subject != leaf.issuer or not ca.not_valid_before_utc <= now < ca.not_valid_after_utc:
            continue
        try:
            ca.public_key().verify(  # type: ignore[call-arg, union-attr]
                leaf.signature, leaf.tbs_certificate_bytes,
                ec.ECDSA(leaf.signature_hash_algorithm),  # type: ignore[arg-type]
            )  # fmt: skip
        except Exception:
            continue
        return True
    return False


def test_the_timeline_through_two_rollovers_and_an_expiry_never_breaks_a_handshake():
    authorities = Authorities(_new_ca(START))
    first_ca = x509.load_pem_x509_certificate(authorities.active.cert_pem)
    # what the operator wrote, per second: each workload's (leaf, bundle)
    written: list[dict[str, tuple[bytes, bytes]]] = []
    leaves: dict[str, KeyPair] = {}
    issued = {w: 0 for w in WORKLOADS}
    steps: list[str] = []
    duration_s = 300  # two and a half CA lifetimes
    for second in range(duration_s):
        now = START + dt.timedelta(seconds=second)
        authorities, changes = plan_rollover(authorities, now, VALIDITY, _new_ca)
        steps += changes
        for workload in WORKLOADS:
            leaf = leaves.get(workload)
            due = leaf is None or renewal_due(
                leaf.cert_pem, authorities.active.cert_pem, f"spiffe://t/{workload}", [], now
            )
            if due:
                leaves[workload] = issue_certificate(
                    authorities.active, f"spiffe://t/{workload}", now, valid_for=VALIDITY.leaf
                )
                issued[workload] += 1
        written.append({w: (leaves[w].cert_pem, authorities.bundle()) for w in WORKLOADS})
        # each workload holds what was written PROPAGATION_S ago
        seen = written[max(0, second - PROPAGATION_S)]
        for client in WORKLOADS:
            for server in WORKLOADS:
                if client == server:
                    continue
                client_leaf, client_trust = seen[client]
                server_leaf, server_trust = seen[server]
                assert _verifies(server_leaf, client_trust, now), (second, client, server)
                assert _verifies(client_leaf, server_trust, now), (second, server, client)
    assert now > first_ca.not_valid_after_utc  # the first CA expired on the way
    made = [s for s in steps if s.startswith("next CA made")]
    switched = [s for s in steps if s.startswith("the next CA now signs")]
    dropped = [s for s in steps if s.startswith("the previous CA")]
    assert len(made) >= 2 and len(switched) >= 2 and len(dropped) >= 2, steps
    # renewed at two thirds of a 30 s life, plus once per switch: no storm
    for workload, count in issued.items():
        assert count <= duration_s / 18 + len(switched) + 1, (workload, count)


def test_the_bundle_lists_every_ca_to_trust():
    active, nxt = _new_ca(START), _new_ca(START)
    old = _new_ca(START).cert_pem
    assert Authorities(active).bundle() == active.cert_pem
    bundle = x509.load_pem_x509_certificates(Authorities(active, nxt, old).bundle())
    pems = [x509.load_pem_x509_certificate(p) for p in (active.cert_pem, nxt.cert_pem, old)]
    assert bundle == pems  # the active one first


def test_an_expired_ca_is_replaced_at_once():
    """An operator down for longer than the renewal window: nothing the old CA signed
    verifies any more, so there is nothing to overlap with."""
    authorities = Authorities(_new_ca(START))
    late = START + VALIDITY.ca + dt.timedelta(seconds=1)
    after, changes = plan_rollover(authorities, late, VALIDITY, _new_ca)
    assert after.active != authorities.active and after.previous is None
    assert changes and "expired" in changes[0]


def test_nothing_changes_before_the_window_and_a_broken_ca_is_an_error():
    authorities = Authorities(_new_ca(START))
    same, changes = plan_rollover(authorities, START + dt.timedelta(seconds=30), VALIDITY, _new_ca)
    assert same == authorities and changes == []
    broken = Authorities(KeyPair(authorities.active.cert_pem, _new_ca(START).key_pem))
    with pytest.raises(PkiError, match="does not match"):
        plan_rollover(broken, START, VALIDITY, _new_ca)


def test_lifetimes_that_cannot_overlap_are_refused():
    assert VALIDITY.problems() == []
    bad = Validity(ca=dt.timedelta(seconds=60), ca_renew_before=dt.timedelta(seconds=60),
                   ca_overlap=dt.timedelta(seconds=40), leaf=dt.timedelta(0))  # fmt: skip
    problems = bad.problems()
    assert any("two overlaps" in p for p in problems)
    assert any("longer than its renewal window" in p for p in problems)
    assert any("positive time" in p for p in problems)
