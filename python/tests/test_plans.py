"""Plans from Python: replays read the buffers afresh, start/test/wait,
rebinding, host functions in order and their exceptions, fusion statistics,
DOT and dumps, arenas, random graphs against a NumPy reference executor,
and the errors a user meets (the cross-rank check among them)."""
import numpy as np
import pytest

import commgraph as cg
from conftest import integers, rng_for


def test_comm_describes_itself(world):
    assert 0 <= world.rank < world.size
    assert world.size >= 2
    assert world.backend == "mpi"
    assert world.device is None
    assert f"rank {world.rank} of {world.size}" in repr(world)
    offline = cg.Comm.offline(1, 3)
    assert (offline.rank, offline.size, offline.backend) == (1, 3, "offline")
    offline.close()
    assert "closed" in repr(offline)


def test_every_replay_reads_the_buffers_again(world):
    grads = np.zeros(64, np.float32)
    graph = cg.Graph("replays")
    graph.allreduce(world, grads, op="sum")
    with graph.compile(timeout=60) as plan:
        for step in range(5):
            grads[:] = world.rank + step
            plan.run()
            assert (grads == sum(r + step for r in range(world.size))).all()
        grads[:] = 1
        plan.start()
        while not plan.test():
            pass
        assert (grads == world.size).all()
        grads[:] = 2
        plan.start()
        with pytest.raises(cg.InProgressError):
            plan.start()
        plan.wait()
        assert (grads == 2 * world.size).all()


def test_rebind_moves_a_node_to_other_arrays(world):
    a, b = np.full(10, world.rank, np.int32), np.full(10, 10 * world.rank, np.int32)
    graph = cg.Graph("rebind")
    node = graph.allreduce(world, a)
    with graph.compile(timeout=60) as plan:
        plan.rebind({node: (b, None)})
        plan.run()
        assert (b == 10 * sum(range(world.size))).all()
        assert (a == world.rank).all()
        with pytest.raises(ValueError):
            plan.rebind({node: (np.zeros(11, np.int32), None)})  # another size
        with pytest.raises(ValueError):
            plan.rebind([(node, np.zeros(10, np.float32), None)])  # another type


def test_host_functions_run_in_order_and_carry_exceptions(world):
    order = []
    buf = np.zeros(4, np.float64)
    graph = cg.Graph("host")
    first = graph.host_func(lambda: (order.append("fill"), buf.fill(world.rank + 1)), writes=[buf])
    reduce = graph.allreduce(world, buf, op="max")
    graph.host_func(lambda: order.append(("read", float(buf[0]))), reads=[buf])
    graph.name(first, "fill")
    with graph.compile(timeout=60) as plan:
        plan.run()
        assert order == ["fill", ("read", float(world.size))]
        assert reduce.kind == "allreduce"
    boom = cg.Graph("boom")
    boom.host_func(lambda: 1 / 0)
    boom.barrier(world)
    with boom.compile(timeout=60) as plan:
        with pytest.raises(ZeroDivisionError):
            plan.run()


def test_small_allreduces_fuse_into_buckets(world):
    tensors = [np.full(100, k, np.float32) for k in range(20)]
    graph = cg.Graph("fused")
    for t in tensors:
        graph.allreduce(world, t)
    with graph.compile(timeout=60) as plan:
        stats = plan.stats
        assert stats["buckets"] >= 1 and stats["fused_nodes"] == 20
        assert stats["device"] is None
        plan.run()
    for k, t in enumerate(tensors):
        assert (t == k * world.size).all()
    with graph.compile(timeout=60, fusion=False) as plan:
        assert plan.stats["buckets"] == 0


def test_arena_pieces_fuse_without_copies(world):
    with cg.Arena(1 << 16) as arena:
        pieces = [arena.empty((10, 3), "float32") for _ in range(4)]
        assert arena.usage[0] == 4 * 30 * 4
        for k, p in enumerate(pieces):
            p[:] = k + world.rank
        graph = cg.Graph("arena")
        for p in pieces:
            graph.allreduce(world, p)
        with graph.compile(timeout=60) as plan:
            assert plan.stats["buckets"] == 1 and plan.stats["copy_bytes"] == 0
            plan.run()
        for k, p in enumerate(pieces):
            assert (p == sum(k + r for r in range(world.size))).all()


