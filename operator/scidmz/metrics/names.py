"""Every Prometheus metric name scidmz exports, in one place (shared/DESIGN.md).

Base units are bytes and seconds; labels are ``link`` (the BorderLink) and, where a value
belongs to a traffic class, ``class`` (``dtn`` or ``campus``); per-policy series add
``namespace``, ``policy`` and ``dtn_host``. Never a 5-tuple in a label.
Dashboards and alerts use only these names; a test keeps them in step.
"""

from __future__ import annotations

PREFIX = "scidmz_"

# ---- the network state y(t) (collector) -------------------------------------------------
RATE = "scidmz_rate_bytes_per_second"
RTT = "scidmz_rtt_seconds"
QUEUING_DELAY = "scidmz_queuing_delay_seconds"
ACTIVE_FLOWS = "scidmz_active_flows"
CLASS_BYTES = "scidmz_class_bytes_total"
STATE_VALID = "scidmz_state_valid"
SAMPLE_AGE = "scidmz_sample_age_seconds"
SAMPLE_AGE_HELP = (
    "Seconds since the latest good sample, at scrape time (the collector: since it measured "
    "one; the controller: since it received one)."
)
SAMPLE_STALE = "scidmz_sample_stale"

# ---- each DTN host's own class (collector; several DTNs on one link) ----------------------
DTN_HOST_RATE = "scidmz_dtn_host_rate_bytes_per_second"
DTN_HOST_RTT = "scidmz_dtn_host_rtt_seconds"
DTN_HOST_QUEUING_DELAY = "scidmz_dtn_host_queuing_delay_seconds"
DTN_HOST_MEAN_QUEUING_DELAY = "scidmz_dtn_host_mean_queuing_delay_seconds"
DTN_HOST_RETRANSMISSION_RATIO = "scidmz_dtn_host_retransmission_ratio"
DTN_HOST_ACTIVE_FLOWS = "scidmz_dtn_host_active_flows"

# ---- beyond y(t): loss telemetry (collector; P4BS, seed 003) ------------------------------
RETRANSMISSION_RATIO = "scidmz_retransmission_ratio"
BOTTLENECK_LOSS_RATIO = "scidmz_bottleneck_loss_ratio"
MEAN_QUEUING_DELAY = "scidmz_mean_queuing_delay_seconds"
LONG_FLOWS = "scidmz_long_flows"

# ---- the buffer search (controller, spec.buffer) ------------------------------------------
BUFFER = "scidmz_buffer_seconds"
BUFFER_PHASE = "scidmz_buffer_search_phase"
BUFFER_OBJECTIVE = "scidmz_buffer_search_best_objective"
BUFFER_TRIALS = "scidmz_buffer_trials_total"
BUFFER_ERRORS = "scidmz_buffer_actuator_errors_total"
BUFFER_STOPPED = "scidmz_buffer_search_stopped"

# ---- the collector's own health -----------------------------------------------------------
POLL_DURATION = "scidmz_collector_poll_seconds"
P4RUNTIME_ERRORS = "scidmz_p4runtime_errors_total"
DIGESTS_RECEIVED = "scidmz_digests_received_total"
SAMPLES_PUBLISHED = "scidmz_samples_total"
SWITCH_CONNECTED = "scidmz_switch_connected"
SWITCH_PRIMARY = "scidmz_switch_primary"
SWITCH_RECONNECTS = "scidmz_switch_reconnects_total"
LOOP_OVERRUNS = "scidmz_loop_overruns_total"
STREAM_SUBSCRIBERS = "scidmz_stream_subscribers"
STREAM_DROPPED = "scidmz_stream_dropped_samples_total"

# ---- the software tap (scidmz target --source packets) ---------------------------------------
TAP_FRAMES = "scidmz_tap_frames_total"
"""Frames the tap read from a mirror interface (label ``interface``)."""
TAP_DROPS = "scidmz_tap_kernel_drops_total"
"""Frames the kernel dropped before the tap read them (its socket buffer was full): telemetry
the tap missed, so its rates read low."""

# ---- control (controller) -----------------------------------------------------------------
TARGET_RATE = "scidmz_target_rate_bytes_per_second"
POLICY_TARGET_RATE = "scidmz_policy_target_rate_bytes_per_second"
CAPACITY = "scidmz_bottleneck_capacity_bytes_per_second"
CAMPUS_RATE_LIMIT = "scidmz_campus_rate_limit_bytes_per_second"
DTN_RATE_LIMIT = "scidmz_dtn_rate_limit_bytes_per_second"
MODEL_OUTPUT = "scidmz_model_output_bytes_per_second"
TRACKING_MRAE = "scidmz_tracking_mrae"
FAILSAFE_ACTIVE = "scidmz_failsafe_active"
FAILSAFE_RESTORE_FAILED = "scidmz_failsafe_restore_failed"
"""1 while a stopping controller cannot restore its fail-safe rates (it then exits 1)."""
CONTROLLER_PINNED = "scidmz_controller_pinned"
"""1 while u(t) has been held at a limit by the integral for longer than pinnedAfter."""
CONTROL_LOOP = "scidmz_control_loop_seconds"

BUILD_INFO = "scidmz_build_info"
CONTROL_ERROR = "scidmz_control_error_bytes_per_second"
CONTROL_PROPORTIONAL = "scidmz_control_proportional_bytes_per_second"
CONTROL_INTEGRAL = "scidmz_control_integral_bytes_per_second"
CONTROL_WINDUP = "scidmz_control_windup_bytes_per_second"
TRACKING_IAE = "scidmz_tracking_iae_bytes"
INFERENCE = "scidmz_model_inference_seconds"
ACTUATOR_ERRORS = "scidmz_actuator_errors_total"
CONTROL_SAMPLES = "scidmz_control_samples_total"
CONFIG_RELOADS = "scidmz_controller_config_reloads_total"
"""A changed config file read by the controller; result = applied | restart_needed | rejected."""

# ---- the operator ---------------------------------------------------------------------------
OPERATOR_RECONCILES = "scidmz_operator_reconciles_total"
OPERATOR_RECONCILE_ERRORS = "scidmz_operator_reconcile_errors_total"
