"""Recording: a Graph of collectives, point-to-point messages, barriers and
host functions on buffers, with dependencies and names."""
import ctypes
import operator
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import _lib
from ._owned import Collected
from .drawing import Drawable
from .buffers import Buffer, resolve
from .comm import Comm
from .errors import UnsupportedError, check

_lib_ = _lib.lib


class Node:
    """A recorded node: pass it to Graph.depend, Graph.name, Plan.rebind.
    `kind` is its kind ("allreduce", ...), `index` its record order, `send`
    and `recv` the Buffers it was recorded with (None where the kind or the
    rank has none; the same Buffer twice for the in-place form)."""

    __slots__ = ("graph", "c", "kind", "index", "send", "recv")

    def __init__(self, graph: "Graph", c: _lib.Node, kind: str, send: Optional[Buffer] = None,
                 recv: Optional[Buffer] = None) -> None:
        self.graph, self.c, self.kind, self.index = graph, c, kind, c.index
        self.send, self.recv = send, recv

    def __repr__(self) -> str:
        return f"<commgraph node #{self.index} {self.kind}>"


def _op(op: str) -> int:
    if op not in _lib.REDOPS:
        raise ValueError(f"commgraph: reduction {op!r}; one of {', '.join(_lib.REDOPS)}")
    return _lib.REDOPS.index(op)


