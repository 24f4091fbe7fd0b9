"""Table entries on the software P4Runtime target: validation and the P4Runtime error codes."""

import ipaddress

import pytest
from finsy.proto import p4r

from scidmz.contract.pipeline import build_p4info
from scidmz.switch.entries import PipelineIndex, UpdateError, apply_update

INFO = build_p4info()
INDEX = PipelineIndex.from_p4info(INFO)
TABLE = {t.preamble.alias: t.preamble.id for t in INFO.tables}
ACTION = {a.preamble.alias: a.preamble.id for a in INFO.actions}


def _classify(prefix: str, class_id: int = 1, action: str = "set_class") -> p4r.TableEntry:
    network = ipaddress.ip_network(prefix)
    entry = p4r.TableEntry(table_id=TABLE["classify_v4"])
    match = entry.match.add(field_id=1)
    match.lpm.value = network.network_address.packed
    match.lpm.prefix_len = network.prefixlen
    entry.action.action.action_id = ACTION[action]
    entry.action.action.params.add(param_id=1, value=bytes([class_id]))
    return entry


def test_insert_modify_delete():
    entries = apply_update(INDEX, {}, "INSERT", _classify("203.0.113.10/32"))
    entries = apply_update(INDEX, entries, "INSERT", _classify("198.51.100.0/24", 2))
    assert len(entries) == 2
    entries = apply_update(INDEX, entries, "MODIFY", _classify("198.51.100.0/24", 1))
    assert len(entries) == 2
    entries = apply_update(INDEX, entries, "DELETE", _classify("203.0.113.10/32"))
    assert len(entries) == 1


@pytest.mark.parametrize(
    ("mutate", "code", "fragment"),
    [
        (lambda e: setattr(e, "table_id", 42), "NOT_FOUND", "no table with id 42"),
        (lambda e: e.match[0].lpm.__setattr__("prefix_len", 33), "INVALID_ARGUMENT", "1..32"),
        (lambda e: e.match[0].lpm.__setattr__("prefix_len", 0), "INVALID_ARGUMENT", "match-all"),
        (lambda e: e.match[0].lpm.__setattr__("prefix_len", 16), "INVALID_ARGUMENT", "beyond"),
        (lambda e: e.match[0].lpm.__setattr__("value", b"\1" * 5), "INVALID_ARGUMENT", "fit"),
        (lambda e: setattr(e.match[0], "field_id", 9), "INVALID_ARGUMENT", "no match field"),
        (lambda e: e.action.action.params[0].__setattr__("value", b"\1\0"), "INVALID_ARGUMENT",
         "class_id does not fit bit<8>"),
        (lambda e: e.action.action.params.add(param_id=2, value=b"\1"), "INVALID_ARGUMENT",
         "expected parameters"),
        (lambda e: setattr(e.action.action, "action_id", ACTION["set_tap_role"]),
         "INVALID_ARGUMENT", "not allowed here"),
    ],
)  # fmt: skip
def test_malformed_inserts_get_the_right_code(mutate, code, fragment):
    entry = _classify("198.51.100.0/24")
    mutate(entry)
    with pytest.raises(UpdateError, match=fragment) as error:
        apply_update(INDEX, {}, "INSERT", entry)
    assert error.value.code == code


def test_duplicates_and_missing_entries():
    entries = apply_update(INDEX, {}, "INSERT", _classify("198.51.100.0/24"))
    with pytest.raises(UpdateError) as error:
        apply_update(INDEX, entries, "INSERT", _classify("198.51.100.0/24", 2))
    assert error.value.code == "ALREADY_EXISTS"
    for kind in ("MODIFY", "DELETE"):
        with pytest.raises(UpdateError) as error:
            apply_update(INDEX, entries, kind, _classify("203.0.113.0/24"))
        assert error.value.code == "NOT_FOUND"


def test_keyless_settings_take_a_default_action_only():
    entry = p4r.TableEntry(table_id=TABLE["settings"], is_default_action=True)
    entry.action.action.action_id = ACTION["set_settings"]
    for param_id, value in enumerate((b"\x0a", b"\x05\xf5\xe1\x00", b"\x77", b"\x3b"), 1):
        entry.action.action.params.add(param_id=param_id, value=value)
    entries = apply_update(INDEX, {}, "MODIFY", entry)
    assert len(entries) == 1
    with pytest.raises(UpdateError, match="only modified"):
        apply_update(INDEX, {}, "INSERT", entry)
    plain = p4r.TableEntry(table_id=TABLE["settings"])
    plain.action.CopyFrom(entry.action)
    with pytest.raises(UpdateError, match="keyless"):
        apply_update(INDEX, {}, "INSERT", plain)


def test_exact_keys_are_required():
    entry = p4r.TableEntry(table_id=TABLE["tap_ports"])
    entry.action.action.action_id = ACTION["set_tap_role"]
    entry.action.action.params.add(param_id=1, value=b"\1")
    with pytest.raises(UpdateError, match=r"exact field std\.ingress_port is missing"):
        apply_update(INDEX, {}, "INSERT", entry)
    entry.match.add(field_id=1).exact.value = b"\x02\x00"  # port 512 does not fit bit<9>
    with pytest.raises(UpdateError, match="does not fit bit<9>"):
        apply_update(INDEX, {}, "INSERT", entry)
