"""Mastership of the software P4Runtime target (P4Runtime spec §5)."""

from scidmz.switch.arbitration import Arbitration, Verdict, arbitrate, disconnect


def test_highest_election_id_is_primary_and_the_demoted_primary_is_told():
    state, verdict, notify = arbitrate(Arbitration(device_id=1), client=1, device_id=1,
                                       election_id=10)  # fmt: skip
    assert verdict is Verdict.PRIMARY and notify == ()
    state, verdict, notify = arbitrate(state, client=2, device_id=1, election_id=5)
    assert verdict is Verdict.BACKUP and notify == ()
    assert state.primary == 1
    state, verdict, notify = arbitrate(state, client=3, device_id=1, election_id=20)
    assert verdict is Verdict.PRIMARY and notify == (1,)
    assert state.verdict(1) is Verdict.BACKUP


def test_writes_need_the_primarys_election_id():
    state, _, _ = arbitrate(Arbitration(1), 1, 1, 10)
    state, _, _ = arbitrate(state, 2, 1, 5)
    assert state.may_write(10)
    assert not state.may_write(5)
    assert not Arbitration(1).may_write(0)


def test_a_backup_takes_over_when_the_primary_leaves():
    state, _, _ = arbitrate(Arbitration(1), 1, 1, 10)
    state, _, _ = arbitrate(state, 2, 1, 5)
    state, notify = disconnect(state, 1)
    assert notify == (2,) and state.primary == 2 and state.may_write(5)
    state, notify = disconnect(state, 2)
    assert notify == () and state.primary is None
    assert disconnect(state, 99) == (state, ())


def test_wrong_device_and_duplicate_election_ids_are_refused():
    state, _, _ = arbitrate(Arbitration(1), 1, 1, 10)
    assert arbitrate(state, 2, 7, 11)[1] is Verdict.WRONG_DEVICE
    again, verdict, _ = arbitrate(state, 2, 1, 10)
    assert verdict is Verdict.ELECTION_ID_IN_USE and again == state
    # a client may re-announce its own id, or lower it and become backup
    assert arbitrate(state, 1, 1, 10)[1] is Verdict.PRIMARY
    state, _, _ = arbitrate(state, 2, 1, 8)
    state, verdict, notify = arbitrate(state, 1, 1, 3)
    assert verdict is Verdict.BACKUP and state.primary == 2
    assert notify == (2,)  # the promoted backup learns it is primary
