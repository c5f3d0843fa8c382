"""Every rank's cg_plan_trace in one table: `python -m commgraph.timeline
trace.0.json trace.1.json ...` or `python -m commgraph.timeline
"trace.%r.json"` (the files `Plan.trace("trace.%r.json")` wrote, one per
rank; no mpiexec needed).

A trace gives each step's median start and duration on one rank, from that
rank's own replay start. A collective ends at about the same moment on
every rank, so across ranks the table shows, for each collective: when the
first and the last rank issued it (the first waits for the last: "waited"),
how long it ran once every rank was there ("own time", the latest end
minus the latest start) and the bandwidth that gives, and the idle gap on
its communicator's lane before it. Then per rank when its compute (host
functions, child graphs, events) ended, and the tail: how long the last
collective ran past the last compute. This is what keeps a training
iteration from its bound (docs/tuning.md): ranks that reach a collective
apart, collectives that run slower inside the iteration than alone, a last
bucket that starts late."""
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence


@dataclass
class Collective:
    """One collective (or bucket) step, across the ranks that ran it."""
    step: int
    name: str
    comm: int
    position: int
    bytes: int
    ready_us: Optional[float]
    start_us: Dict[int, float] = field(default_factory=dict)  # rank: issued at
    end_us: Dict[int, float] = field(default_factory=dict)
    idle_before_us: float = 0.0  # its lane's gap after the communicator's previous collective

    @property
    def first_start(self) -> float:
        return min(self.start_us.values())

    @property
    def last_start(self) -> float:
        return max(self.start_us.values())

    @property
    def last_rank(self) -> int:
        return max(self.start_us, key=lambda r: (self.start_us[r], -r))

    @property
    def end(self) -> float:
        return max(self.end_us.values())

    @property
    def waited_us(self) -> float:
        """How long the first rank to issue it waited for the last."""
        return self.last_start - self.first_start

    @property
    def own_us(self) -> float:
        """Its time once every rank had issued it."""
        return max(0.0, self.end - self.last_start)


@dataclass
class Timeline:
    plan: Optional[str]
    ranks: List[int]
    collectives: List[Collective]
    compute_end_us: Dict[int, float]  # rank: when its last compute step ended (absent: none)
    idle_us: Dict[int, float]  # communicator: its lane's gaps between collectives

    @property
    def tail_us(self) -> Optional[float]:
        """How long the last collective ran past the last compute (None:
        no compute, or no collective)."""
        if not self.compute_end_us or not self.collectives:
            return None
        return max(c.end for c in self.collectives) - max(self.compute_end_us.values())


def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"commgraph.timeline: {path} is not a cg_plan_trace file (no traceEvents list)")
    return data


def _rank_of(data: dict, path: str) -> int:
    other = data.get("otherData") or {}
    if isinstance(other.get("rank"), int):
        return other["rank"]
    pids = {e.get("pid") for e in data["traceEvents"] if e.get("ph") == "X"}
    if len(pids) == 1 and isinstance(next(iter(pids)), int):
        return next(iter(pids))
    raise ValueError(f"commgraph.timeline: {path} names no rank")


def expand(paths: Iterable[str]) -> List[str]:
    """The paths, each with `%r` (as Plan.trace writes them) replaced by
    0, 1, 2, ... for as long as such a file exists."""
    out: List[str] = []
    for path in paths:
        if "%r" not in path:
            out.append(path)
            continue
        rank = 0
        while os.path.exists(path.replace("%r", str(rank))):
            out.append(path.replace("%r", str(rank)))
            rank += 1
        if rank == 0:
            raise ValueError(f"commgraph.timeline: no file matches {path} (not even rank 0's)")
    return out