def test_a_symmetric_arena_needs_an_nccl_communicator(world):
    # NCCL symmetric memory: an MPI communicator has none (refused before any allocation)
    with pytest.raises(cg.UnsupportedError) as caught:
        cg.Arena(1 << 10, symmetric=world)
    assert "nccl" in str(caught.value).lower() or "NCCL" in str(caught.value)
    with pytest.raises(TypeError):
        cg.Arena(1 << 10, symmetric="world")
    # a plain arena has no symmetric cut-over
    with cg.Arena(1 << 10) as plain:
        with pytest.raises(cg.UnsupportedError) as caught:
            plain.symmetric_max("float32")
        assert "symmetric" in str(caught.value)
        with pytest.raises(TypeError):
            plain.symmetric_max("complex64")


def test_dot_and_dump_name_the_nodes(world):
    x = np.zeros(8, np.float32)
    graph = cg.Graph("drawn")
    graph.name(graph.allreduce(world, x), "layer1.grad")
    assert "layer1.grad" in graph.dot() and graph.dot().startswith("digraph")
    with graph.compile(timeout=60, name="drawn plan") as plan:
        assert plan.dot().startswith("digraph") and "layer1.grad" in plan.dot()
        assert "layer1.grad" in plan.dump()
        assert plan.timeout == 60


def test_drawings_to_files_and_svg(world, tmp_path, monkeypatch):
    import io
    from commgraph import drawing
    x = np.zeros(8, np.float32)
    graph = cg.Graph("drawn")
    graph.name(graph.allreduce(world, x), "layer1.grad")
    with graph.compile(timeout=60) as plan:
        for drawn in (graph, plan):
            path = tmp_path / f"{type(drawn).__name__}.dot"
            drawn.write_dot(path)
            assert path.read_text() == drawn.dot()
            text = io.StringIO()
            drawn.write_dot(text)
            assert text.getvalue() == drawn.dot()
            if drawing.dot_program() is None:  # CI installs graphviz (scripts/install-deps)
                continue
            svg = drawn.svg()
            assert "<svg" in svg and "layer1.grad" in svg
            drawn.write_svg(tmp_path / "drawn.svg")
            assert (tmp_path / "drawn.svg").read_text() == svg
            assert drawn._repr_svg_() == svg
        if drawing.dot_program() is not None:
            with pytest.raises(RuntimeError, match="dot -Tsvg failed"):
                drawing.render_svg("digraph {")
        monkeypatch.setenv("PATH", str(tmp_path))  # no dot there
        with pytest.raises(FileNotFoundError, match="graphviz"):
            plan.svg()
        assert plan._repr_svg_() is None
    assert plan._repr_svg_() is None  # closed


def test_the_cross_rank_check_names_the_difference(world):
    n = 8 if world.rank == 0 else 9
    graph = cg.Graph("differ")
    graph.name(graph.allreduce(world, np.zeros(n, np.float32)), "odd one")
    with pytest.raises(cg.MismatchError) as caught:
        graph.compile(timeout=60)
    assert "#0 'odd one'" in caught.value.message, caught.value.message
    assert caught.value.status == 12 and caught.value.status_name == "CG_ERR_MISMATCH"


def test_bad_arguments_raise_before_any_call(world):
    graph = cg.Graph("bad")
    x = np.zeros(6, np.float32)
    with pytest.raises(TypeError):
        graph.allreduce(world, [1.0, 2.0])
    with pytest.raises(TypeError):
        graph.allreduce(world, np.zeros(4, np.complex64))
    with pytest.raises(TypeError):
        graph.allreduce(world, np.zeros(4, bool))
    with pytest.raises(ValueError):
        graph.allreduce(world, np.zeros((4, 4), np.float32)[:, 1])  # strided
    with pytest.raises(ValueError):
        graph.allreduce(world, x, op="mean")
    with pytest.raises(TypeError):
        graph.allreduce(world, x, np.zeros(6, np.float64))
    with pytest.raises(ValueError):
        graph.allreduce(world, x, np.zeros(5, np.float32))
    readonly = np.zeros(6, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError):
        graph.allreduce(world, x, readonly)
    with pytest.raises(ValueError):
        graph.reduce_scatter(world, x, np.zeros(5, np.float32))
    with pytest.raises(TypeError):
        graph.allreduce("world", x)
    with pytest.raises(cg.OutOfRangeError):
        graph.broadcast(world, x, world.size)
    with pytest.raises(ValueError):
        cg.Comm(backend="carrier pigeon")
    with pytest.raises(TypeError):
        cg.Comm("MPI_COMM_WORLD")
    with pytest.raises(TypeError):
        graph.depend(1, 2)
    graph.close()
    with pytest.raises(ValueError):
        graph.allreduce(world, x)


