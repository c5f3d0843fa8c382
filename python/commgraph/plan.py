"""Plans: a graph compiled once, replayed every iteration."""
import ctypes
import sys

from . import _lib
from .buffers import resolve
from .errors import Error, check

_lib_ = _lib.lib


def _compile_opts(check_ranks=True, name=None, fusion=True, bucket_bytes=0, timeout=0.0, tuning_file=None,
                  fingerprint=True):
    keep = []

    def text(value):
        if value is None:
            return None
        encoded = str(value).encode()
        keep.append(encoded)
        return encoded

    if int(bucket_bytes) < 0:
        raise ValueError("commgraph: bucket_bytes must be 0 (the default) or positive")
    opts = _lib.CompileOpts(ctypes.sizeof(_lib.CompileOpts), int(bool(check_ranks)), text(name), int(bool(fusion)),
                            int(bucket_bytes), float(timeout), text(tuning_file), int(bool(fingerprint)))
    return opts, keep


def current_stream():
    """PyTorch's current CUDA stream (its cudaStream_t), or 0 without PyTorch."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream().cuda_stream
    return 0


class Plan:
    """Plan(graph, *, check_ranks=True, name=None, fusion=True,
            bucket_bytes=0, timeout=0.0, tuning_file=None, fingerprint=True)

    cg_compile's options (include/commgraph/plan.h): the cross-rank check,
    a name, fusion into buckets of at most bucket_bytes (0: the backend's
    choice), the replay watchdog's timeout in seconds (0: CG_TIMEOUT, < 0:
    none), a tuning file, the replay's fingerprint. Collective: every rank
    of every communicator the graph uses compiles, in the same order."""

    def __init__(self, graph, **opts):
        from . import _registry
        from .graph import Graph
        if not isinstance(graph, Graph):
            raise TypeError(f"commgraph: Plan compiles a commgraph.Graph, not {type(graph).__name__}")
        c_opts, keep = _compile_opts(**opts)
        out = ctypes.c_void_p()
        check(_lib_.cg_compile(ctypes.byref(out), graph.handle, ctypes.byref(c_opts)), "commgraph.compile")
        self._handle = out
        self._keep = list(graph._keep) + keep
        self._errors = graph._errors
        _registry.track(self)

    @classmethod
    def _adopt(cls, handle, keep, errors):
        from . import _registry
        plan = cls.__new__(cls)
        plan._handle, plan._keep, plan._errors = handle, keep, errors
        _registry.track(plan)
        return plan

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("commgraph: the plan is closed")
        return self._handle

    def _host_errors(self):
        if self._errors:
            error = self._errors.pop(0)
            self._errors.clear()
            raise error

    def run(self):
        """One replay, waited for (host plans; device plans too, on the plan's own stream)."""
        status = _lib_.cg_plan_run(self.handle)
        self._host_errors()
        check(status, "commgraph.Plan.run")

    def start(self):
        """Starts one replay; finish it with test() or wait()."""
        check(_lib_.cg_plan_start(self.handle), "commgraph.Plan.start")

    def test(self):
        """Progresses the started replay; True once it is done."""
        done = ctypes.c_int()
        status = _lib_.cg_plan_test(ctypes.byref(done), self.handle)
        self._host_errors()
        check(status, "commgraph.Plan.test")
        return bool(done.value)

    def wait(self):
        """Waits for the started replay."""
        status = _lib_.cg_plan_wait(self.handle)
        self._host_errors()
        check(status, "commgraph.Plan.wait")

    def launch(self, stream=None):
        """Enqueues one replay of a device plan on `stream` (a cudaStream_t as
        an int, a torch.cuda.Stream, or None: PyTorch's current stream). Inside
        torch.cuda.graph(...) capture it adds the plan to the captured graph."""
        if not _lib.has("cg_plan_launch"):
            raise Error("commgraph.Plan.launch: this libcommgraph was built without CUDA", 10)
        if stream is None:
            stream = current_stream()
        handle = getattr(stream, "cuda_stream", stream)
        if not isinstance(handle, int):
            raise TypeError(f"commgraph: stream must be an int handle, a torch.cuda.Stream or None, not "
                            f"{type(stream).__name__}")
        check(_lib_.cg_plan_launch(self.handle, ctypes.c_void_p(handle)), "commgraph.Plan.launch")

    def rebind(self, bindings):
        """Points recorded nodes at other buffers of the same size and type:
        {node: (send, recv)} (recv None: in place), or a list of such triples
        (node, send, recv). Local; the plan must not be running."""
        items = list(bindings.items()) if isinstance(bindings, dict) else [(n, (s, r)) for n, s, r in bindings]
        binds = (_lib.Rebind * max(1, len(items)))()
        keep = []
        for i, (node, pair) in enumerate(items):
            send, recv = pair
            s = resolve(send, "rebind's send buffer") if send is not None else None
            r = resolve(recv, "rebind's receive buffer") if recv is not None else s
            for new, old, side in ((s, node.send, "send"), (r, node.recv, "receive")):
                if new is not None and old is not None and (new.count, new.dtype) != (old.count, old.dtype):
                    raise ValueError(f"commgraph: rebind of node #{node.index} ({node.kind}): the new {side} buffer "
                                     f"holds {new.count} x {new.dtype}, the recorded one {old.count} x {old.dtype}")
            keep.extend(b.owner for b in (s, r) if b is not None)
            binds[i] = _lib.Rebind(node.c, s.ptr if s else None, r.ptr if r else None)
        check(_lib_.cg_plan_rebind(self.handle, binds, len(items)), "commgraph.Plan.rebind")
        self._keep.extend(keep)

    def tune(self, graph, replays=5, stream=None, **compile_opts):
        """A new plan of `graph` with buckets sized from profiled replays of
        this one (collective). stream: device plans, where to replay."""
        c_opts, keep = _compile_opts(**compile_opts)
        opts = _lib.TuneOpts(ctypes.sizeof(_lib.TuneOpts), int(replays),
                             ctypes.c_void_p(getattr(stream, "cuda_stream", stream) or 0), c_opts)
        out = ctypes.c_void_p()
        check(_lib_.cg_plan_tune(ctypes.byref(out), self.handle, graph.handle, ctypes.byref(opts)),
              "commgraph.Plan.tune")
        return Plan._adopt(out, list(graph._keep) + keep, graph._errors)

    def save_tuning(self, path):
        check(_lib_.cg_plan_save_tuning(self.handle, str(path).encode()), "commgraph.Plan.save_tuning")

    def trace(self, path, replays=5, stream=None):
        """Writes a Chrome trace of profiled replays (collective)."""
        opts = _lib.TraceOpts(ctypes.sizeof(_lib.TraceOpts), int(replays),
                              ctypes.c_void_p(getattr(stream, "cuda_stream", stream) or 0))
        check(_lib_.cg_plan_trace(self.handle, str(path).encode(), ctypes.byref(opts)), "commgraph.Plan.trace")

    @property
    def stats(self):
        """Steps, lanes, buckets, ... (a dict; device None for a host plan)."""
        s = _lib.PlanStats()
        check(_lib_.cg_plan_stats(ctypes.byref(s), self.handle), "commgraph.Plan.stats")
        out = {name: getattr(s, name) for name, _ in _lib.PlanStats._fields_}
        out["device"] = None if out["device"] == _lib.DEVICE_HOST else out["device"]
        return out

    @property
    def timeout(self):
        seconds = ctypes.c_double()
        check(_lib_.cg_plan_timeout(ctypes.byref(seconds), self.handle))
        return seconds.value

    def dot(self):
        """The plan in Graphviz DOT (lanes, steps, buckets)."""
        text, status = _lib.to_text(_lib_.cg_plan_write_dot, self.handle)
        check(status, "commgraph.Plan.dot")
        return text

    def dump(self):
        """The plan as text: steps, dependencies, buckets."""
        text, status = _lib.to_text(_lib_.cg_plan_dump, self.handle)
        check(status, "commgraph.Plan.dump")
        return text

    def close(self):
        if self._handle:
            _lib_.cg_plan_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
