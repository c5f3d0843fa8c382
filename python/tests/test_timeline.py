"""commgraph.timeline: every rank's cg_plan_trace in one table. Random
traces written here against a reference computed step by step, the errors a
user meets, and real traces of a host plan whose last rank arrives late."""
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import commgraph as cg
from commgraph import timeline
from conftest import rng_for


def write_trace(path, rank, plan, collectives, compute):
    """A cg_plan_trace file: collectives as (step, comm, position, bytes,
    start, dur), compute slices as (step, start, dur)."""
    events = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}}]
    for step, comm, position, size, start, dur in collectives:
        events.append({"name": f"collective {step}", "cat": "communication", "ph": "X", "pid": rank, "tid": comm,
                       "ts": start, "dur": dur, "args": {"step": step, "comm": comm, "position": position,
                                                         "bytes": size, "ready_us": 1.5}})
    for step, start, dur in compute:
        events.append({"name": f"kernel {step}", "cat": "compute", "ph": "X", "pid": rank, "tid": 9,
                       "ts": start, "dur": dur, "args": {"step": step}})
    events.append({"name": "pack bucket 0", "cat": "copy", "ph": "X", "pid": rank, "tid": 8, "ts": 1e6, "dur": 1.0,
                   "args": {"step": 999}})  # copies are neither compute nor collectives
    Path(path).write_text(json.dumps({"otherData": {"rank": rank, "plan": plan}, "traceEvents": events}))


def test_random_traces_against_a_reference(world, tmp_path):
    rng = rng_for(91, world.rank)
    for trial in range(20):
        ranks = int(rng.integers(1, 5))
        n = int(rng.integers(1, 8))
        comms = [int(rng.integers(0, 2)) for _ in range(n)]
        sizes = [int(rng.integers(0, 1 << 24)) for _ in range(n)]
        starts = rng.integers(0, 1000, (ranks, n)).astype(float)
        durs = rng.integers(1, 100, (ranks, n)).astype(float)
        compute = rng.integers(0, 2000, (ranks, 3)).astype(float)
        paths = []
        for r in range(ranks):
            positions = [sum(1 for j in range(k) if comms[j] == comms[k]) for k in range(n)]
            collectives = [(10 + k, comms[k], positions[k], sizes[k], starts[r, k], durs[r, k]) for k in range(n)]
            path = tmp_path / f"t{trial}.{r}.json"
            write_trace(path, r, "random", collectives, [(100 + j, compute[r, j], 5.0) for j in range(3)])
            paths.append(str(path))
        t = timeline.summarize(list(reversed(paths)))
        assert t.ranks == list(range(ranks)) and t.plan == "random"
        assert [c.step for c in t.collectives] == sorted(range(10, 10 + n), key=lambda s: (comms[s - 10], s))
        previous_end = {}
        for c in t.collectives:
            k = c.step - 10
            first, last = starts[:, k].min(), starts[:, k].max()
            end = (starts[:, k] + durs[:, k]).max()
            assert (c.first_start, c.last_start, c.end) == (first, last, end)
            assert c.waited_us == last - first and c.own_us == max(0.0, end - last)
            assert c.last_rank == int(np.flatnonzero(starts[:, k] == last)[0]) and c.bytes == sizes[k]
            gap = max(0.0, first - previous_end[c.comm]) if c.comm in previous_end else 0.0
            assert c.idle_before_us == gap
            previous_end[c.comm] = end
        assert t.compute_end_us == {r: (compute[r] + 5.0).max() for r in range(ranks)}
        assert t.tail_us == (starts + durs).max() - (compute + 5.0).max()
        text = timeline.format_timeline(t)
        assert text.startswith(f"plan 'random': {ranks} rank") and f"{abs(t.tail_us):.1f} us " in text


def test_what_a_user_gets_wrong(world, tmp_path):
    one = tmp_path / "one.json"
    write_trace(one, 0, None, [(1, 0, 0, 8, 0.0, 2.0)], [])
    other = tmp_path / "other.json"
    write_trace(other, 1, None, [(2, 0, 0, 8, 0.0, 2.0)], [])
    with pytest.raises(ValueError, match="two files of rank 0"):
        timeline.summarize([str(one), str(one)])
    with pytest.raises(ValueError, match="step 2 is a collective in .*other.json only"):
        timeline.summarize([str(one), str(other)])
    both = tmp_path / "both.json"
    write_trace(both, 2, None, [(1, 0, 0, 8, 0.0, 2.0), (2, 0, 1, 8, 3.0, 2.0)], [])
    with pytest.raises(ValueError, match="one.json lacks the collective steps \\[2\\]"):
        timeline.summarize([str(both), str(one)])
    not_a_trace = tmp_path / "not.json"
    not_a_trace.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a cg_plan_trace file"):
        timeline.summarize([str(not_a_trace)])
    with pytest.raises(ValueError, match="no trace files"):
        timeline.summarize([])
    with pytest.raises(ValueError, match="no file matches .*nothing.%r.json"):
        timeline.summarize([str(tmp_path / "nothing.%r.json")])
    write_trace(tmp_path / "pattern.1.json", 1, None, [], [])  # rank 0's is missing: not found either
    with pytest.raises(ValueError, match="no file matches"):
        timeline.summarize([str(tmp_path / "pattern.%r.json")])
    write_trace(tmp_path / "pattern.0.json", 0, None, [], [])
    assert timeline.summarize([str(tmp_path / "pattern.%r.json")]).ranks == [0, 1]
    t = timeline.summarize([str(one)])
    assert t.tail_us is None and "an unnamed plan: 1 rank (0), 1 collective;" in timeline.format_timeline(t)
    assert timeline.main([str(tmp_path / "missing.json")]) == 1
    assert timeline.main([]) == 2 and timeline.main(["--help"]) == 0


def test_a_host_plan_whose_last_rank_arrives_late(world):
    """Every rank traces the same plan into one folder; the last rank's host
    function sleeps 30 ms longer, so every collective after it finds that
    rank last and the others waiting for it."""
    token = np.array([os.getpid() if world.rank == 0 else 0], np.int64)
    agree = cg.Graph("folder")
    agree.broadcast(world, token, root=0)
    with agree.compile() as plan:
        plan.run()
    folder = Path(tempfile.gettempdir()) / f"commgraph-timeline-{int(token[0])}"
    folder.mkdir(exist_ok=True)
    late = world.size - 1
    grads = [np.full(256 * (k + 1), world.rank, np.float32) for k in range(3)]
    graph = cg.Graph("late rank")
    graph.host_func(lambda: time.sleep(0.03 if world.rank == late else 0.001), writes=grads)
    for g in grads:
        graph.allreduce(world, g)
    with graph.compile(fusion=False) as plan:
        plan.trace(str(folder / "trace.%r.json"), replays=3)
        plan.run()  # a collective replay: every rank's file is whole once it returns
    t = timeline.summarize([str(folder / "trace.%r.json")])  # every rank's file, as Plan.trace named them
    assert t.ranks == list(range(world.size)) and t.plan == "late rank" and len(t.collectives) == 3
    first = t.collectives[0]
    assert first.last_rank == late and first.waited_us > 15000, timeline.format_timeline(t)
    assert all(c.own_us >= 0 and c.end >= c.last_start for c in t.collectives)
    assert t.compute_end_us[late] - min(t.compute_end_us.values()) > 15000
    assert t.tail_us is not None and t.tail_us > 0
    with agree.compile() as plan:  # every rank has read the files before rank 0 removes them
        plan.run()
    if world.rank == 0:
        for r in range(world.size):
            (folder / f"trace.{r}.json").unlink()
        folder.rmdir()