def _rank(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"commgraph: {what} must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"commgraph: {what} must be an integer, not {type(value).__name__}") from None


def _ranges(buffers: List[Buffer]):
    ranges = (_lib.Range * max(1, len(buffers)))()
    for i, b in enumerate(buffers):
        ranges[i] = _lib.Range(b.ptr, b.nbytes)
    return ranges


class Graph(Collected, Drawable):
    """Graph(name=None): the operations of one iteration, recorded once.

    Every method records one node and returns it; buffers are NumPy arrays,
    PyTorch tensors or any object with __dlpack__, __cuda_array_interface__
    or __array_interface__, contiguous. The element type comes from the
    buffer; `recv=None` means in place (the result replaces `send`) where
    the kind has an in-place form. Counts come from the buffers and are
    checked against each other and the communicator's size before the C
    call. The graph keeps every buffer, host function and communicator it
    recorded alive; so do plans compiled from it (they stay valid after the
    graph is closed). A graph is recorded from one thread at a time."""

    _what, _destroy = "graph", "cg_graph_destroy"

    def __init__(self, name: Optional[str] = None) -> None:
        opts = _lib.GraphOpts(ctypes.sizeof(_lib.GraphOpts), name.encode() if name else None)
        out = ctypes.c_void_p()
        check(_lib_.cg_graph_create(ctypes.byref(out), ctypes.byref(opts)), "commgraph.Graph")
        self.title = name
        self._keep: List[Any] = []  # buffers, host functions, communicators
        self._host_errors: List[BaseException] = []  # raised by host functions, for run/test/wait
        self._own(out)

    # ---- helpers

    def _comm(self, comm: Comm) -> Comm:
        if not isinstance(comm, Comm):
            raise TypeError(f"commgraph: comm must be a commgraph.Comm, not {type(comm).__name__}")
        comm.handle  # ValueError when closed
        return comm

    def _buffers(self, what: str, send: Any, recv: Any, need_send: bool = True, need_recv: bool = True,
                 in_place: bool = False) -> Tuple[Optional[Buffer], Optional[Buffer]]:
        """The send and receive Buffers; recv None is send where the kind is
        in place (`in_place`); missing buffers the kind needs raise TypeError."""
        if send is None and need_send:
            raise TypeError(f"commgraph: {what} needs a send buffer")
        s = resolve(send, f"{what}'s send buffer") if send is not None else None
        if recv is None and in_place:
            r = s
        elif recv is None and need_recv:
            raise TypeError(f"commgraph: {what} needs a receive buffer")
        else:
            r = resolve(recv, f"{what}'s receive buffer") if recv is not None else None
        if s is not None and r is not None and s.dtype != r.dtype:
            raise TypeError(f"commgraph: {what}: send holds {s.dtype} and recv {r.dtype}")
        if r is not None and r.readonly:
            raise ValueError(f"commgraph: {what}: the buffer it writes is read-only")
        return s, r

    def _record(self, kind: str, fn, comm: Optional[Comm], args: tuple, send: Optional[Buffer] = None,
                recv: Optional[Buffer] = None) -> Node:
        out = _lib.Node()
        head = (comm.handle,) if comm is not None else ()
        check(fn(ctypes.byref(out), self.handle, *head, *args), f"commgraph.Graph.{kind}")
        self._keep.extend(b.owner for b in (send, recv) if b is not None)
        if comm is not None:
            self._keep.append(comm)
        return Node(self, out, kind, send, recv)

    @staticmethod
    def _per_rank(buffer: Buffer, size: int, what: str, side: str) -> int:
        if buffer.count % size:
            raise ValueError(f"commgraph: {what}: the {side} buffer holds {buffer.count} elements, not a multiple "
                             f"of the communicator's {size} ranks")
        return buffer.count // size

    @staticmethod
    def _same(a: Buffer, b: Buffer, what: str) -> None:
        if a.count != b.count:
            raise ValueError(f"commgraph: {what}: send holds {a.count} elements and recv {b.count}")

    @staticmethod
    def _ptr(b: Optional[Buffer]) -> Optional[int]:
        return b.ptr if b is not None else None

    # ---- collectives

    def allreduce(self, comm: Comm, send: Any, recv: Any = None, op: str = "sum") -> Node:
        """recv = op over every rank's send (recv None: in place)."""
        comm = self._comm(comm)
        s, r = self._buffers("allreduce", send, recv, in_place=True)
        self._same(s, r, "allreduce")
        return self._record("allreduce", _lib_.cg_allreduce, comm,
                            (s.ptr, r.ptr, s.count, _lib.DTYPES.index(s.dtype), _op(op)), s, r)

    def broadcast(self, comm: Comm, buf: Any, root: int, recv: Any = None) -> Node:
        """root's `buf` to every rank's recv (recv None: into `buf` itself)."""
        comm = self._comm(comm)
        s, r = self._buffers("broadcast", buf, recv, in_place=True)
        self._same(s, r, "broadcast")
        return self._record("broadcast", _lib_.cg_broadcast, comm,
                            (s.ptr, r.ptr, s.count, _lib.DTYPES.index(s.dtype), _rank(root, "root")), s, r)

    def reduce(self, comm: Comm, send: Any, recv: Any = None, op: str = "sum", root: int = 0) -> Node:
        """recv on root = op over every rank's send (recv None: in place); other ranks' recv is left alone."""
        comm = self._comm(comm)
        s, r = self._buffers("reduce", send, recv, in_place=True)
        self._same(s, r, "reduce")
        return self._record("reduce", _lib_.cg_reduce, comm,
                            (s.ptr, r.ptr, s.count, _lib.DTYPES.index(s.dtype), _op(op), _rank(root, "root")), s, r)

    def allgather(self, comm: Comm, send: Any, recv: Any) -> Node:
        """recv = every rank's send, in rank order (recv holds size x send)."""
        comm = self._comm(comm)
        s, r = self._buffers("allgather", send, recv)
        if r.count != s.count * comm.size:
            raise ValueError(f"commgraph: allgather: recv holds {r.count} elements, not {comm.size} x {s.count}")
        return self._record("allgather", _lib_.cg_allgather, comm,
                            (s.ptr, r.ptr, s.count, _lib.DTYPES.index(s.dtype)), s, r)

    def reduce_scatter(self, comm: Comm, send: Any, recv: Any, op: str = "sum") -> Node:
        """recv = block `rank` of op over every rank's send (send holds size x recv)."""
        comm = self._comm(comm)
        s, r = self._buffers("reduce_scatter", send, recv)
        if s.count != r.count * comm.size:
            raise ValueError(f"commgraph: reduce_scatter: send holds {s.count} elements, not {comm.size} x "
                             f"{r.count}")
        return self._record("reduce_scatter", _lib_.cg_reduce_scatter, comm,
                            (s.ptr, r.ptr, r.count, _lib.DTYPES.index(s.dtype), _op(op)), s, r)

    def alltoall(self, comm: Comm, send: Any, recv: Any) -> Node:
        """Block j of send to rank j; block i of recv from rank i."""
        comm = self._comm(comm)
        s, r = self._buffers("alltoall", send, recv)
        self._same(s, r, "alltoall")
        per = self._per_rank(s, comm.size, "alltoall", "send")
        return self._record("alltoall", _lib_.cg_alltoall, comm, (s.ptr, r.ptr, per, _lib.DTYPES.index(s.dtype)),
                            s, r)

    def gather(self, comm: Comm, send: Any, recv: Any, root: int = 0) -> Node:
        """recv on root = every rank's send in rank order; recv may be None on other ranks."""
        comm = self._comm(comm)
        root = _rank(root, "root")
        s, r = self._buffers("gather", send, recv, need_recv=comm.rank == root)
        if r is not None and comm.rank == root and r.count != s.count * comm.size:
            raise ValueError(f"commgraph: gather: recv holds {r.count} elements, not {comm.size} x {s.count}")
        return self._record("gather", _lib_.cg_gather, comm,
                            (s.ptr, self._ptr(r), s.count, _lib.DTYPES.index(s.dtype), root), s, r)

    def scatter(self, comm: Comm, send: Any, recv: Any, root: int = 0) -> Node:
        """Block i of root's send to rank i's recv; send may be None on other ranks."""
        comm = self._comm(comm)
        root = _rank(root, "root")
        s, r = self._buffers("scatter", send, recv, need_send=comm.rank == root)
        if s is not None and comm.rank == root and s.count != r.count * comm.size:
            raise ValueError(f"commgraph: scatter: send holds {s.count} elements, not {comm.size} x {r.count}")
        return self._record("scatter", _lib_.cg_scatter, comm,
                            (self._ptr(s), r.ptr, r.count, _lib.DTYPES.index(r.dtype), root), s, r)

    def send(self, comm: Comm, buf: Any, peer: int) -> Node:
        """buf to rank `peer` (which records a matching recv)."""
        comm = self._comm(comm)
        s, _ = self._buffers("send", buf, None, need_recv=False)
        return self._record("send", _lib_.cg_send, comm,
                            (s.ptr, s.count, _lib.DTYPES.index(s.dtype), _rank(peer, "peer")), send=s)

    def recv(self, comm: Comm, buf: Any, peer: int) -> Node:
        """buf from rank `peer` (which records a matching send)."""
        comm = self._comm(comm)
        _, r = self._buffers("recv", None, buf, need_send=False)
        return self._record("recv", _lib_.cg_recv, comm,
                            (r.ptr, r.count, _lib.DTYPES.index(r.dtype), _rank(peer, "peer")), recv=r)

    def barrier(self, comm: Comm) -> Node:
        """Every rank of comm arrives before any leaves."""
        return self._record("barrier", _lib_.cg_barrier, self._comm(comm), ())

    def host_func(self, fn: Callable[[], Any], reads: Optional[Iterable[Any]] = None,
                  writes: Optional[Iterable[Any]] = None) -> Node:
        """fn() on the host when the plan reaches it. Host plans call it on
        the thread that runs the plan; an exception it raises comes out of the
        run, wait or test that ran it. reads, writes: the buffers it touches,
        so it is ordered with the nodes that touch them; both None: it may
        touch anything (a fence). In a device plan it becomes a CUDA host node,
        which must not call CUDA and needs the GIL on CUDA's thread: avoid it
        from Python where the main thread may wait for the GPU holding the GIL."""
        if not callable(fn):
            raise TypeError(f"commgraph: host_func needs a callable, not {type(fn).__name__}")
        errors = self._host_errors

        def trampoline(_arg):
            try:
                fn()
            except BaseException as e:  # noqa: B902 -- carried to the caller of run/wait
                errors.append(e)

        c_fn = _lib.HOST_FN(trampoline)
        access = self._access("host_func", reads, writes)
        self._keep.append(c_fn)
        return self._record("host_func", _lib_.cg_host_func, None, (c_fn, None, ctypes.byref(access)))

    def _access(self, what: str, reads: Optional[Iterable[Any]], writes: Optional[Iterable[Any]]) -> Any:
        """The cg_access_t of a node that declares the buffers it touches;
        both None: a fence (it may touch anything)."""
        if reads is None and writes is None:
            return _lib.Access(ctypes.sizeof(_lib.Access), 1, None, 0, None, 0)
        rs = [resolve(b, f"{what}'s read buffer") for b in (reads or [])]
        ws = [resolve(b, f"{what}'s write buffer") for b in (writes or [])]
        self._keep.extend(b.owner for b in rs + ws)
        r_ranges, w_ranges = _ranges(rs), _ranges(ws)
        self._keep.extend((r_ranges, w_ranges))
        return _lib.Access(ctypes.sizeof(_lib.Access), 0, r_ranges, len(rs), w_ranges, len(ws))

    # ---- CUDA graphs and events (device plans)

    def _cuda(self, name: str) -> Any:
        if not _lib.has(name):
            raise UnsupportedError(f"commgraph.Graph: this libcommgraph was built without CUDA ({name})")
        return getattr(_lib_, name)

    @staticmethod
    def _handle_of(obj: Any, attribute: str, what: str) -> int:
        handle = getattr(obj, attribute, obj)
        handle = handle() if callable(handle) else handle
        if isinstance(handle, ctypes.c_void_p):
            handle = handle.value or 0
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(f"commgraph: {what} must be an int handle or have .{attribute}, not {type(obj).__name__}")
        if handle == 0:
            raise ValueError(f"commgraph: {what} is NULL (a torch.cuda.Event has its CUDA event once recorded; a "
                             f"torch.cuda.CUDAGraph its graph with keep_graph=True after the capture)")
        return handle

    def child_graph(self, cuda_graph: Any, reads: Optional[Iterable[Any]] = None,
                    writes: Optional[Iterable[Any]] = None) -> Node:
        """A CUDA graph of the user's as a node (cg_child_graph): a
        cudaGraph_t as an int, or a torch.cuda.CUDAGraph captured with
        keep_graph=True (its raw_cuda_graph()). It is cloned now, so the
        original may change or go. reads, writes: the buffers its kernels
        touch (both None: a fence). Device plans only."""
        fn = self._cuda("cg_child_graph")
        handle = self._handle_of(cuda_graph, "raw_cuda_graph", "child_graph's graph")
        access = self._access("child_graph", reads, writes)
        return self._record("child_graph", fn, None, (ctypes.c_void_p(handle), ctypes.byref(access)))

    def event_wait(self, event: Any, reads: Optional[Iterable[Any]] = None,
                   writes: Optional[Iterable[Any]] = None) -> Node:
        """Waits for `event` (cg_event_wait), recorded by work outside the
        plan: a cudaEvent_t as an int or a torch.cuda.Event (its cuda_event,
        so record it once first). The graph and its plans keep the Python
        object alive; the event itself must outlive them. Device plans only."""
        fn = self._cuda("cg_event_wait")
        handle = self._handle_of(event, "cuda_event", "event_wait's event")
        access = self._access("event_wait", reads, writes)
        self._keep.append(event)
        return self._record("event_wait", fn, None, (ctypes.c_void_p(handle), ctypes.byref(access)))

    def event_record(self, event: Any, reads: Optional[Iterable[Any]] = None,
                     writes: Optional[Iterable[Any]] = None) -> Node:
        """Records `event` (cg_event_record) once the work ordered before this
        node is done, for work outside the plan to wait on. Same event forms
        as event_wait. Device plans only."""
        fn = self._cuda("cg_event_record")
        handle = self._handle_of(event, "cuda_event", "event_record's event")
        access = self._access("event_record", reads, writes)
        self._keep.append(event)
        return self._record("event_record", fn, None, (ctypes.c_void_p(handle), ctypes.byref(access)))

    # ---- structure

    def depend(self, before: Node, after: Node) -> None:
        """`after` starts only once `before` is done."""
        for node in (before, after):
            if not isinstance(node, Node):
                raise TypeError(f"commgraph: depend takes nodes, not {type(node).__name__}")
        check(_lib_.cg_depend(self.handle, before.c, after.c), "commgraph.Graph.depend")

    def name(self, node: Node, name: str) -> Node:
        """Names `node` in DOT, dumps and error details; returns it."""
        if not isinstance(node, Node):
            raise TypeError(f"commgraph: name takes a node, not {type(node).__name__}")
        check(_lib_.cg_node_name(self.handle, node.c, str(name).encode()), "commgraph.Graph.name")
        return node

    @property
    def stats(self) -> Dict[str, Any]:
        """Node and edge counts (cg_graph_stats_t as a dict)."""
        s = _lib.GraphStats()
        check(_lib_.cg_graph_stats(ctypes.byref(s), self.handle), "commgraph.Graph.stats")
        out: Dict[str, Any] = {name: getattr(s, name) for name, _ in _lib.GraphStats._fields_
                               if name != "nodes_by_kind"}
        out["nodes_by_kind"] = {kind: s.nodes_by_kind[i] for i, kind in enumerate(_lib.NODE_KINDS)
                                if s.nodes_by_kind[i]}
        return out

    def dot(self) -> str:
        """The graph in Graphviz DOT."""
        text, status = _lib.to_text(_lib_.cg_graph_write_dot, self.handle)
        check(status, "commgraph.Graph.dot")
        return text

    def compile(self, **opts: Any) -> "Plan":  # noqa: F821 -- plan.Plan
        """Compiles the graph into a Plan (collective; see commgraph.Plan for the options)."""
        from .plan import Plan
        return Plan(self, **opts)
