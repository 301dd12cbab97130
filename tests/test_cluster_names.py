"""kmon serve's cluster label: the cluster's id once kmon's own query names it, never a
guess that changes (ClusterNames)."""

import pytest

from kmon.export.cluster_names import UNKNOWN, WAIT_POLLS, WAIT_S, ClusterNames

pytestmark = pytest.mark.unit


def test_a_process_waits_for_its_cluster_id_then_is_labelled_by_it():
    names = ClusterNames()
    assert names({7}, {}, asking={7}) == {}  # kmon's query to its broker under way
    assert names({7}, {7: "Hk3xq0ZgT1ixb3kPqzJ3Zg"}, asking=set()) == {
        7: "Hk3xq0ZgT1ixb3kPqzJ3Zg"}


def test_one_kmon_cannot_ask_about_is_unknown_after_a_few_polls_or_named_by_b():
    for named, expected in ((None, UNKNOWN), ("prod", "prod")):
        names = ClusterNames(named)
        waited = [names({9}, {}, asking={9}) for _ in range(WAIT_POLLS)]
        assert waited == [{}] * WAIT_POLLS
        assert names({9}, {}, asking={9}) == {9: expected}
        assert names({9}, {}, asking=set()) == {9: expected}


def test_one_kmon_cannot_ask_about_waits_seconds_not_polls_at_a_long_interval():
    """At ``--interval 20s`` three polls were a minute without the process's series."""
    now = [0.0]
    names = ClusterNames(clock=lambda: now[0])
    assert names({9}, {}, asking={9}) == {}
    now[0] += WAIT_S
    assert names({9}, {}, asking={9}) == {9: UNKNOWN}


def test_a_process_keeps_its_cluster_while_it_holds_no_connection():
    """A client whose idle connections were all reaped holds none until it needs a broker:
    no answer names its cluster then, and its series must not move to ``unknown`` (a
    Prometheus query by its cluster found its idle reaps gone). A pid gone and come back
    is a new process."""
    names = ClusterNames()
    assert names({7}, {7: "Hk3xq0ZgT1ixb3kPqzJ3Zg"}, asking=set()) == {
        7: "Hk3xq0ZgT1ixb3kPqzJ3Zg"}
    assert names({7}, {}, asking=set()) == {7: "Hk3xq0ZgT1ixb3kPqzJ3Zg"}
    assert names(set(), {}, asking=set()) == {}
    assert names({7}, {}, asking=set()) == {7: UNKNOWN}


def test_a_process_labelled_once_is_not_made_to_wait_again():
    """Any query of kmon's under way (another process's broker, a cluster's idle limit)
    counts as asking for every process: one labelled while none ran must keep its series
    when the next poll finds one running, else they vanish and its counters start again (a
    client made per message showed opens going back under ``serve -b``)."""
    for named, expected in ((None, UNKNOWN), ("prod", "prod")):
        names = ClusterNames(named)
        assert names({9}, {}, asking=set()) == {9: expected}
        assert names({9}, {}, asking={9}) == {9: expected}