def summarize(paths: Sequence[str]) -> Timeline:
    """The ranks' traces of one plan (one file per rank, or a path with %r:
    see expand) as a Timeline. Raises ValueError for files that are not
    traces, two files of one rank, or ranks whose traces hold different
    collectives."""
    paths = expand(paths)
    if not paths:
        raise ValueError("commgraph.timeline: no trace files")
    collectives: Dict[int, Collective] = {}
    compute_end: Dict[int, float] = {}
    ranks: List[int] = []
    plan = None
    for path in paths:
        data = _load(path)
        rank = _rank_of(data, path)
        if rank in ranks:
            raise ValueError(f"commgraph.timeline: two files of rank {rank} ({path} is the second)")
        ranks.append(rank)
        plan = plan or (data.get("otherData") or {}).get("plan")
        steps = set()
        for e in data["traceEvents"]:
            if e.get("ph") != "X":
                continue
            args = e.get("args") or {}
            start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
            if e.get("cat") == "communication" and "comm" in args:
                step = int(args["step"])
                steps.add(step)
                c = collectives.get(step)
                if c is None:
                    if len(ranks) > 1:
                        raise ValueError(f"commgraph.timeline: step {step} is a collective in {path} only")
                    c = collectives[step] = Collective(step, str(e.get("name", "")), int(args["comm"]),
                                                       int(args.get("position", 0)), int(args.get("bytes", 0)),
                                                       args.get("ready_us"))
                c.start_us[rank], c.end_us[rank] = start, end
            elif e.get("cat") not in ("communication", "copy"):
                compute_end[rank] = max(compute_end.get(rank, 0.0), end)
        missing = sorted(set(collectives) - steps)
        if missing:
            raise ValueError(f"commgraph.timeline: {path} lacks the collective steps {missing} of the other ranks")
    ordered = sorted(collectives.values(), key=lambda c: (c.comm, c.position, c.step))
    idle: Dict[int, float] = {}
    previous: Dict[int, Collective] = {}
    for c in ordered:
        before = previous.get(c.comm)
        c.idle_before_us = max(0.0, c.first_start - before.end) if before else 0.0
        idle[c.comm] = idle.get(c.comm, 0.0) + c.idle_before_us
        previous[c.comm] = c
    return Timeline(plan, sorted(ranks), ordered, compute_end, idle)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_timeline(t: Timeline) -> str:
    """The table `python -m commgraph.timeline` prints."""
    name = f"plan {t.plan!r}" if t.plan else "an unnamed plan"
    lines = [f"{name}: {len(t.ranks)} rank{'s' if len(t.ranks) != 1 else ''} ({', '.join(map(str, t.ranks))}), "
             f"{len(t.collectives)} "
             f"collective{'s' if len(t.collectives) != 1 else ''}; times in us from each rank's replay start, "
             f"GB/s: bytes / own time"]
    lines.append(f"{'step':>5} {'comm':>4} {'collective':32} {'bytes':>9} {'ready':>9} {'first':>9} "
                 f"{'last (rank)':>14} {'waited':>8} {'own':>8} {'GB/s':>7} {'idle':>8}")
    for c in t.collectives:
        ready = f"{c.ready_us:9.1f}" if isinstance(c.ready_us, (int, float)) else f"{'-':>9}"
        rate = f"{c.bytes / c.own_us * 1e-3:7.1f}" if c.own_us > 0 and c.bytes else f"{'-':>7}"
        last = f"{c.last_start:.1f} ({c.last_rank})"
        lines.append(f"{c.step:5d} {c.comm:4d} {c.name[:32]:32} {_size(c.bytes):>9} {ready} {c.first_start:9.1f} "
                     f"{last:>14} {c.waited_us:8.1f} {c.own_us:8.1f} {rate} {c.idle_before_us:8.1f}")
    for comm, idle in sorted(t.idle_us.items()):
        lines.append(f"comm {comm}: its lane idle {idle:.1f} us between collectives; the ranks waited "
                     f"{sum(c.waited_us for c in t.collectives if c.comm == comm):.1f} us for each other")
    if t.compute_end_us:
        ends = ", ".join(f"rank {r} {t.compute_end_us[r]:.1f}" for r in sorted(t.compute_end_us))
        spread = max(t.compute_end_us.values()) - min(t.compute_end_us.values())
        lines.append(f"compute ends: {ends} (apart by {spread:.1f} us)")
    if t.tail_us is not None:
        side = "after" if t.tail_us >= 0 else "before"
        lines.append(f"tail: the last collective ends {abs(t.tail_us):.1f} us {side} the last compute")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Iterable[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or any(a in ("-h", "--help") for a in args):
        print(__doc__.split("\n\n")[0])
        return 0 if args else 2
    try:
        sys.stdout.write(format_timeline(summarize(args)))
    except (OSError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
