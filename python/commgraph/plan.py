"""Plans: a graph compiled once, replayed every iteration."""
import ctypes
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import _lib
from ._owned import Collected
from .drawing import Drawable
from .buffers import Buffer, resolve
from .errors import UnsupportedError, check

_lib_ = _lib.lib

# Plans launched into a CUDA graph capture: the user's graph replays them
# (and their host functions and buffers) for as long as it lives, which
# Python cannot see; they stay until closed explicitly or at exit.
_embedded: set = set()


def _compile_opts(check_ranks: bool = True, name: Optional[str] = None, fusion: bool = True, bucket_bytes: int = 0,
                  timeout: float = 0.0, tuning_file: Optional[str] = None, fingerprint: bool = True):
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


def current_stream() -> int:
    """PyTorch's current CUDA stream (its cudaStream_t), or 0 without PyTorch."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream().cuda_stream
    return 0


def _capturing(stream: Any) -> bool:
    """Whether PyTorch captures `stream` (None: its current stream) into a
    CUDA graph; False without PyTorch."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return False
    if isinstance(stream, torch.cuda.Stream):
        with torch.cuda.stream(stream):
            return bool(torch.cuda.is_current_stream_capturing())
    return bool(torch.cuda.is_current_stream_capturing())


def _stream_handle(stream: Any) -> int:
    handle = getattr(stream, "cuda_stream", stream)
    if handle is None:
        return 0
    if not isinstance(handle, int):
        raise TypeError(f"commgraph: stream must be an int handle, a torch.cuda.Stream or None, not "
                        f"{type(stream).__name__}")
    return handle


Bindings = Union[Mapping[Any, Tuple[Any, Any]], Iterable[Tuple[Any, Any, Any]]]


