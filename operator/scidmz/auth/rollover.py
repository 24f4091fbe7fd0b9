"""The operator's CA rolled over with an overlap, as a pure function of the CAs and the clock.

The installation's CA Secret holds up to three CAs: the *active* one, which signs; a *next*
one, made ``ca_renew_before`` before the active expires and trusted beside it for
``ca_overlap`` before it signs; and the *previous* one, trusted for another ``ca_overlap``
after the switch. Every workload's ``ca.crt`` is the bundle of all three (:meth:`bundle`):

    active A ──────────────────────────────────────────────────────┤ A expires
                        ├ next N made ├─ overlap ─┤ N signs, A previous ├─ overlap ─┤ A dropped
    trusted:   A             A + N                      N + A                  N

So a workload has N in its trust store before any certificate N signed is presented to it,
and certificates A signed stay good until every one is reissued (once: a leaf is due when
another CA than the active one signed it). ``ca_renew_before ≥ 2 · ca_overlap`` keeps A
valid throughout (``pki.Validity.problems``). An active CA already expired (an operator
down for longer than the window) is replaced at once: nothing it signed verifies any more,
so there is nothing to overlap with.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509

from scidmz.auth.pki import KeyPair, PkiError, Validity, issued_at, load_certificate_authority


@dataclass(frozen=True)
class Authorities:
    """The CAs of an installation (PEM)."""

    active: KeyPair
    next: KeyPair | None = None
    previous: bytes | None = None
    """The retired CA's certificate (its key is no longer needed)."""

    def bundle(self) -> bytes:
        """Every CA to trust, the active one first."""
        parts = [self.active.cert_pem]
        if self.next is not None:
            parts.append(self.next.cert_pem)
        if self.previous is not None:
            parts.append(self.previous)
        return b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)


def _cert(pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as error:
        raise PkiError(f"not a PEM certificate: {error}") from None


def plan_rollover(
    current: Authorities,
    now: dt.datetime,
    validity: Validity,
    new_ca: Callable[[dt.datetime], KeyPair],
) -> tuple[Authorities, list[str]]:
    """The CAs after ``now``, and what changed (empty: nothing). ``new_ca`` makes a CA
    (the only randomness)."""
    load_certificate_authority(current.active)  # raises PkiError naming what is wrong
    active, nxt, previous = current.active, current.next, current.previous
    changes: list[str] = []
    active_cert = _cert(active.cert_pem)
    if active_cert.not_valid_after_utc <= now:
        fresh = nxt if nxt is not None and _cert(nxt.cert_pem).not_valid_after_utc > now else None
        active, nxt, previous = fresh or new_ca(now), None, None
        changes.append("the active CA had expired: replaced at once, without an overlap")
        return Authorities(active, nxt, previous), changes
    if previous is not None:  # retired in an earlier call: trusted for one overlap more
        retired = _cert(previous)
        signing_since = issued_at(active_cert) + validity.ca_overlap
        if retired.not_valid_after_utc <= now or now >= signing_since + validity.ca_overlap:
            previous = None
            changes.append("the previous CA is no longer trusted")
    if nxt is None and now >= active_cert.not_valid_after_utc - validity.ca_renew_before:
        nxt = new_ca(now)
        changes.append(
            f"next CA made, trusted beside the active one (expires "
            f"{active_cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S})"
        )
    elif (
        nxt is not None
        and previous is None
        and (now >= issued_at(_cert(nxt.cert_pem)) + validity.ca_overlap)
    ):
        previous, active, nxt = active.cert_pem, nxt, None
        changes.append("the next CA now signs; the old one stays trusted for an overlap")
    return Authorities(active, nxt, previous), changes