def test_buffers_through_array_interfaces_and_dlpack(world):
    class Interface:
        def __init__(self, a):
            self.a = a
            self.__array_interface__ = a.__array_interface__

    a = np.full(5, world.rank, np.int64)
    b = np.full(5, world.rank, np.int64)
    c = np.full(5, world.rank, np.int64)
    graph = cg.Graph("interfaces")
    graph.allreduce(world, Interface(a))
    graph.allreduce(world, cg.resolve(b))
    if hasattr(c, "__dlpack__"):
        graph.allreduce(world, _DLPackOnly(c))
    else:
        graph.allreduce(world, c)
    with graph.compile(timeout=60) as plan:
        plan.run()
    total = sum(range(world.size))
    assert (a == total).all() and (b == total).all() and (c == total).all()


class _DLPackOnly:
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


KINDS = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "gather", "scatter"]


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_match_a_numpy_reference(world, seed):
    """A random sequence of collectives on shared arrays, the same on every
    rank (the seed), compiled with fusion, replayed twice; a NumPy executor
    runs the same sequence over every rank's copy."""
    rng = np.random.default_rng(seed)
    n_arrays, n = 4, 6 * world.size
    dtype = rng.choice(["int32", "int64", "float32", "float64"])
    start = []
    for r in range(world.size):
        values = rng_for(seed, r)  # one stream per rank: every array of it different
        start.append([integers(values, n, dtype) for _ in range(n_arrays)])
    mine = [a.copy() for a in start[world.rank]]
    ref = [[a.copy() for a in arrays] for arrays in start]
    graph = cg.Graph(f"random {seed}")
    steps = []
    for _ in range(int(rng.integers(3, 9))):
        kind, op = rng.choice(KINDS), rng.choice(["sum", "min", "max"])
        i, j = (int(v) for v in rng.choice(n_arrays, 2, replace=False))
        root = int(rng.integers(world.size))
        steps.append((kind, op, i, j, root))
        a, b = mine[i], mine[j]
        if kind == "allreduce":
            graph.allreduce(world, a, b, op=op)
        elif kind == "broadcast":
            graph.broadcast(world, a, root, b)
        elif kind == "reduce":
            graph.reduce(world, a, b, op=op, root=root)
        elif kind == "allgather":
            graph.allgather(world, a[:6], b)
        elif kind == "reduce_scatter":
            graph.reduce_scatter(world, a, b[:6], op=op)
        elif kind == "gather":
            graph.gather(world, a[:6], b if world.rank == root else None, root=root)
        elif kind == "scatter":
            graph.scatter(world, a if world.rank == root else None, b[:6], root=root)
        else:
            graph.alltoall(world, a, b)
    with graph.compile(timeout=60) as plan:
        for _ in range(2):
            plan.run()
            for kind, op, i, j, root in steps:
                _reference(ref, kind, op, i, j, root, world.size)
    for k in range(n_arrays):
        np.testing.assert_array_equal(mine[k], ref[world.rank][k], err_msg=f"array {k} after {steps}")


def _reference(ref, kind, op, i, j, root, size):
    fn = {"sum": np.sum, "min": np.min, "max": np.max}[op]
    sends = [arrays[i].copy() for arrays in ref]
    if kind == "allreduce":
        total = fn(np.array(sends), axis=0).astype(sends[0].dtype)
        for arrays in ref:
            arrays[j][:] = total
    elif kind == "broadcast":
        for arrays in ref:
            arrays[j][:] = sends[root]
    elif kind == "reduce":
        ref[root][j][:] = fn(np.array(sends), axis=0).astype(sends[0].dtype)
    elif kind == "allgather":
        for arrays in ref:
            arrays[j][:] = np.concatenate([s[:6] for s in sends])
    elif kind == "reduce_scatter":
        total = fn(np.array(sends), axis=0).astype(sends[0].dtype)
        for r, arrays in enumerate(ref):
            arrays[j][:6] = total[r * 6:(r + 1) * 6]
    elif kind == "gather":
        ref[root][j][:] = np.concatenate([s[:6] for s in sends])
    elif kind == "scatter":
        for r, arrays in enumerate(ref):
            arrays[j][:6] = sends[root][r * 6:(r + 1) * 6]
    else:
        per = len(sends[0]) // size
        for r, arrays in enumerate(ref):
            arrays[j][:] = np.concatenate([s[r * per:(r + 1) * per] for s in sends])


def test_info_reports_the_build(world):
    from commgraph.info import info_text
    text = info_text()
    if world.rank == 0:
        assert "commgraph " in text and "backends:" in text and f"ranks: {world.size}" in text
    else:
        assert text == ""
    assert cg.mpi_library_version().startswith("MPICH"), cg.mpi_library_version()  # the build's MPI