class Plan(Collected, Drawable):
    """Plan(graph, *, check_ranks=True, name=None, fusion=True,
            bucket_bytes=0, timeout=0.0, tuning_file=None, fingerprint=True)

    cg_compile's options (include/commgraph/plan.h): the cross-rank check,
    a name, fusion into buckets of at most bucket_bytes (0: the backend's
    choice), the replay watchdog's timeout in seconds (0: CG_TIMEOUT, < 0:
    none), a tuning file, the replay's fingerprint. Collective: every rank
    of every communicator the graph uses compiles, in the same order. A
    plan is freed when collected, except one launched into a capture."""

    _what, _destroy = "plan", "cg_plan_destroy"

    def __init__(self, graph: "Graph", **opts: Any) -> None:  # noqa: F821 -- graph.Graph
        from .graph import Graph
        if not isinstance(graph, Graph):
            raise TypeError(f"commgraph: Plan compiles a commgraph.Graph, not {type(graph).__name__}")
        c_opts, keep = _compile_opts(**opts)
        out = ctypes.c_void_p()
        check(_lib_.cg_compile(ctypes.byref(out), graph.handle, ctypes.byref(c_opts)), "commgraph.compile")
        self._adopt_state(out, list(graph._keep) + keep, graph._host_errors)

    def _adopt_state(self, handle: ctypes.c_void_p, keep: List[Any], errors: List[BaseException]) -> None:
        self._keep = keep
        self._errors = errors
        self._bound: Dict[int, Tuple[Any, ...]] = {}  # node index -> the owners a rebind put there
        self._own(handle)

    @classmethod
    def _adopt(cls, handle: ctypes.c_void_p, keep: List[Any], errors: List[BaseException]) -> "Plan":
        plan = cls.__new__(cls)
        plan._adopt_state(handle, keep, errors)
        return plan

    def _host_errors(self) -> None:
        if self._errors:
            error = self._errors.pop(0)
            self._errors.clear()
            raise error

    def _device_first(self) -> None:
        """A device plan's own replay runs on a stream of the plan's: the
        work PyTorch queued on its current stream (filling the buffers) must
        be done first."""
        if not hasattr(self, "_device"):
            self._device = self.stats["device"]
        torch = sys.modules.get("torch")
        if self._device is not None and torch is not None and torch.cuda.is_available():
            torch.cuda.current_stream(self._device).synchronize()

    def run(self) -> None:
        """One replay, waited for. A device plan replays on a stream of its
        own, after PyTorch's current stream has finished what it holds (use
        launch() to stay on the stream)."""
        self._device_first()
        status = _lib_.cg_plan_run(self.handle)
        self._host_errors()
        check(status, "commgraph.Plan.run")

    def start(self) -> None:
        """Starts one replay; finish it with test() or wait()."""
        self._device_first()
        check(_lib_.cg_plan_start(self.handle), "commgraph.Plan.start")

    def test(self) -> bool:
        """Progresses the started replay; True once it is done."""
        done = ctypes.c_int()
        status = _lib_.cg_plan_test(ctypes.byref(done), self.handle)
        self._host_errors()
        check(status, "commgraph.Plan.test")
        return bool(done.value)

    def wait(self) -> None:
        """Waits for the started replay."""
        status = _lib_.cg_plan_wait(self.handle)
        self._host_errors()
        check(status, "commgraph.Plan.wait")

    def launch(self, stream: Any = None) -> None:
        """Enqueues one replay of a device plan on `stream` (a cudaStream_t as
        an int, a torch.cuda.Stream, or None: PyTorch's current stream); the
        host does not wait. Inside a capture (torch.cuda.graph) it adds the
        plan to the captured graph, which then replays it: the plan is kept
        until closed explicitly (close it after the graph that holds it)."""
        if not _lib.has("cg_plan_launch"):
            raise UnsupportedError("commgraph.Plan.launch: this libcommgraph was built without CUDA")
        handle = current_stream() if stream is None else _stream_handle(stream)
        check(_lib_.cg_plan_launch(self.handle, ctypes.c_void_p(handle)), "commgraph.Plan.launch")
        if _capturing(stream):
            _embedded.add(self)

    def rebind(self, bindings: Bindings) -> None:
        """Points recorded nodes at other buffers of the same size and type:
        {node: (send, recv)} or triples (node, send, recv). For an in-place
        node recv may be None (the new send takes its place); a send node
        takes only send, a recv node only recv (or its buffer as send).
        Local; the plan must not be running."""
        items = list(bindings.items()) if isinstance(bindings, Mapping) else [(n, (s, r)) for n, s, r in bindings]
        binds = (_lib.Rebind * max(1, len(items)))()
        owners: Dict[int, Tuple[Any, ...]] = {}
        for i, (node, (send, recv)) in enumerate(items):
            s, r = self._rebound(node, send, recv)
            owners[node.index] = tuple(b.owner for b in (s, r) if b is not None)
            binds[i] = _lib.Rebind(node.c, s.ptr if s else None, r.ptr if r else None)
        check(_lib_.cg_plan_rebind(self.handle, binds, len(items)), "commgraph.Plan.rebind")
        self._bound.update(owners)  # the buffers a node no longer uses may go

    @staticmethod
    def _rebound(node: Any, send: Any, recv: Any) -> Tuple[Optional[Buffer], Optional[Buffer]]:
        from .graph import Node
        if not isinstance(node, Node):
            raise TypeError(f"commgraph: rebind takes nodes, not {type(node).__name__}")
        what = f"rebind of node #{node.index} ({node.kind})"
        if node.kind == "recv" and recv is None:
            send, recv = None, send
        s = resolve(send, f"{what}'s send buffer") if send is not None and node.kind != "recv" else None
        in_place = node.send is not None and node.recv is node.send
        if recv is None and in_place:
            r = s
        else:
            r = resolve(recv, f"{what}'s receive buffer") if recv is not None and node.kind != "send" else None
        for new, old, side in ((s, node.send, "send"), (r, node.recv, "receive")):
            if old is not None and new is None:
                raise TypeError(f"commgraph: {what} needs a new {side} buffer")
            if new is not None and old is not None and (new.count, new.dtype) != (old.count, old.dtype):
                raise ValueError(f"commgraph: {what}: the new {side} buffer holds {new.count} x {new.dtype}, the "
                                 f"recorded one {old.count} x {old.dtype}")
        if r is not None and r.readonly:
            raise ValueError(f"commgraph: {what}: the buffer it writes is read-only")
        return s, r

    def tune(self, graph: "Graph", replays: int = 5, stream: Any = None, **compile_opts: Any) -> "Plan":  # noqa: F821
        """A new plan of `graph` with buckets sized from profiled replays of
        this one (collective). stream: device plans, where to replay."""
        c_opts, keep = _compile_opts(**compile_opts)
        opts = _lib.TuneOpts(ctypes.sizeof(_lib.TuneOpts), int(replays), ctypes.c_void_p(_stream_handle(stream)),
                             c_opts)
        out = ctypes.c_void_p()
        check(_lib_.cg_plan_tune(ctypes.byref(out), self.handle, graph.handle, ctypes.byref(opts)),
              "commgraph.Plan.tune")
        return Plan._adopt(out, list(graph._keep) + keep, graph._host_errors)

    def save_tuning(self, path: str) -> None:
        """Writes the plan's tuning for compile(tuning_file=...) in a later run."""
        check(_lib_.cg_plan_save_tuning(self.handle, str(path).encode()), "commgraph.Plan.save_tuning")

    def trace(self, path: str, replays: int = 5, stream: Any = None) -> None:
        """Writes a Chrome trace (Perfetto) of profiled replays (collective)."""
        opts = _lib.TraceOpts(ctypes.sizeof(_lib.TraceOpts), int(replays), ctypes.c_void_p(_stream_handle(stream)))
        check(_lib_.cg_plan_trace(self.handle, str(path).encode(), ctypes.byref(opts)), "commgraph.Plan.trace")

    @property
    def stats(self) -> Dict[str, Any]:
        """Steps, lanes, buckets, ... (cg_plan_stats_t as a dict; device None for a host plan)."""
        s = _lib.PlanStats()
        check(_lib_.cg_plan_stats(ctypes.byref(s), self.handle), "commgraph.Plan.stats")
        out = {name: getattr(s, name) for name, _ in _lib.PlanStats._fields_}
        out["device"] = None if out["device"] == _lib.DEVICE_HOST else out["device"]
        return out

    @property
    def timeout(self) -> float:
        """The replay watchdog's timeout in seconds (0: none)."""
        seconds = ctypes.c_double()
        check(_lib_.cg_plan_timeout(ctypes.byref(seconds), self.handle))
        return seconds.value

    def dot(self) -> str:
        """The plan in Graphviz DOT (lanes, steps, buckets)."""
        text, status = _lib.to_text(_lib_.cg_plan_write_dot, self.handle)
        check(status, "commgraph.Plan.dot")
        return text

    def dump(self) -> str:
        """The plan as text: steps, dependencies, buckets."""
        text, status = _lib.to_text(_lib_.cg_plan_dump, self.handle)
        check(status, "commgraph.Plan.dump")
        return text

    def close(self) -> None:
        """Frees the plan (a device plan waits for its replays); graphs that
        embed it must be gone first."""
        _embedded.discard(self)
        super().close()
