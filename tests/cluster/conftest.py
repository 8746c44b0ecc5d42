"""Fixtures of the multi-host tests: `cluster` (the topology, built once per session) and `healthy_cluster`.

Building the topology needs root and Linux namespaces. Where they are missing the tests are skipped, except in
CI (`CI=true`), where a skipped cluster suite would hide that the issue 10 tests never ran: there they fail.

Every test under tests/cluster is marked `cluster` (also without its own `pytestmark`), so `-m "not cluster"`
leaves them out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.topology import Topology, unavailable_reason

CLUSTER_TESTS = Path(__file__).resolve().parent
# How long a session waits for another session's topology (the names are machine-wide: one at a time).
LOCK_TIMEOUT_S = 240.0


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so the marker counts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.resolve().is_relative_to(CLUSTER_TESTS):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Topology]:
    """The topology, up for the whole session and torn down at its end (`AAS_CLUSTER_KEEP=1` leaves it up)."""
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the cluster tests cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    topology = Topology()
    with topology.lock(timeout=LOCK_TIMEOUT_S):
        topology.up()
        try:
            yield topology
        finally:
            if os.environ.get("AAS_CLUSTER_KEEP") != "1":
                topology.down()


@pytest.fixture
def healthy_cluster(cluster: Topology) -> Topology:
    """The topology with every link up and every service running again (after a test that broke something)."""
    cluster.heal()
    return cluster
