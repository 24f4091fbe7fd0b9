"""Drives `scidmz target` with p4runtime-shell (run by its own venv: it pins protobuf < 3.21).

    python p4rt_shell_client.py HOST:PORT ELECTION_LOW [HOLD_S]

With HOLD_S it only wins arbitration, prints {"held": ...} and keeps the session that long
(another client is then a backup).

Prints one JSON object: what each step returned, with P4Runtime error codes by name. Runs
outside the project's environment, so it imports nothing from scidmz.
"""

import json
import os
import sys
import time

import grpc
import p4runtime_sh.shell as sh
from google.rpc import code_pb2
from p4runtime_sh.p4runtime import P4RuntimeException, P4RuntimeWriteException

TAP = "ScidmzIngress.tap_ports"


def outcome(step):
    """'OK', or the canonical code's name of the (first) error."""
    try:
        result = step()
    except P4RuntimeWriteException as error:
        return code_pb2._CODE.values_by_number[error.errors[0][1].canonical_code].name
    except P4RuntimeException as error:
        return error.grpc_error.code().name
    except grpc.RpcError as error:
        return error.code().name
    return result if result is not None else "OK"


def tap_entry(port, role):
    entry = sh.TableEntry(TAP)(action="ScidmzIngress.set_tap_role")
    entry.match["std.ingress_port"] = str(port)
    entry.action["role"] = str(role)
    return entry


def main():
    address, election_low = sys.argv[1], int(sys.argv[2])
    out = {}
    sh.setup(device_id=1, grpc_addr=address, election_id=(0, election_low), verbose=False)
    try:
        if len(sys.argv) > 3:
            print(json.dumps({"held": election_low}))
            sys.stdout.flush()
            time.sleep(float(sys.argv[3]))
            return
        out["tables"] = sorted(t.preamble.name for t in sh.context.p4info.tables)
        out["insert"] = outcome(lambda: tap_entry(1, 1).insert())
        out["read"] = [
            [e.match["std.ingress_port"].exact.value.hex(), e.action["role"].value.hex()]
            for e in sh.TableEntry(TAP).read()
        ]
        out["duplicate"] = outcome(lambda: tap_entry(1, 1).insert())
        out["modify"] = outcome(lambda: tap_entry(1, 3).modify())
        out["read_after_modify"] = [e.action["role"].value.hex() for e in sh.TableEntry(TAP).read()]
        out["bad_port"] = outcome(lambda: tap_entry(300, 1).insert())
        out["delete"] = outcome(lambda: tap_entry(1, 3).delete())
        out["delete_missing"] = outcome(lambda: tap_entry(1, 3).delete())
        out["counters"] = outcome(
            lambda: len(list(sh.CounterEntry("ScidmzIngress.class_traffic").read()))
        )
    finally:
        sh.teardown()
        if out:
            print(json.dumps(out))
        sys.stdout.flush()
        os._exit(0)  # the shell's stream thread would keep a failed run alive


if __name__ == "__main__":
    main()
