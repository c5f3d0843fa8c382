"""commgraph: record one iteration's communication as a graph, compile it
once on every rank, replay it every iteration (docs/python.md).

    import numpy as np, commgraph as cg
    comm = cg.Comm()                      # MPI's world (or an mpi4py communicator)
    grads = np.ones(1 << 20, np.float32)
    g = cg.Graph("step")
    g.allreduce(comm, grads, op="avg")    # in place
    plan = g.compile(timeout=30)
    for step in range(100):
        plan.run()

A ctypes layer over libcommgraph.so (found through COMMGRAPH_LIBRARY, an
installed prefix, or the loader's path); no compiled extension.
"""
from ._lib import path as library_path
from .arena import Arena
from .buffers import Buffer, resolve
from .comm import Comm, init_mpi, mpi_library_version
from .errors import *  # noqa: F401,F403 -- the exception classes
from .errors import Error
from .graph import Graph, Node
from .plan import Plan, current_stream

__version__ = "0.1.0"


def set_timeout_handler(fn):
    """fn(status_name, report) on every replay timeout (None: none); see
    cg_set_timeout_handler. For launched and embedded replays it runs on a
    thread of the watchdog's; it must not raise."""
    from . import _lib
    global _timeout_handler
    if fn is None:
        _timeout_handler = None
        _lib.lib.cg_set_timeout_handler(_lib.TIMEOUT_HANDLER(), None)
        return

    def trampoline(status, report, _arg):
        try:
            fn(_lib.lib.cg_status_string(status).decode(), report.decode("utf-8", "replace") if report else "")
        except BaseException:  # noqa: B902 -- nothing may cross back into C
            pass

    _timeout_handler = _lib.TIMEOUT_HANDLER(trampoline)  # kept alive while set
    _lib.lib.cg_set_timeout_handler(_timeout_handler, None)


def flight_dump():
    """This process's flight recorder as text (cgflight merges ranks' dumps)."""
    from . import _lib
    from .errors import check
    text, status = _lib.to_text(_lib.lib.cg_flight_dump)
    check(status, "commgraph.flight_dump")
    return text


_timeout_handler = None
