"""Fault injection on the loop and the operator, measured: what ``bench/chaos.py`` runs
(and ``tests/telemetry/test_chaos.py`` in short form)."""
