"""The CA Secret backed up and restored as docs/operating/backup.md says: restored before the
operator starts, it is adopted as it was and no workload's certificate is reissued; lost,
the operator makes a new CA and reissues every identity from it, with nothing else to do."""

from __future__ import annotations

import pytest
import yaml

from scidmz.testenv.identities import OPERATOR_NAMESPACE
from tests.k8s.conftest import secret_data, wait_for
from tests.loops import link_object, policy_object

CA_SECRET = "scidmz-ca-backup-test"
BACKUP_DROPS = ("uid", "resourceVersion", "creationTimestamp", "ownerReferences", "managedFields")
"""What the page says to delete from the saved Secret's metadata before restoring it."""


@pytest.fixture
def own_ca(operator):
    """The session's operator restarted with a CA Secret of its own (then as it was)."""
    operator.stop()
    operator.start(SCIDMZ_CA_SECRET=CA_SECRET)
    try:
        yield operator
    finally:
        operator.stop()
        operator.plane.kubectl("delete", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE,
                               "--ignore-not-found")  # fmt: skip
        operator.start()


def test_a_restored_ca_is_adopted_and_a_lost_one_replaced(own_ca, links, kube):
    plane = own_ca.plane
    name = links.name("ca")
    links.apply(link_object(name))
    kube.apply(policy_object("p", kube.namespace, linkRef={"name": name}))
    wait_for(lambda: links.ready(name), 30, "the link Ready")
    identity = f"{name}-controller-tls"
    wait_for(lambda: secret_data(plane, identity), 15, "the controller's identity")
    ca, issued = secret_data(plane, CA_SECRET), secret_data(plane, identity)
    assert issued["ca.crt"] == ca["tls.crt"]

    # the backup, as the page takes it
    saved = yaml.safe_load(
        plane.kubectl("get", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE, "-o", "yaml").stdout
    )
    for field in BACKUP_DROPS:
        saved["metadata"].pop(field, None)

    # lost while the operator is down (an uninstall removes it with the Deployment), then
    # restored before it starts: the same CA, and not one certificate reissued
    own_ca.stop()
    plane.kubectl("delete", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE)
    plane.kubectl("create", "-f", "-", input_text=yaml.safe_dump(saved))
    own_ca.start(SCIDMZ_CA_SECRET=CA_SECRET)
    # a change to the policy: the restarted operator has passed over the link once it shows
    kube.apply(policy_object("p", kube.namespace, linkRef={"name": name}, targetRate="350Mbps"))
    wait_for(lambda: _admitted_target(links, name) == "350Mbps", 30, "a pass over the link")
    assert secret_data(plane, CA_SECRET)["tls.crt"] == ca["tls.crt"]
    assert secret_data(plane, identity)["tls.crt"] == issued["tls.crt"]

    # lost for good: a new CA, and the identity reissued from it without anyone's help
    own_ca.stop()
    plane.kubectl("delete", "secret", CA_SECRET, "-n", OPERATOR_NAMESPACE)
    own_ca.start(SCIDMZ_CA_SECRET=CA_SECRET)
    wait_for(lambda: secret_data(plane, CA_SECRET), 30, "a new CA")
    fresh = secret_data(plane, CA_SECRET)["tls.crt"]
    assert fresh != ca["tls.crt"]
    wait_for(lambda: secret_data(plane, identity).get("ca.crt") == fresh, 60,
             "the controller's identity reissued from the new CA")  # fmt: skip


def _admitted_target(links, name: str) -> str | None:
    link = links.get(name) or {}
    return (link.get("status", {}).get("policies") or {}).get("admittedTarget")
