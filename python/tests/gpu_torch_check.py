"""The package's PyTorch path on GPUs, one GPU per rank (scripts/gpu-test
runs it under mpiexec -n 2 and -n 4 with the python that has PyTorch):
CUDA tensors in a device plan run and launched on PyTorch's current
stream, the plan captured inside torch.cuda.graph and replayed, tensors
from a device arena fused without copies (and from one in NCCL symmetric
memory), a bfloat16 allreduce, a rebind, and a user's CUDA graph as a
child node with events recorded and waited for (eager, and an external
event inside torch.cuda.graph). Every result is compared exactly (integer values). A plain script,
not pytest (the GPU host's python may lack pytest): exits 0 after "PASSED",
1 on a failed check, 77 (skipped) without PyTorch or a GPU per rank unless
CG_REQUIRE_GPU is set. With CG_TEST_SHARE_GPUS=1 ranks may share GPUs
(tests/support/share_gpus.h: a host id of its own per process for NCCL,
which then connects them over sockets)."""
import os
import socket
import sys


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(1 if os.environ.get("CG_REQUIRE_GPU", "0") not in ("", "0") else 77)


try:
    import torch
except ImportError:
    skip("no PyTorch in this python")

import commgraph as cg  # noqa: E402

if not torch.cuda.is_available():
    skip("PyTorch sees no GPU")
sharing = os.environ.get("CG_TEST_SHARE_GPUS", "0") not in ("", "0")
if sharing:  # before any NCCL communicator: a host of its own per process
    os.environ.setdefault("NCCL_HOSTID", f"commgraph-{socket.gethostname()}-{os.getpid()}")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

comm = cg.Comm(backend="nccl", device="local_rank", timeout=60)
device = torch.device("cuda", comm.device)
torch.cuda.set_device(device)
rank, size = comm.rank, comm.size
total = size * (size - 1) // 2


def check(condition, what):
    if not condition:
        print(f"rank {rank}: FAILED: {what}", flush=True)
        sys.exit(1)


# run and launch on the current stream
grads = [torch.full((1000 + k,), float(rank + k), device=device) for k in range(8)]
graph = cg.Graph("torch grads")
for g in grads:
    graph.allreduce(comm, g)
plan = graph.compile(timeout=60)
check(plan.stats["device"] == comm.device, f"a device plan on {comm.device}: {plan.stats}")
plan.run()
for k, g in enumerate(grads):
    check(bool((g == total + size * k).all()), f"run: grads[{k}]")
for g in grads:
    g.fill_(1.0)
plan.launch()  # PyTorch's current stream
torch.cuda.current_stream().synchronize()
check(all(bool((g == size).all()) for g in grads), "launch on the current stream")

# captured in torch.cuda.graph with the kernels around it, replayed
x = torch.zeros(4096, device=device)
out = torch.zeros(4096, device=device)
g2 = cg.Graph("captured")
g2.allreduce(comm, x, out)
captured_plan = g2.compile(timeout=60)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    x.fill_(float(rank))  # warm-up outside the capture, as PyTorch asks
    captured_plan.launch()
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
cuda_graph = torch.cuda.CUDAGraph()
# thread_local: the watchdog's threads (relaxed) never disturb a capture,
# and this keeps other threads' CUDA calls out of it too
with torch.cuda.graph(cuda_graph, capture_error_mode="thread_local"):
    x.fill_(float(rank))
    x.add_(1.0)
    captured_plan.launch()
    out.mul_(2.0)
for _ in range(3):
    out.zero_()
    cuda_graph.replay()
torch.cuda.synchronize()
check(bool((out == 2 * (total + size)).all()), f"torch.cuda.graph replay: {out[:4].tolist()}")

# a device arena: tensors back to back, one bucket without copies
arena = cg.Arena(1 << 20, device=device)
pieces = [arena.empty((64, 3), torch.float32) for _ in range(5)]
half = arena.empty(256, "bfloat16")
check(pieces[1].data_ptr() == pieces[0].data_ptr() + 64 * 3 * 4, "arena pieces touch")
for k, p in enumerate(pieces):
    p.fill_(float(k * rank))
half.fill_(1.0)
g3 = cg.Graph("arena")
for p in pieces:
    g3.allreduce(comm, p)
g3.allreduce(comm, half)
arena_plan = g3.compile(timeout=60)
stats = arena_plan.stats
check(stats["buckets"] >= 1 and stats["copy_bytes"] == 0, f"zero-copy buckets over the arena: {stats}")
arena_plan.run()
for k, p in enumerate(pieces):
    check(bool((p == k * total).all()), f"arena piece {k}")
check(bool((half.float() == size).all()), "bfloat16 allreduce")

# an arena in NCCL symmetric memory: the same plan shape, results right
sym_arena = cg.Arena(1 << 20, symmetric=comm)
sym_pieces = [sym_arena.empty((64, 3), torch.float32) for _ in range(3)]
for k, p in enumerate(sym_pieces):
    p.fill_(float(k + rank))
g4 = cg.Graph("symmetric arena")
for p in sym_pieces:
    g4.allreduce(comm, p)
