"""Recording: a Graph of collectives, point-to-point messages, barriers and
host functions on buffers, with dependencies and names."""
import ctypes

from . import _lib
from .buffers import HOST, resolve
from .comm import Comm
from .errors import check

_lib_ = _lib.lib


class Node:
    """A recorded node: pass it to Graph.depend, Graph.name, Plan.rebind."""

    __slots__ = ("graph", "c", "kind", "index", "send", "recv")

    def __init__(self, graph, c, kind, send=None, recv=None):
        self.graph, self.c, self.kind, self.index = graph, c, kind, c.index
        self.send, self.recv = send, recv  # the recorded Buffers (rebinding keeps their size and type)

    def __repr__(self):
        return f"<commgraph node #{self.index} {self.kind}>"


def _op(op):
    if op not in _lib.REDOPS:
        raise ValueError(f"commgraph: reduction {op!r}; one of {', '.join(_lib.REDOPS)}")
    return _lib.REDOPS.index(op)


def _rank(value, comm, what):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"commgraph: {what} must be an int, not {type(value).__name__}")
    return value


def _ranges(buffers):
    ranges = (_lib.Range * max(1, len(buffers)))()
    for i, b in enumerate(buffers):
        ranges[i] = _lib.Range(b.ptr, b.nbytes)
    return ranges


