"""Exceptions: one class per cg_status_t, all under commgraph.Error.

A failed C call raises the class of its status, carrying the status, its
name and the library's detail for this thread (cg_error_last: the node, the
rank, what was expected). Arguments Python can judge on its own (types,
sizes, names) raise TypeError or ValueError before any C call.
"""
import builtins

from . import _lib

# value -> (class name, C name, a builtin base besides Error);
# include/commgraph/status.h's X-macro
_STATUSES = {
    1: ("InvalidArgumentError", "CG_ERR_INVALID_ARGUMENT", ValueError),
    2: ("InvalidEnumError", "CG_ERR_INVALID_ENUM", ValueError),
    3: ("InvalidNodeError", "CG_ERR_INVALID_NODE", ValueError),
    4: ("CountOverflowError", "CG_ERR_OVERFLOW", ValueError),
    5: ("OutOfRangeError", "CG_ERR_OUT_OF_RANGE", ValueError),
    6: ("AliasError", "CG_ERR_ALIAS", ValueError),
    7: ("CycleError", "CG_ERR_CYCLE", ValueError),
    8: ("NoMemoryError", "CG_ERR_NO_MEMORY", MemoryError),
    9: ("WriteError", "CG_ERR_IO", OSError),
    10: ("UnsupportedError", "CG_ERR_UNSUPPORTED", None),
    11: ("InternalError", "CG_ERR_INTERNAL", None),
    12: ("MismatchError", "CG_ERR_MISMATCH", None),
    13: ("BackendError", "CG_ERR_BACKEND", None),
    14: ("InProgressError", "CG_ERR_IN_PROGRESS", None),
    15: ("TimeoutError", "CG_ERR_TIMEOUT", builtins.TimeoutError),
}


class Error(Exception):
    """A commgraph call failed: `status` (the cg_status_t value), `status_name`
    ("CG_ERR_MISMATCH"), `message` (the library's detail: node, rank, why)."""

    status = -1
    status_name = "CG_ERR_UNKNOWN"

    def __init__(self, message, status=None):
        if status is not None:
            self.status = status
            self.status_name = _STATUSES.get(status, (None, f"status {status}", None))[1]
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


_BY_STATUS = {}
for _value, (_class_name, _c_name, _builtin) in _STATUSES.items():
    _doc = f"{_c_name}: {_lib.lib.cg_status_string(_value).decode()}"
    _cls = type(_class_name, (Error, _builtin) if _builtin else (Error,),
                {"status": _value, "status_name": _c_name, "__doc__": _doc, "__module__": "commgraph"})
    _BY_STATUS[_value] = _cls
    globals()[_class_name] = _cls

__all__ = ["Error"] + [entry[0] for entry in _STATUSES.values()]


def status_name(status: int) -> str:
    """"CG_ERR_TIMEOUT" for 15, ... ("CG_SUCCESS" for 0)."""
    return "CG_SUCCESS" if status == 0 else _STATUSES.get(status, (None, f"status {status}", None))[1]


def error_for(status, what=""):
    """The exception for a failed call: its class by status, the thread's detail."""
    detail = _lib.lib.cg_error_last()
    detail = detail.decode("utf-8", "replace") if detail else ""
    if not detail:
        detail = _lib.lib.cg_status_string(status).decode()
    if what and what not in detail:
        detail = f"{what}: {detail}"
    cls = _BY_STATUS.get(status)
    return cls(detail) if cls else Error(detail, status)


def check(status, what=""):
    """Raises the status's exception unless it is CG_SUCCESS."""
    if status != 0:
        raise error_for(status, what)