def test_pytorch_cpu_tensors_when_torch_is_there(world):
    torch = pytest.importorskip("torch")
    t = torch.full((3, 4), float(world.rank), dtype=torch.float32)
    half = torch.full((8,), 1.0, dtype=torch.bfloat16)
    graph = cg.Graph("torch")
    graph.allreduce(world, t)
    graph.allreduce(world, half)
    with graph.compile(timeout=60) as plan:
        plan.run()
    assert (t == sum(range(world.size))).all()
    assert (half.float() == world.size).all()
    with pytest.raises(ValueError):
        graph.allreduce(world, t.t())  # not contiguous


def test_errors_of_the_graph_name_their_cause(world):
    a = np.zeros(16, np.float32)
    graph = cg.Graph("errors")
    with pytest.raises(cg.AliasError):
        graph.allreduce(world, a[0:8], a[4:12])  # partly overlapping: no in-place form
    first, second = graph.allreduce(world, a[:8]), graph.allreduce(world, a[8:])
    graph.depend(first, second)
    with pytest.raises(cg.CycleError):
        graph.depend(second, first)
    other = cg.Graph("other")
    with pytest.raises(cg.InvalidNodeError):
        other.name(first, "not mine")
    readonly = np.zeros(4, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError):
        graph.allreduce(world, readonly)  # in place writes it
    with pytest.raises(ValueError):
        graph.broadcast(world, readonly, 0)
    with pytest.raises(TypeError):
        graph.allgather(world, a[:2], None)
    with pytest.raises(TypeError):
        graph.allgather("world", a[:2], a)
    with pytest.raises(TypeError):
        graph.gather(world, None, a, root=0)
    with pytest.raises(TypeError):
        graph.broadcast(world, a, 0.5)
    graph.broadcast(world, a, np.int64(0))  # NumPy integers are ranks
    assert issubclass(cg.TimeoutError, TimeoutError) and issubclass(cg.AliasError, ValueError)
    other.close()
    graph.close()


def test_rebind_send_and_receive_nodes_and_read_only_targets(world):
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
    out, back = np.full(3, world.rank, np.int32), np.full(3, -1, np.int32)
    graph = cg.Graph("p2p")
    send = graph.send(world, out, right)
    recv = graph.recv(world, back, left)
    reduce = graph.allreduce(world, np.zeros(3, np.int32))
    with graph.compile(timeout=60) as plan:
        out2, back2 = np.full(3, 10 + world.rank, np.int32), np.full(3, -1, np.int32)
        plan.rebind({send: (out2, None), recv: (None, back2)})
        plan.run()
        assert (back2 == 10 + left).all() and (back == -1).all()
        frozen = np.zeros(3, np.int32)
        frozen.flags.writeable = False
        with pytest.raises(ValueError):
            plan.rebind({reduce: (frozen, None)})
        for _ in range(50):  # rebinding again lets the previous buffers go
            plan.rebind({recv: (None, np.full(3, -1, np.int32))})
        assert len(plan._bound) == 2


def test_tune_trace_and_tuning_files(world, tmp_path_factory):
    tensors = [np.full(64, k, np.float32) for k in range(12)]
    graph = cg.Graph("tuned")
    for t in tensors:
        graph.allreduce(world, t)
    folder = tmp_path_factory.mktemp(f"tuning{world.rank}")
    def fresh():
        for k, t in enumerate(tensors):
            t[:] = k

    def summed():
        return all((t == k * world.size).all() for k, t in enumerate(tensors))

    with graph.compile(timeout=60) as plan:
        with plan.tune(graph, replays=3) as tuned:  # profiling replays change the data: fresh after
            fresh()
            tuned.run()
            assert summed()
            tuned.save_tuning(str(folder / "plan.tuning"))
            tuned.trace(str(folder / "trace.json"), replays=2)
        assert (folder / "plan.tuning").stat().st_size > 0
        assert (folder / "trace.json").read_text().lstrip().startswith(("{", "["))
    with graph.compile(timeout=60, tuning_file=str(folder / "plan.tuning")) as loaded:
        fresh()
        loaded.run()
        assert summed()