sym_plan = g4.compile(timeout=60)
check(sym_plan.stats["copy_bytes"] == 0, f"zero-copy buckets over the symmetric arena: {sym_plan.stats}")
sym_plan.launch()
torch.cuda.synchronize()
for k, p in enumerate(sym_pieces):
    check(bool((p == k * size + total).all()), f"symmetric arena piece {k}")
sym_plan.close()
# its cut-over, measured when it was made: the same on every rank
for name in ("float32", "bfloat16"):
    cut = min(sym_arena.symmetric_max(name), 1 << 62)
    both = torch.tensor([cut, -cut], dtype=torch.int64, device=device)
    g5 = cg.Graph("cut-over agreement")
    g5.allreduce(comm, both, op="max")
    with g5.compile(timeout=60) as agree_plan:
        agree_plan.run()
    check(both.tolist() == [cut, -cut], f"the {name} cut-over differs between ranks: {cut} here, {both.tolist()}")
try:
    cg.Arena(4096, device=device.index).symmetric_max()
    check(False, "symmetric_max of a plain arena did not raise")
except cg.UnsupportedError:
    pass
sym_arena.close()

# rebind to other tensors of the same size and type
y = torch.full((4096,), float(rank + 1), device=device)
y2 = torch.full((4096,), 2.0, device=device)
rebind_graph = cg.Graph("rebind")
n0 = rebind_graph.allreduce(comm, y)
rebind_plan = rebind_graph.compile(timeout=60)
rebind_plan.rebind({n0: (y2, None)})
rebind_plan.run()
check(bool((y2 == 2 * size).all()) and bool((y == rank + 1).all()), "rebind to another tensor")

# a user's CUDA graph as a child node and events in and out: each plan's
# kernels are held back 5 ms behind the event or child graph it depends on,
# so a dependency that did not hold would read stale values
SLEEP = 10_000_000  # torch.cuda._sleep cycles: some 5 ms
a = torch.zeros(2048, device=device)
user_graph = torch.cuda.CUDAGraph(keep_graph=True)
with torch.cuda.graph(user_graph, capture_error_mode="thread_local"):
    torch.cuda._sleep(SLEEP)
    a.fill_(float(rank + 1))
done = torch.cuda.Event()
done.record()  # its CUDA event exists once recorded
child_events = cg.Graph("child graph, event record")
child_events.child_graph(user_graph, writes=[a])
child_events.allreduce(comm, a)
child_events.event_record(done, reads=[a])
child_plan = child_events.compile(timeout=60)
a.zero_()
side.wait_stream(torch.cuda.current_stream())
child_plan.launch(side)
torch.cuda.current_stream().wait_event(done)  # not on side: only the plan's event orders this
seen = a.clone()
torch.cuda.synchronize()
check(bool((seen == total + size).all()), f"child_graph and event_record: {seen[:4].tolist()}")

b = torch.zeros(2048, device=device)
ready = torch.cuda.Event()
ready.record()
waiting = cg.Graph("event wait")
waiting.event_wait(ready, writes=[b])
waiting.allreduce(comm, b)
wait_plan = waiting.compile(timeout=60)
producer = torch.cuda.Stream()
torch.cuda.synchronize()
with torch.cuda.stream(producer):
    torch.cuda._sleep(SLEEP)
    b.fill_(float(rank + 1))
    ready.record()
wait_plan.launch(side)  # side is not ordered after producer: only the plan's wait is
torch.cuda.synchronize()
check(bool((b == total + size).all()), f"event_wait on an eager stream's event: {b[:4].tolist()}")

# an external event recorded inside the user's capture and waited for by a
# plan launched after the record (a wait captured before its record does
# not wait: python.md), the plan on a side stream forked before the record
c = torch.zeros(2048, device=device)
external = torch.cuda.Event(external=True)
external.record()
in_capture = cg.Graph("external event in a capture")
in_capture.event_wait(external, writes=[c])
in_capture.allreduce(comm, c)
external_plan = in_capture.compile(timeout=60)
external_plan.launch(side)  # warm-up outside the capture
torch.cuda.synchronize()
fork = torch.cuda.Event()
whole = torch.cuda.CUDAGraph()
with torch.cuda.graph(whole, capture_error_mode="thread_local"):
    fork.record()
    torch.cuda._sleep(SLEEP)
    c.fill_(float(rank + 1))
    external.record()
    side.wait_event(fork)
    external_plan.launch(side)
    torch.cuda.current_stream().wait_stream(side)
for _ in range(2):
    c.zero_()
    whole.replay()
torch.cuda.synchronize()
check(bool((c == total + size).all()), f"event_wait on an external event in the capture: {c[:4].tolist()}")
del whole, user_graph

del cuda_graph  # the user's graph holds the plan's: it goes first
torch.cuda.synchronize()
for p in (external_plan, wait_plan, child_plan, rebind_plan, arena_plan, captured_plan, plan):
    p.close()
arena.close()
if rank == 0:
    gpus = "ranks sharing GPUs" if sharing else "GPUs"
    name = torch.cuda.get_device_name(device)
    print(f"PASSED: the PyTorch path on {size} {gpus} ({name}, torch {torch.__version__})")
