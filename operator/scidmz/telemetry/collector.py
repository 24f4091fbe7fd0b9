"""The telemetry collector: P4Runtime session upkeep, the sample loop, publishing.

Two tasks share one ``Collector``:

* the connection task keeps a ready session: connect, arbitrate (waiting as backup until
  promoted), check the P4Info against the contract (optionally pushing the pipeline),
  reconcile the table entries and digest configuration, seed the active-flow set from the
  ``flow_active`` register. On any transient failure it closes the session and retries
  with capped exponential backoff; it never gives up;
* the sample task runs on monotonic deadlines every T: Read the counters and registers,
  take the digests received since the last sample, ``estimate`` y(t), publish it to the
  stream, the Prometheus snapshot and the logs. Without a ready session it publishes the
  last values marked stale, so subscribers see time pass and can fail safe.

What is wrong with the configuration or the pipeline (a P4Info missing an entity, a port
the switch refuses) is not transient: ``CollectorError`` ends ``run`` with a message
naming it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from finsy.proto import p4i, p4r
from prometheus_client import CollectorRegistry

from scidmz.api.runtime import ConfigError
from scidmz.auth.identity import controller_only
from scidmz.auth.mtls import TlsConfigError
from scidmz.auth.switch_tls import ChannelTls, load_channel_tls
from scidmz.auth.tls_source import TlsSource
from scidmz.contract.codec import to_message
from scidmz.contract.p4runtime import canonical, entry_key
from scidmz.contract.pipeline import DTN_CLASSES, PipelineError, check_p4info, declared_dtn_classes
from scidmz.contract.state import NetworkState
from scidmz.metrics.http import Health
from scidmz.outage_log import OutageLog
from scidmz.telemetry import program
from scidmz.telemetry.estimators import FlowEvent, RttBatch
from scidmz.telemetry.exporter import SelfMetrics, Snapshot, StateExporter, StreamExporter
from scidmz.telemetry.sampling import EstimatorSettings, EstimatorState, estimate
from scidmz.telemetry.session import P4RuntimeError, SessionClosed, SwitchSession
from scidmz.telemetry.stream import TelemetryService

log = logging.getLogger(__name__)


class CollectorError(Exception):
    """Start-up cannot succeed with this configuration or pipeline; the message says why."""


@dataclass(frozen=True)
class CollectorSettings:
    link: str
    address: str
    device_id: int
    election_id: int
    sample_time_s: float
    plan: program.Plan
    estimator: EstimatorSettings
    pipeline: tuple[p4i.P4Info, bytes] | None = None
    tls: ChannelTls | None = None
    tls_dir: Path | None = None
    """Where ``tls`` was read from: read again before every reconnect, so a renewed
    certificate (kubelet updates a mounted Secret in place) is used without a restart."""
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 1.0
    """A switch back from a restart is found within ~1 s (bench/chaos.py: with 5 s, control
    resumed up to 9 s after the switch restarted); one connection attempt a second is no
    load on a switch. gRPC's own reconnect backoff is held under it
    (``contract.channels.RECONNECT_OPTIONS``)."""
    first_sample_s: float = 0.25
    """After a session gets ready, the first sample comes this soon (its rates over the
    measured interval since the set-up's counter reading), not a whole T later: control
    resumes within ~1–2 s of the switch accepting again."""
    rpc_timeout_s: float = 5.0
    link_uid: str = ""
    """The link's metadata.uid: its controller's identity names it."""
    channel_tls: TlsSource | None = None
    """This collector's own certificate, followed as it rotates: the sample stream and
    /metrics serve mutual TLS with it (None: plaintext, development only)."""


class Collector:
    def __init__(
        self,
        settings: CollectorSettings,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._tls = settings.tls
        self.registry = registry or CollectorRegistry()
        self.stream = TelemetryService(
            controller_only(settings.link, settings.link_uid)
            if settings.channel_tls is not None
            else None
        )
        self.health = Health()
        self.metrics = SelfMetrics.create(self.registry)
        self.registry.register(StateExporter(settings.link, lambda: self.snapshot, clock))
        self.registry.register(StreamExporter(self.stream, (settings.link,)))
        self.snapshot: Snapshot | None = None
        self.sequence = 0
        self._labels = (settings.link,)
        self._clock = clock
        self._wall = wall_clock
        self._state = EstimatorState()
        self._ids: program.Ids | None = None
        self._session: SwitchSession | None = None
        self._ready: SwitchSession | None = None
        self.sessions_ready = 0
        """Sessions that got ready (primary, set up): a reconnect after one backs off afresh."""
        self._rtt_batches: list[RttBatch] = []
        self._flow_events: list[FlowEvent] = []
        self._fatal: CollectorError | None = None
        self._last_good: NetworkState | None = None
        self._became_ready = asyncio.Event()
        self._outage = OutageLog(log, f"switch {settings.address}")
        self.plan = settings.plan
        """The plan the switch is (to be) programmed with; ``set_plan`` changes it live."""
        self._programmed = settings.plan
        """What the switch's entries hold: the plan, less classes its program cannot hold."""
        self.unfitted: tuple[program.DtnClass, ...] = ()
        """DTN classes of the plan beyond what the switch's program declares."""
        self._entries_lock = asyncio.Lock()
        self._declared = DTN_CLASSES

    # ---- the public face -------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set; raises ``CollectorError`` on a fatal configuration error."""
        tasks = [
            asyncio.create_task(self._keep_connected(), name="connection"),
            asyncio.create_task(self._sample_forever(), name="samples"),
        ]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({*tasks, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in (*tasks, stopper):
                task.cancel()
            await asyncio.gather(*tasks, stopper, return_exceptions=True)
            if self._session is not None:
                await self._session.close()
            self.health.set_ready(False, "stopped")

    @property
    def is_primary(self) -> bool:
        return self._ready is not None

    # ---- connection upkeep ---------------------------------------------------------------
    async def _keep_connected(self) -> None:
        s = self.settings
        delay = s.backoff_initial_s
        attempt = 0
        while True:
            if attempt:
                self.metrics.reconnects.labels(*self._labels).inc()
            attempt += 1
            session = SwitchSession(
                s.address, s.device_id, s.election_id, self._on_digest, tls=self._current_tls()
            )
            self._session = session
            served = self.sessions_ready
            try:
                await self._serve_session(session)
            except (P4RuntimeError, SessionClosed, OSError) as error:
                code = error.code.name if isinstance(error, P4RuntimeError) else "UNAVAILABLE"
                self.metrics.p4runtime_errors.labels(*self._labels, code).inc()
                self.health.set_ready(False, f"switch {s.address}: {error}")
                retry = f"retrying every {s.backoff_max_s:.1f} s at most"
                self._outage.failed(str(error), self._clock(), retry)
            finally:
                self._ready = None
                self.metrics.connected.labels(*self._labels).set(0)
                self.metrics.primary.labels(*self._labels).set(0)
                await session.close()
            if self.sessions_ready > served:
                # the session got ready, however it ended: a switch that dies after a long
                # session is retried from the short delay again, not from where the last
                # outage's back-off stopped (bench/chaos.py: 7.9 s to resume, now ~5 s)
                delay = s.backoff_initial_s
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))  # noqa: S311 (jitter)
            delay = min(delay * 2, s.backoff_max_s)

    def _current_tls(self) -> ChannelTls | None:
        s = self.settings
        if s.tls is None or s.tls_dir is None:
            return s.tls
        try:
            fresh = load_channel_tls(s.tls_dir, s.tls.server_name)
        except (ConfigError, TlsConfigError) as error:
            log.warning("%s; keeping the TLS files read before", error)
            return self._tls
        if fresh != self._tls:
            log.info("switch TLS: (re)read %s", s.tls_dir)
        self._tls = fresh
        return fresh

    async def _serve_session(self, session: SwitchSession) -> None:
        """Connect, wait for mastership, set up, and serve until the session fails or
        this collector is demoted (then wait to be promoted again)."""
        s = self.settings
        primary = await session.open(s.rpc_timeout_s)
        self.metrics.connected.labels(*self._labels).set(1)
        log.info("connected to %s as %s", s.address, "primary" if primary else "backup")
        while True:
            while not session.is_primary:
                self.health.set_ready(
                    False, f"backup: election id {s.election_id} < primary's "
                    f"{session.primary_election_id}",
                )  # fmt: skip
                session.role_changed.clear()
                await self._wait(session, session.role_changed.wait())
            self.metrics.primary.labels(*self._labels).set(1)
            await self._set_up(session)
            self._ready = session
            self.sessions_ready += 1
            self._outage.recovered(self._clock())
            self._became_ready.set()
            self.health.set_ready(True, f"primary on {s.address}")
            session.role_changed.clear()
            while session.is_primary:
                await self._wait(session, session.role_changed.wait())
                session.role_changed.clear()
            self._ready = None
            self.metrics.primary.labels(*self._labels).set(0)

    @staticmethod
    async def _wait(session: SwitchSession, awaitable: Awaitable[object]) -> None:
        """Wait for ``awaitable``, raising the session's error if it closes first."""
        waiter: asyncio.Future[object] = asyncio.ensure_future(awaitable)
        closed: asyncio.Future[object] = session.closed  # type: ignore[assignment]
        try:
            await asyncio.wait({waiter, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if session.closed.done():
            session.closed.result()  # raises why it closed

    async def _set_up(self, session: SwitchSession) -> None:
        s = self.settings
        info = await session.get_p4info(s.rpc_timeout_s)
        if s.pipeline is not None and (info is None or info != s.pipeline[0]):
            try:
                check_p4info(s.pipeline[0])
            except PipelineError as error:
                raise self._die(f"the pipeline to push does not fit: {error}") from None
            log.info("pushing the pipeline to %s", s.address)
            await session.set_pipeline(*s.pipeline)
            info = await session.get_p4info(s.rpc_timeout_s)
        if info is None:
            raise self._die(
                f"switch {s.address} has no pipeline and none is configured to push "
                "(switch.pipeline.configMapRef)"
            )
        try:
            check_p4info(info)
        except PipelineError as error:
            raise self._die(f"switch {s.address}: {error}") from None
        ids = program.Ids.from_p4info(info)
        self._ids = ids
        self._declared = declared_dtn_classes(info)
        async with self._entries_lock:
            await self._reconcile_entries(session, ids)
        # Digests from here on apply on top of the register snapshot read below: a flow
        # that starts while the register streams out is caught by one or the other.
        self._rtt_batches.clear()
        self._flow_events.clear()
        await self._configure_digests(session, ids)
        active = program.parse_active_slots(
            await session.read(program.active_slots_request(ids), s.rpc_timeout_s)
        )
        # the counters as set-up ends: the first poll measures rates from here, rather than
        # taking a reading only to compare with the next one a whole T later
        started = self._clock()
        baseline = program.parse_poll(
            await session.read(program.poll_request(ids), s.rpc_timeout_s),
            (started + self._clock()) / 2,
            ids,
            self._programmed,
        )
        self._state = replace(
            self._state,
            previous=baseline,
            active_flows=active,
            flow_started_at={flow: started for flow in active},
            flow_classes={},
        )
        log.info("set up %s: entries installed, %d active flows held", s.address, len(active))

    def _die(self, message: str) -> CollectorError:
        self._fatal = CollectorError(message)
        return self._fatal

    async def set_plan(self, plan: program.Plan) -> None:
        """Take a new plan live (a DTN host's class added or removed, as policies are
        admitted or leave): the switch's entries follow at once when a session is ready,
        else at the next set-up. The next sample reads the new classes; a class joins the
        DTN aggregate from its second read (``sampling.estimate``)."""
        if plan == self.plan:
            return
        self.plan = plan
        session, ids = self._ready, self._ids
        if session is None or ids is None:
            return
        async with self._entries_lock:
            try:
                await self._reconcile_entries(session, ids)
            except P4RuntimeError as error:
                self.metrics.p4runtime_errors.labels(*self._labels, error.code.name).inc()
                log.warning("re-programming the classes failed: %s; retrying at set-up", error)
                if error.is_transient:
                    await session.close()

    async def _reconcile_entries(self, session: SwitchSession, ids: program.Ids) -> None:
        s = self.settings
        fitted, unfitted = program.fit_plan(self.plan, self._declared)
        if unfitted and unfitted != self.unfitted:
            log.error(
                "switch %s holds %d DTN classes: not measuring DTN hosts %s",
                s.address, self._declared, ", ".join(d.host for d in unfitted),
            )  # fmt: skip
        self.unfitted = unfitted
        desired = program.desired_entries(ids, fitted)
        wanted = {entry_key(e): e for e in desired if not e.is_default_action}
        read = []
        for table_id in program.managed_tables(ids):
            entity = p4r.Entity()
            entity.table_entry.table_id = table_id
            read.append(entity)
        present = {
            entry_key(e.table_entry): e.table_entry
            for e in await session.read(read, s.rpc_timeout_s)
        }
        updates = []
        for key, entry in present.items():
            if key not in wanted:
                updates.append(_update(p4r.Update.DELETE, entry))
        for key, entry in wanted.items():
            if key not in present:
                updates.append(_update(p4r.Update.INSERT, entry))
            elif not _same_action(present[key].action, entry.action):
                updates.append(_update(p4r.Update.MODIFY, entry))
        updates += [_update(p4r.Update.MODIFY, e) for e in desired if e.is_default_action]
        try:
            await session.write(updates, s.rpc_timeout_s)
        except P4RuntimeError as error:
            if error.failures_with("INVALID_ARGUMENT") or error.failures_with("NOT_FOUND"):
                raise self._die(f"switch {s.address} refused the configuration: {error}") from None
            raise
        if fitted != self._programmed:
            log.info(
                "classes on %s: campus and %s", s.address,
                ", ".join(f"{d.host}={d.class_id}" for d in fitted.dtn_classes) or "no DTN",
            )  # fmt: skip
        self._programmed = fitted

    async def _configure_digests(self, session: SwitchSession, ids: program.Ids) -> None:
        s = self.settings
        inserts = [
            p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(digest_entry=entry))
            for entry in program.digest_entries(ids, s.plan.digest_max_timeout_ns)
        ]
        try:
            await session.write(inserts, s.rpc_timeout_s)
        except P4RuntimeError as error:
            existing = {f.index for f in error.failures_with("ALREADY_EXISTS")}
            if len(existing) != len(error.failures):
                raise
            await session.write(
                [
                    p4r.Update(type=p4r.Update.MODIFY, entity=inserts[i].entity)
                    for i in sorted(existing)
                ],
                s.rpc_timeout_s,
            )

    def _on_digest(self, digest: p4r.DigestList) -> None:
        ids = self._ids
        if ids is None:
            return
        samples, events = program.parse_digest(ids, digest, self._clock())
        if len(samples):
            self._rtt_batches.append(samples)
        self._flow_events.extend(events)
        name = ids.digest_names.get(digest.digest_id, str(digest.digest_id))
        self.metrics.digests.labels(*self._labels, name).inc(len(digest.data))

    # ---- sampling ----------------------------------------------------------------------------
    async def _sample_forever(self) -> None:
        period = self.settings.sample_time_s
        deadline = self._clock() + period
        while True:
            if self._fatal is not None:
                raise self._fatal
            try:
                await asyncio.wait_for(
                    self._became_ready.wait(), max(0.0, deadline - self._clock())
                )
            except TimeoutError:
                pass
            else:  # a session just got ready: sample soon, then on the cadence from there
                self._became_ready.clear()
                deadline = self._clock() + min(self.settings.first_sample_s, period)
                continue
            await self.sample_once()
            deadline += period
            if deadline <= self._clock():
                missed = math.floor((self._clock() - deadline) / period) + 1
                self.metrics.overruns.labels(*self._labels).inc(missed)
                deadline += missed * period

    async def sample_once(self) -> None:
        """Poll and publish one sample (stale when there is no ready session)."""
        session, ids = self._ready, self._ids
        if session is None or ids is None:
            self._publish_stale()
            return
        started = self._clock()
        try:
            async with self._entries_lock:
                plan = self._programmed
                entities = await session.read(
                    program.poll_request(ids), self.settings.rpc_timeout_s
                )
        except P4RuntimeError as error:
            self.metrics.p4runtime_errors.labels(*self._labels, error.code.name).inc()
            log.warning("poll failed: %s", error)
            if error.is_transient:
                await session.close()
            self._publish_stale()
            return
        # the switch read its counters somewhere inside the call: stamping them at the
        # call's midpoint bounds the error by half its duration, where stamping them when
        # the answer is parsed moved a sample's boundary by the whole of a late answer (a
        # loaded host: ~100 ms, one sample 10 % high and the next 10 % low)
        poll = program.parse_poll(entities, (started + self._clock()) / 2, ids, plan)
        samples = RttBatch.concat(self._rtt_batches)
        self._rtt_batches = []
        events, self._flow_events = self._flow_events, []
        self._state, state = estimate(self._state, poll, samples, events, self.settings.estimator)
        interval = state.interval_s
        self._last_good = state
        counters = (sum(c.bytes for c in poll.dtns.values()), poll.campus.bytes)
        # stamped on the wall clock where the counters were read, not where published
        read_wall_s = self._wall() - (self._clock() - poll.at_s)
        self._publish(state, interval, stale=False, counters=counters, wall_s=read_wall_s)
        self.metrics.poll_seconds.labels(*self._labels).observe(self._clock() - started)

    def _publish_stale(self) -> None:
        if self._last_good is None:
            return
        snap = self.snapshot
        counters = (0, 0) if snap is None else (snap.dtn_bytes, snap.campus_bytes)
        self._publish(self._last_good, math.nan, stale=True, counters=counters)

    def _publish(
        self,
        state: NetworkState,
        interval_s: float,
        stale: bool,
        counters: tuple[int, int],
        wall_s: float | None = None,
    ) -> None:
        self.sequence += 1
        self.snapshot = Snapshot(state, stale, counters[0], counters[1], self.sequence, interval_s)
        wall = self._wall() if wall_s is None else wall_s
        message = to_message(state, self.sequence, wall, interval_s, stale, _policy(self.settings))
        self.stream.publish(message)
        self.metrics.samples.labels(*self._labels, "true" if stale else "false").inc()


def _policy(settings: CollectorSettings) -> str:
    return settings.link


def _same_action(a: p4r.TableAction, b: p4r.TableAction) -> bool:
    def params(action: p4r.TableAction) -> tuple[object, ...]:
        return tuple(sorted((p.param_id, canonical(p.value)) for p in action.action.params))

    return a.action.action_id == b.action.action_id and params(a) == params(b)


def _update(kind: int, entry: p4r.TableEntry) -> p4r.Update:
    update = p4r.Update(type=kind)  # type: ignore[arg-type]
    update.entity.table_entry.CopyFrom(entry)
    return update
