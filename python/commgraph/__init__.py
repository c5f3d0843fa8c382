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
from typing import Callable, Optional

from ._lib import path as library_path
from .arena import Arena
from .buffers import Buffer, resolve
from .comm import Comm, init_mpi, mpi_library_version
from .errors import *  # noqa: F401,F403 -- the exception classes
from . import errors as _errors
from .errors import Error
from .graph import Graph, Node
from .plan import Plan, current_stream

__version__ = "0.1.0"
__all__ = ["Arena", "Buffer", "Comm", "Graph", "Node", "Plan", "current_stream", "flight_dump", "init_mpi",
           "library_path", "mpi_library_version", "resolve", "set_timeout_handler"] + _errors.__all__


def set_timeout_handler(fn: "Optional[Callable[[str, str], None]]") -> None:
    """fn(status_name, report) on every replay timeout or, for device plans,
    fingerprint mismatch (None: none); see cg_set_timeout_handler. For
    launched and embedded replays it runs on a thread of the watchdog's;
    what it raises is dropped (nothing may cross back into C)."""
    from . import _lib, _registry
    from .errors import check
    global _timeout_handler
    if fn is None:
        check(_lib.lib.cg_set_timeout_handler(_lib.TIMEOUT_HANDLER(), None), "commgraph.set_timeout_handler")
        _timeout_handler = None
        return
    if not callable(fn):
        raise TypeError(f"commgraph: set_timeout_handler needs a callable or None, not {type(fn).__name__}")

    from .errors import status_name

    def trampoline(status, report, _arg):
        try:
            fn(status_name(status), report.decode("utf-8", "replace") if report else "")
        except BaseException:  # noqa: B902 -- nothing may cross back into C
            pass

    handler = _lib.TIMEOUT_HANDLER(trampoline)
    check(_lib.lib.cg_set_timeout_handler(handler, None), "commgraph.set_timeout_handler")
    if _timeout_handler is None:
        # before the callback is freed: the watchdog's threads outlive Python
        _registry.at_exit(lambda: _lib.lib.cg_set_timeout_handler(_lib.TIMEOUT_HANDLER(), None))
    _timeout_handler = handler  # kept alive while set


def flight_dump() -> str:
    """This process's flight recorder as text (cgflight merges ranks' dumps)."""
    from . import _lib
    from .errors import check
    text, status = _lib.to_text(_lib.lib.cg_flight_dump)
    check(status, "commgraph.flight_dump")
    return text


_timeout_handler = None
