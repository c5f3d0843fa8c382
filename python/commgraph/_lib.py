"""Loading libcommgraph and the C declarations the package calls (ctypes).

The structures mirror include/commgraph/*.h field by field; each options
structure starts with its own size, as the C API asks, so a library built
from other headers refuses them instead of misreading them.
"""
import ctypes
import ctypes.util
import os
import pathlib

c_status = ctypes.c_int
c_size = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_double = ctypes.c_double

# the values of include/commgraph/*.h's enumerations (X-macro order)
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")
REDOPS = ("sum", "prod", "min", "max", "avg")
BACKENDS = ("auto", "mpi", "nccl", "hosttransfer")
STAGINGS = ("auto", "host", "direct")
NODE_KINDS = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "gather", "scatter",
              "send", "recv", "barrier", "host_func", "child_graph", "event_wait", "event_record")
DEVICE_HOST = -1
DEVICE_LOCAL_RANK = -2
CHUNK_DEFAULT = 0
CHUNK_NONE = ctypes.c_size_t(-1).value


class Node(ctypes.Structure):
    _fields_ = [("graph", ctypes.c_uint64), ("index", ctypes.c_uint32)]


class Range(ctypes.Structure):
    _fields_ = [("ptr", c_void_p), ("bytes", c_size)]


class CommOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("backend", c_int), ("device", c_int), ("staging", c_int),
                ("chunk_bytes", c_size), ("timeout_s", c_double)]


class GraphOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("name", c_char_p)]


class Access(ctypes.Structure):
    _fields_ = [("size", c_size), ("everything", c_int), ("reads", ctypes.POINTER(Range)), ("n_reads", c_size),
                ("writes", ctypes.POINTER(Range)), ("n_writes", c_size)]


class CompileOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("check_ranks", c_int), ("name", c_char_p), ("fusion", c_int),
                ("bucket_bytes", c_size), ("timeout_s", c_double), ("tuning_file", c_char_p),
                ("fingerprint", c_int)]


class TuneOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("replays", c_int), ("stream", c_void_p), ("compile", CompileOpts)]


class TraceOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("replays", c_int), ("stream", c_void_p)]


class Rebind(ctypes.Structure):
    _fields_ = [("node", Node), ("send", c_void_p), ("recv", c_void_p)]


class PlanStats(ctypes.Structure):
    _fields_ = [("steps", c_size), ("lanes", c_size), ("dependencies", c_size), ("communicators", c_size),
                ("device", c_int), ("events", c_size), ("groups", c_size), ("buckets", c_size),
                ("fused_nodes", c_size), ("bucket_bytes", c_size), ("copy_bytes", c_size)]


class GraphStats(ctypes.Structure):
    _fields_ = [("nodes", c_size), ("nodes_by_kind", c_size * len(NODE_KINDS)), ("edges", c_size),
                ("explicit_edges", c_size), ("raw_edges", c_size), ("war_edges", c_size), ("waw_edges", c_size),
                ("fence_edges", c_size), ("comm_order_edges", c_size), ("bytes", c_size)]


class ArenaOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("device", c_int), ("alignment", c_size)]


HOST_FN = ctypes.CFUNCTYPE(None, c_void_p)
TIMEOUT_HANDLER = ctypes.CFUNCTYPE(None, c_status, c_char_p, c_void_p)

_P = ctypes.POINTER
_NODE_OUT = _P(Node)

