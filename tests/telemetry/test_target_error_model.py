"""The software switch answers Writes as the P4Runtime specification asks (§12): per-update
codes in google.rpc.Status details, INVALID_ARGUMENT for unknown update types, table sizes
enforced, ROLLBACK_ON_ERROR all-or-none, DATAPLANE_ATOMIC refused, a refused update changing
nothing — over real gRPC, with the probes bench/chaos.py sends to the running loop."""

from __future__ import annotations

import asyncio

from scidmz.chaos.p4runtime_abuse import write_error_model
from scidmz.telemetry.session import SwitchSession
from tests.telemetry.harness import running_target


def test_the_write_error_model_follows_the_specification():
    async def main():
        async with running_target() as (_, address):
            primary = SwitchSession(address, 1, 10)
            assert await primary.open()
            try:
                return await asyncio.to_thread(write_error_model, address, 1, 10)
            finally:
                await primary.close()

    refusals = asyncio.run(main())
    assert len(refusals) == 6
    wrong = [f"{r.request}: expected {r.expected}, got {r.got}" for r in refusals if not r.ok]
    assert wrong == []


def test_a_write_from_someone_who_is_not_primary_changes_nothing():
    async def main():
        async with running_target() as (target, address):
            # nobody holds mastership: even the right election id may not write
            refusals = await asyncio.to_thread(write_error_model, address, 1, 10)
            return refusals, dict(target.service.store.entries)

    refusals, entries = asyncio.run(main())
    assert all("PERMISSION_DENIED" in r.got for r in refusals), refusals
    assert entries == {}
