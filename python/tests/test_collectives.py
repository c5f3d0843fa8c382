"""Every collective kind on NumPy arrays, every NumPy type commgraph has,
every reduction, against results each rank works out with NumPy from every
rank's inputs (regenerated from the shared seed): integer values, so every
type and reduction is exact; outputs poisoned first, so what a node must
leave alone is checked too."""
import numpy as np
import pytest

import commgraph as cg
from conftest import integers, poisoned, rng_for

DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
OPS = ["sum", "prod", "min", "max", "avg"]
COUNTS = [1, 7, 1000]
SEED = 20261127


def inputs(world, dtype, op, n, salt):
    """Every rank's input (a list by rank): small integers; for prod in
    {-1, 1, 2} (no overflow), for avg multiples of the size (exact)."""
    out = []
    for r in range(world.size):
        rng = rng_for(SEED + salt, r)
        if op == "prod":
            x = rng.choice(np.array([1, 2] if np.dtype(dtype).kind == "u" else [-1, 1, 2]), n).astype(dtype)
        elif op == "avg":
            x = (integers(rng, n, dtype, 0 if np.dtype(dtype).kind == "u" else -4, 5) * world.size).astype(dtype)
        else:
            x = integers(rng, n, dtype)
        out.append(x)
    return out


def reduced(xs, op, dtype):
    wide = np.array(xs, dtype=np.float64 if np.dtype(dtype).kind == "f" else np.int64)
    result = {"sum": wide.sum(0), "prod": wide.prod(0), "min": wide.min(0), "max": wide.max(0),
              "avg": np.trunc(wide.sum(0) / len(xs))}[op]
    return result.astype(dtype)


def run_one(record):
    graph = cg.Graph("one")
    record(graph)
    with graph.compile(timeout=60) as plan:
        plan.run()
    graph.close()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_allreduce_every_type_and_op_in_and_out_of_place(world, dtype, op):
    for salt, n in enumerate(COUNTS):
        xs = inputs(world, dtype, op, n, salt)
        want = reduced(xs, op, dtype)
        send, recv, inplace = xs[world.rank].copy(), poisoned(n, dtype), xs[world.rank].copy()
        graph = cg.Graph("allreduce")
        graph.allreduce(world, send, recv, op=op)
        graph.allreduce(world, inplace, op=op)
        with graph.compile(timeout=60) as plan:
            plan.run()
        np.testing.assert_array_equal(recv, want)
        np.testing.assert_array_equal(inplace, want)
        np.testing.assert_array_equal(send, xs[world.rank])  # untouched


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_from_every_root(world, dtype):
    for root in range(world.size):
        xs = inputs(world, dtype, "sum", 33, root)
        buf = xs[world.rank].copy()
        out = poisoned(33, dtype)
        run_one(lambda g: (g.broadcast(world, buf, root), g.broadcast(world, xs[world.rank].copy(), root, out)))
        np.testing.assert_array_equal(buf, xs[root])
        np.testing.assert_array_equal(out, xs[root])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_reduce_to_every_root_leaves_other_ranks_alone(world, dtype, op):
    for root in range(world.size):
        xs = inputs(world, dtype, op, 17, root)
        recv = poisoned(17, dtype)
        run_one(lambda g: g.reduce(world, xs[world.rank].copy(), recv, op=op, root=root))
        want = reduced(xs, op, dtype) if world.rank == root else poisoned(17, dtype)
        np.testing.assert_array_equal(recv, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_and_reduce_scatter(world, dtype):
    n = 9
    xs = inputs(world, dtype, "sum", n, 1)
    gathered = poisoned(n * world.size, dtype)
    ys = inputs(world, dtype, "sum", n * world.size, 2)
    scattered = poisoned(n, dtype)
    graph = cg.Graph("gather-scatter")
    graph.allgather(world, xs[world.rank], gathered)
    graph.reduce_scatter(world, ys[world.rank], scattered, op="sum")
    with graph.compile(timeout=60) as plan:
        plan.run()
    np.testing.assert_array_equal(gathered, np.concatenate(xs))
    want = reduced(ys, "sum", dtype)[world.rank * n:(world.rank + 1) * n]
    np.testing.assert_array_equal(scattered, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall(world, dtype):
    per = 5
    xs = inputs(world, dtype, "sum", per * world.size, 3)
    recv = poisoned(per * world.size, dtype)
    run_one(lambda g: g.alltoall(world, xs[world.rank], recv))
    want = np.concatenate([xs[r][world.rank * per:(world.rank + 1) * per] for r in range(world.size)])
    np.testing.assert_array_equal(recv, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_and_scatter_from_every_root(world, dtype):
    n = 4
    for root in range(world.size):
        xs = inputs(world, dtype, "sum", n, 10 + root)
        gathered = poisoned(n * world.size, dtype) if world.rank == root else None
        whole = inputs(world, dtype, "sum", n * world.size, 20 + root)
        part = poisoned(n, dtype)
        graph = cg.Graph("gather")
        graph.gather(world, xs[world.rank], gathered, root=root)
        graph.scatter(world, whole[root] if world.rank == root else None, part, root=root)
        with graph.compile(timeout=60) as plan:
            plan.run()
        if world.rank == root:
            np.testing.assert_array_equal(gathered, np.concatenate(xs))
        np.testing.assert_array_equal(part, whole[root][world.rank * n:(world.rank + 1) * n])


def test_send_recv_ring_and_barrier(world):
    n = 12
    xs = inputs(world, "float32", "sum", n, 30)
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
    got = poisoned(n, "float32")
    graph = cg.Graph("ring")
    graph.send(world, xs[world.rank], right)
    graph.recv(world, got, left)
    graph.barrier(world)
    with graph.compile(timeout=60) as plan:
        for _ in range(3):
            got[:] = -1
            plan.run()
            np.testing.assert_array_equal(got, xs[left])


def test_empty_buffers_are_nodes_too(world):
    empty = np.zeros(0, np.float32)
    run_one(lambda g: g.allreduce(world, empty))