class Graph:
    """Graph(name=None): the operations of one iteration, recorded once.

    Every method records one node and returns it; buffers are NumPy arrays,
    PyTorch tensors or any object with __dlpack__, __cuda_array_interface__
    or __array_interface__, contiguous. The element type comes from the
    buffer; `recv=None` means in place (the result replaces `send`). Counts
    come from the buffers and are checked against each other and the
    communicator's size before the C call. The graph keeps every buffer (and
    host function) alive; so do plans compiled from it."""

    def __init__(self, name=None):
        from . import _registry
        opts = _lib.GraphOpts(ctypes.sizeof(_lib.GraphOpts), name.encode() if name else None)
        out = ctypes.c_void_p()
        check(_lib_.cg_graph_create(ctypes.byref(out), ctypes.byref(opts)), "commgraph.Graph")
        self._handle = out
        self.title = name
        self._keep = []  # buffers, host functions, communicators
        _registry.track(self)

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("commgraph: the graph is closed")
        return self._handle

    # ---- helpers

    def _comm(self, comm):
        if not isinstance(comm, Comm):
            raise TypeError(f"commgraph: comm must be a commgraph.Comm, not {type(comm).__name__}")
        self._keep.append(comm)
        return comm.handle

    def _buffers(self, send, recv, what):
        s = resolve(send, f"{what}'s send buffer") if send is not None else None
        r = resolve(recv, f"{what}'s receive buffer") if recv is not None else None
        if s is not None and r is not None and s.dtype != r.dtype:
            raise TypeError(f"commgraph: {what}: send holds {s.dtype} and recv {r.dtype}")
        if r is not None and r.readonly:
            raise ValueError(f"commgraph: {what}: the receive buffer is read-only")
        self._keep.extend(b.owner for b in (s, r) if b is not None)
        return s, r

    def _record(self, kind, fn, *args, send=None, recv=None):
        out = _lib.Node()
        check(fn(ctypes.byref(out), self.handle, *args), f"commgraph.Graph.{kind}")
        return Node(self, out, kind, send, recv)

    @staticmethod
    def _count(buffer, per, what, side):
        if buffer.count % per:
            raise ValueError(f"commgraph: {what}: the {side} buffer holds {buffer.count} elements, not a multiple "
                             f"of the communicator's {per} ranks")
        return buffer.count // per

    @staticmethod
    def _same(a, b, what):
        if a.count != b.count:
            raise ValueError(f"commgraph: {what}: send holds {a.count} elements and recv {b.count}")

    # ---- collectives

    def allreduce(self, comm, send, recv=None, op="sum"):
        """recv = op over every rank's send (recv None: in place)."""
        s, r = self._buffers(send, recv, "allreduce")
        r = r or s
        self._same(s, r, "allreduce")
        return self._record("allreduce", _lib_.cg_allreduce, self._comm(comm), s.ptr, r.ptr, s.count,
                            _lib.DTYPES.index(s.dtype), _op(op), send=s, recv=r)

    def broadcast(self, comm, buf, root, recv=None):
        """root's `buf` to every rank's recv (recv None: into `buf` itself)."""
        s, r = self._buffers(buf, recv, "broadcast")
        r = r or s
        self._same(s, r, "broadcast")
        return self._record("broadcast", _lib_.cg_broadcast, self._comm(comm), s.ptr, r.ptr, s.count,
                            _lib.DTYPES.index(s.dtype), _rank(root, comm, "root"), send=s, recv=r)

    def reduce(self, comm, send, recv=None, op="sum", root=0):
        """recv on root = op over every rank's send; recv ignored elsewhere (None: in place on root)."""
        s, r = self._buffers(send, recv, "reduce")
        r = r or s
        self._same(s, r, "reduce")
        return self._record("reduce", _lib_.cg_reduce, self._comm(comm), s.ptr, r.ptr, s.count,
                            _lib.DTYPES.index(s.dtype), _op(op), _rank(root, comm, "root"), send=s, recv=r)

    def allgather(self, comm, send, recv):
        """recv = every rank's send, in rank order (recv holds size x send)."""
        s, r = self._buffers(send, recv, "allgather")
        if r.count != s.count * comm.size:
            raise ValueError(f"commgraph: allgather: recv holds {r.count} elements, not {comm.size} x {s.count}")
        return self._record("allgather", _lib_.cg_allgather, self._comm(comm), s.ptr, r.ptr, s.count,
                            _lib.DTYPES.index(s.dtype), send=s, recv=r)

    def reduce_scatter(self, comm, send, recv, op="sum"):
        """recv = block `rank` of op over every rank's send (send holds size x recv)."""
        s, r = self._buffers(send, recv, "reduce_scatter")
        if s.count != r.count * comm.size:
            raise ValueError(f"commgraph: reduce_scatter: send holds {s.count} elements, not {comm.size} x "
                             f"{r.count}")
        return self._record("reduce_scatter", _lib_.cg_reduce_scatter, self._comm(comm), s.ptr, r.ptr, r.count,
                            _lib.DTYPES.index(s.dtype), _op(op), send=s, recv=r)

    def alltoall(self, comm, send, recv):
        """block j of send to rank j, block i of recv from rank i."""
        s, r = self._buffers(send, recv, "alltoall")
        self._same(s, r, "alltoall")
        per = self._count(s, comm.size, "alltoall", "send")
        return self._record("alltoall", _lib_.cg_alltoall, self._comm(comm), s.ptr, r.ptr, per,
                            _lib.DTYPES.index(s.dtype), send=s, recv=r)

    def gather(self, comm, send, recv, root=0):
        """recv on root = every rank's send in rank order; recv may be None elsewhere."""
        s, r = self._buffers(send, recv, "gather")
        if r is not None and comm.rank == root and r.count != s.count * comm.size:
            raise ValueError(f"commgraph: gather: recv holds {r.count} elements, not {comm.size} x {s.count}")
        return self._record("gather", _lib_.cg_gather, self._comm(comm), s.ptr, r.ptr if r else None, s.count,
                            _lib.DTYPES.index(s.dtype), _rank(root, comm, "root"), send=s, recv=r)

    def scatter(self, comm, send, recv, root=0):
        """block i of root's send to rank i's recv; send may be None off the root."""
        s, r = self._buffers(send, recv, "scatter")
        if s is not None and comm.rank == root and s.count != r.count * comm.size:
            raise ValueError(f"commgraph: scatter: send holds {s.count} elements, not {comm.size} x {r.count}")
        return self._record("scatter", _lib_.cg_scatter, self._comm(comm), s.ptr if s else None, r.ptr, r.count,
                            _lib.DTYPES.index(r.dtype), _rank(root, comm, "root"), send=s, recv=r)

    def send(self, comm, buf, peer):
        """buf to rank `peer` (which records a matching recv)."""
        s, _ = self._buffers(buf, None, "send")
        return self._record("send", _lib_.cg_send, self._comm(comm), s.ptr, s.count, _lib.DTYPES.index(s.dtype),
                            _rank(peer, comm, "peer"), send=s)

    def recv(self, comm, buf, peer):
        """buf from rank `peer` (which records a matching send)."""
        _, r = self._buffers(None, buf, "recv")
        return self._record("recv", _lib_.cg_recv, self._comm(comm), r.ptr, r.count, _lib.DTYPES.index(r.dtype),
                            _rank(peer, comm, "peer"), recv=r)

    def barrier(self, comm):
        return self._record("barrier", _lib_.cg_barrier, self._comm(comm))

    def host_func(self, fn, reads=None, writes=None):
        """fn() on the host when the plan reaches it (host plans: on the thread
        that runs the plan; device plans: a CUDA host node, which must not call
        CUDA). reads, writes: the buffers it touches, so it is ordered with
        the nodes that touch them; both None: it may touch anything (a fence).
        An exception it raises comes out of the run, wait or test that ran it."""
        if not callable(fn):
            raise TypeError(f"commgraph: host_func needs a callable, not {type(fn).__name__}")
        errors = self._errors

        def trampoline(_arg):
            try:
                fn()
            except BaseException as e:  # noqa: B902 -- carried to the caller of run/wait
                errors.append(e)

        c_fn = _lib.HOST_FN(trampoline)
        access = _lib.Access(ctypes.sizeof(_lib.Access), 1, None, 0, None, 0)
        if reads is not None or writes is not None:
            rs = [resolve(b, "host_func's read buffer") for b in (reads or [])]
            ws = [resolve(b, "host_func's write buffer") for b in (writes or [])]
            self._keep.extend(b.owner for b in rs + ws)
            r_ranges, w_ranges = _ranges(rs), _ranges(ws)
            self._keep.extend((r_ranges, w_ranges))
            access = _lib.Access(ctypes.sizeof(_lib.Access), 0, r_ranges, len(rs), w_ranges, len(ws))
        self._keep.append(c_fn)
        return self._record("host_func", _lib_.cg_host_func, c_fn, None, ctypes.byref(access))

    # ---- structure

    def depend(self, before, after):
        """`after` starts only once `before` is done."""
        for node in (before, after):
            if not isinstance(node, Node):
                raise TypeError(f"commgraph: depend takes nodes, not {type(node).__name__}")
        check(_lib_.cg_depend(self.handle, before.c, after.c), "commgraph.Graph.depend")

    def name(self, node, name):
        """Names `node` in DOT, dumps and error details."""
        if not isinstance(node, Node):
            raise TypeError(f"commgraph: name takes a node, not {type(node).__name__}")
        check(_lib_.cg_node_name(self.handle, node.c, str(name).encode()), "commgraph.Graph.name")
        return node

    @property
    def stats(self):
        """Node and edge counts (a dict)."""
        s = _lib.GraphStats()
        check(_lib_.cg_graph_stats(ctypes.byref(s), self.handle), "commgraph.Graph.stats")
        out = {name: getattr(s, name) for name, _ in _lib.GraphStats._fields_ if name != "nodes_by_kind"}
        out["nodes_by_kind"] = {kind: s.nodes_by_kind[i] for i, kind in enumerate(_lib.NODE_KINDS)
                                if s.nodes_by_kind[i]}
        return out

    def dot(self):
        """The graph in Graphviz DOT."""
        text, status = _lib.to_text(_lib_.cg_graph_write_dot, self.handle)
        check(status, "commgraph.Graph.dot")
        return text

    def compile(self, **opts):
        """Compiles the graph into a Plan (collective; see commgraph.Plan for the options)."""
        from .plan import Plan
        return Plan(self, **opts)

    def close(self):
        """Frees the graph; plans compiled from it stay valid."""
        if self._handle:
            _lib_.cg_graph_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def _errors(self):
        if not hasattr(self, "_host_errors"):
            self._host_errors = []
        return self._host_errors
