import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from millrace import Cluster, install_sigterm_cleanup  # noqa: E402

# Settings every scenario's cluster gets: no rebalance delay (groups form at once) and a small
# __consumer_offsets (created on the first FindCoordinator; 50 partitions x RF 3 only cost time).
BASE_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
}


def pytest_configure(config):  # noqa: ARG001
    install_sigterm_cleanup()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ARG001
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def make_cluster(request):
    """make_cluster(nodes=3, settings={...}) -> a started Cluster, stopped after the test. On failure
    the work dir (every node's data dir and logs) is kept and the logs' tails are printed."""
    made = []

    def make(nodes: int = 3, settings: "dict[str, str] | None" = None) -> Cluster:
        merged = dict(BASE_SETTINGS)
        merged.update(settings or {})
        c = Cluster(nodes, merged)
        made.append(c)
        return c.start()

    yield make
    rep = getattr(request.node, "rep_call", None)
    failed = rep is not None and rep.failed
    for c in made:
        if failed:
            c.keep = True
            print(f"\n=== cluster work dir kept: {c.work_dir}\n{c.logs_tail(25)}")
        c.close(kill=True)  # the scenarios assert nothing about the final shutdown