# name: (argument types, result type); entry points a build may lack (CUDA,
# the MPI helpers) are bound when present
_DECLS = {
    "cg_status_string": ([c_status], c_char_p),
    "cg_error_last": ([], c_char_p),
    "cg_dtype_size": ([c_int], c_size),
    "cg_comm_create_offline": ([_P(c_void_p), c_int, c_int], c_status),
    "cg_comm_destroy": ([c_void_p], None),
    "cg_comm_rank": ([_P(c_int), c_void_p], c_status),
    "cg_comm_size": ([_P(c_int), c_void_p], c_status),
    "cg_comm_backend_name": ([_P(c_char_p), c_void_p], c_status),
    "cg_comm_device": ([_P(c_int), c_void_p], c_status),
    "cg_graph_create": ([_P(c_void_p), _P(GraphOpts)], c_status),
    "cg_graph_destroy": ([c_void_p], None),
    "cg_allreduce": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_broadcast": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_reduce": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int, c_int], c_status),
    "cg_allgather": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int], c_status),
    "cg_reduce_scatter": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_alltoall": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int], c_status),
    "cg_gather": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_scatter": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_send": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_recv": ([_NODE_OUT, c_void_p, c_void_p, c_void_p, c_size, c_int, c_int], c_status),
    "cg_barrier": ([_NODE_OUT, c_void_p, c_void_p], c_status),
    "cg_host_func": ([_NODE_OUT, c_void_p, HOST_FN, c_void_p, _P(Access)], c_status),
    "cg_depend": ([c_void_p, Node, Node], c_status),
    "cg_node_name": ([c_void_p, Node, c_char_p], c_status),
    "cg_graph_stats": ([_P(GraphStats), c_void_p], c_status),
    "cg_graph_write_dot": ([c_void_p, c_void_p], c_status),
    "cg_compile": ([_P(c_void_p), c_void_p, _P(CompileOpts)], c_status),
    "cg_plan_destroy": ([c_void_p], None),
    "cg_plan_run": ([c_void_p], c_status),
    "cg_plan_start": ([c_void_p], c_status),
    "cg_plan_test": ([_P(c_int), c_void_p], c_status),
    "cg_plan_wait": ([c_void_p], c_status),
    "cg_plan_rebind": ([c_void_p, _P(Rebind), c_size], c_status),
    "cg_plan_tune": ([_P(c_void_p), c_void_p, c_void_p, _P(TuneOpts)], c_status),
    "cg_plan_save_tuning": ([c_void_p, c_char_p], c_status),
    "cg_plan_trace": ([c_void_p, c_char_p, _P(TraceOpts)], c_status),
    "cg_plan_stats": ([_P(PlanStats), c_void_p], c_status),
    "cg_plan_timeout": ([_P(c_double), c_void_p], c_status),
    "cg_set_timeout_handler": ([TIMEOUT_HANDLER, c_void_p], c_status),
    "cg_plan_write_dot": ([c_void_p, c_void_p], c_status),
    "cg_plan_dump": ([c_void_p, c_void_p], c_status),
    "cg_flight_dump": ([c_void_p], c_status),
    "cg_arena_create": ([_P(c_void_p), c_size, _P(ArenaOpts)], c_status),
    "cg_arena_alloc": ([_P(c_void_p), c_void_p, c_size, c_int], c_status),
    "cg_arena_usage": ([_P(c_size), _P(c_size), c_void_p], c_status),
    "cg_arena_reset": ([c_void_p], c_status),
    "cg_arena_destroy": ([c_void_p], None),
    # with MPI
    "cg_mpi_init": ([_P(c_int)], c_status),
    "cg_mpi_finalize": ([], c_status),
    "cg_comm_create_fortran": ([_P(c_void_p), c_int, _P(CommOpts)], c_status),
    "cg_mpi_world_fortran": ([], c_int),
    "cg_mpi_library_version": ([c_char_p, c_size], c_status),
    "cg_info_write_fortran": ([c_void_p, c_int], c_status),
    # with CUDA
    "cg_plan_launch": ([c_void_p, c_void_p], c_status),
    "cg_child_graph": ([_NODE_OUT, c_void_p, c_void_p, _P(Access)], c_status),
    "cg_event_wait": ([_NODE_OUT, c_void_p, c_void_p, _P(Access)], c_status),
    "cg_event_record": ([_NODE_OUT, c_void_p, c_void_p, _P(Access)], c_status),
    # with NCCL
    "cg_nccl_arena_create": ([_P(c_void_p), c_void_p, c_size, _P(ArenaOpts)], c_status),
    "cg_nccl_arena_symmetric_max": ([_P(c_size), c_void_p, c_int], c_status),
}


def _candidates():
    """Where libcommgraph may be, in the order the docs give."""
    explicit = os.environ.get("COMMGRAPH_LIBRARY")
    if explicit:
        yield explicit
        return
    here = pathlib.Path(__file__).resolve().parent
    yield from (str(p) for p in sorted(here.glob("lib/libcommgraph.so*")))
    # an installed prefix: <prefix>/lib[64|/<triplet>]/pythonX/.../commgraph
    for parent in here.parents:
        for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
            candidate = parent / libdir / "libcommgraph.so"
            if candidate.exists():
                yield str(candidate)
    found = ctypes.util.find_library("commgraph")
    if found:
        yield found
    yield "libcommgraph.so"


def _load():
    tried = []
    for path in _candidates():
        try:
            # RTLD_GLOBAL: MPI, CUDA and NCCL symbols stay visible to what loads after
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("commgraph: cannot load libcommgraph.so; set COMMGRAPH_LIBRARY to its path, or install the "
                      "library (cmake --install) next to this package. Tried: " + "; ".join(tried))


lib, path = _load()
for _name, (_args, _result) in _DECLS.items():
    _fn = getattr(lib, _name, None)
    if _fn is None:
        continue
    _fn.argtypes = _args
    _fn.restype = _result


def has(name):
    """Whether the loaded library has the entry point (CUDA, MPI: the build decides)."""
    return getattr(lib, name, None) is not None and name in _DECLS


_libc = ctypes.CDLL(None)
_libc.open_memstream.argtypes = [_P(c_void_p), _P(c_size)]
_libc.open_memstream.restype = c_void_p
_libc.fclose.argtypes = [c_void_p]
_libc.fclose.restype = c_int
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def to_text(write, *args):
    """Runs a C writer `write(*args, FILE *)` into memory and returns the text and the status."""
    buf, size = c_void_p(), c_size()
    stream = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        raise MemoryError("open_memstream failed")
    try:
        status = write(*args, stream)
    finally:
        _libc.fclose(stream)
    text = ctypes.string_at(buf, size.value).decode("utf-8", "replace") if buf else ""
    _libc.free(buf)
    return text, status
