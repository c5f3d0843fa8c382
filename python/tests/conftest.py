"""Every rank runs the same tests in the same order (they are collective).
A test that fails on one rank fails on every rank: after each test the
ranks agree on it through commgraph itself (an allreduce of a flag), so one
rank's failure does not leave the others waiting in the next test. Run under
mpiexec (tests/python/CMakeLists.txt: 2 and 3 ranks); CG_TIMEOUT bounds
every wait."""
import numpy as np
import pytest

import commgraph as cg


@pytest.fixture(scope="session")
def world():
    comm = cg.Comm()
    yield comm


@pytest.fixture(scope="session")
def _agreement(world):
    flag = np.zeros(1, np.int32)
    graph = cg.Graph("agreement")
    graph.allreduce(world, flag, op="max")
    plan = graph.compile(fusion=False)
    return flag, plan


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.cg_failed = report.failed


@pytest.fixture(autouse=True)
def ranks_agree(request, _agreement):
    yield
    flag, plan = _agreement
    failed = bool(getattr(request.node, "cg_failed", False))
    flag[0] = int(failed)
    plan.run()
    if flag[0] and not failed:
        pytest.fail("the test failed on another rank")


def rng_for(seed, rank):
    """The generator of `rank`'s inputs: every rank can regenerate any rank's."""
    return np.random.default_rng([seed, rank])


def integers(rng, n, dtype, low=-8, high=9):
    """n integer values as `dtype` (exact in every type, sums of a few ranks too)."""
    if np.dtype(dtype).kind == "u":
        low = 0
    return rng.integers(low, high, n).astype(dtype)


POISON = {"i": -77, "u": 77, "f": -7777.0}


def poisoned(n, dtype):
    """An output buffer full of a value no result takes."""
    return np.full(n, POISON[np.dtype(dtype).kind], dtype=dtype)