def test_a_timeout_reaches_the_handler_and_names_the_node():
    """Both ranks receive, nobody sends (the cross-rank check off): the
    replay times out on every rank. A communicator of its own: the posted
    receives stay with it."""
    stuck = cg.Comm(timeout=30)
    heard = []
    cg.set_timeout_handler(lambda status, report: heard.append((status, report)))
    graph = cg.Graph("stuck")
    peer = (stuck.rank + 1) % stuck.size
    graph.name(graph.recv(stuck, np.zeros(4, np.float32), peer), "lonely")
    plan = graph.compile(timeout=0.5, check_ranks=False, fusion=False)
    with pytest.raises(cg.TimeoutError) as caught:
        plan.run()
    cg.set_timeout_handler(None)
    assert "'lonely'" in caught.value.message and f"rank {stuck.rank} of {stuck.size}" in caught.value.message
    assert heard and heard[0][0] == "CG_ERR_TIMEOUT" and "'lonely'" in heard[0][1]
    with pytest.raises(cg.TimeoutError):
        plan.run()  # a timed-out plan refuses to run again


def test_closed_objects_and_arguments_the_package_checks(world):
    comm = cg.Comm.offline(0, 2)
    comm.close()
    graph = cg.Graph("closed")
    with pytest.raises(ValueError):
        graph.allreduce(comm, np.zeros(2, np.float32))
    with pytest.raises(ValueError):
        cg.Comm(chunk_bytes=0)
    with pytest.raises(ValueError):
        cg.Arena(1024, device="local_rank")
    with cg.Arena(1024, device="host") as arena:
        assert arena.device is None and arena.empty(4, "int32").shape == (4,)
        with pytest.raises(TypeError):
            arena.empty(4, "bfloat16")
        assert arena.usage[0] == 16  # the refused piece took nothing


def test_cuda_array_interface_is_read_without_cuda():
    class Device:
        __cuda_array_interface__ = {"data": (0x7000, False), "shape": (2, 3), "typestr": "<f2", "strides": None,
                                    "version": 2}

    b = cg.resolve(Device())
    assert (b.ptr, b.dtype, b.count, b.device, b.readonly) == (0x7000, "float16", 6, None, False)
    assert "cuda:?" in repr(b)

    class Strided:
        __cuda_array_interface__ = {"data": (0x7000, True), "shape": (2, 3), "typestr": "<f4", "strides": (16, 4),
                                    "version": 2}

    with pytest.raises(ValueError):
        cg.resolve(Strided())


def test_a_dropped_communicator_stays_open_until_exit_and_a_closed_one_is_forgotten(world):
    import gc
    import weakref

    from commgraph import _registry

    # destroying a communicator is collective: garbage collection, whose
    # order differs between ranks, must not do it (a dropped one used to be
    # lost unclosed, and MPI reported its handles leaked at finalize)
    dropped = cg.Comm()
    seen = weakref.ref(dropped)
    del dropped
    gc.collect()
    kept = seen()
    assert kept is not None and kept._handle, "an unclosed communicator was collected"
    kept.close()  # as exit would, the same on every rank
    del kept
    gc.collect()
    assert seen() is None, "a closed communicator stayed tracked"
    # graphs and plans are destroyed locally: collected as usual
    graph = cg.Graph("collected")
    graph_seen = weakref.ref(graph)
    del graph
    gc.collect()
    assert graph_seen() is None


def test_event_nodes_are_recorded_with_their_accesses_and_null_handles_refused(world):
    if not cg._lib.has("cg_event_wait"):
        pytest.skip("this libcommgraph was built without CUDA")
    rng = np.random.default_rng(world.rank)
    grad = np.zeros(int(rng.integers(4, 64)), np.float32)

    class FakeEvent:  # stands in for torch.cuda.Event: recording calls no CUDA
        cuda_event = 0x1000 + int(rng.integers(1, 1 << 20)) * 16

    graph = cg.Graph("events")
    ready = graph.event_wait(FakeEvent(), writes=[grad])
    reduced = graph.allreduce(world, grad)
    done = graph.event_record(0x2000, reads=[grad])
    stats = graph.stats
    assert stats["nodes_by_kind"] == {"event_wait": 1, "allreduce": 1, "event_record": 1}
    assert stats["edges"] >= 2  # wait -> allreduce -> record, through the gradient's bytes
    dot = graph.dot()
    assert "event" in dot
    assert ready.kind == "event_wait" and reduced.kind == "allreduce" and done.kind == "event_record"
    with pytest.raises(ValueError):
        graph.event_wait(0)  # a torch.cuda.Event before its first record
    with pytest.raises(TypeError):
        graph.event_record("event")
    with pytest.raises(TypeError):
        graph.child_graph(3.5)
    with pytest.raises(ValueError):
        graph.child_graph(0)
    graph.close()
