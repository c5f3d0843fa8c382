#!/usr/bin/env bash
# cgflight on hand-written flight recorder dumps (the format of
# sched/exec/flight.c): ranks in step, a rank that stopped one collective short,
# a rank without a dump, rings that lost their early events, malformed lines
# and bad arguments. Checks the exit status (0 in step, 1 diverged, 2 usage or
# read error) and, with grep, the lines that name the seq, node and rank.
# Usage: tests/tools/test_cgflight.sh PATH/TO/cgflight
set -uo pipefail
cgflight=${1:?usage: test_cgflight.sh PATH/TO/cgflight}
dir=$(mktemp -d "${TMPDIR:-/tmp}/test_cgflight.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

comm=00000000000000ab
# header FILE PID: the header line write_ring starts a dump with
header() { printf '# commgraph flight recorder\thost=node0\tpid=%s\tevents=0\trecorded=0\n' "$2" >"$1"; }
# collective FILE EVENT RANK SIZE SEQ [COMM]: a step of plan 'train', two
# collectives per replay: even seqs are node #2 'grad.a' (step 1), odd ones
# node #3 'grad.w' (step 3)
collective() {
  local node=2 step=1 name=grad.a
  if [ $(($5 % 2)) = 1 ]; then node=3 step=3 name=grad.w; fi
  printf '1700000000.%09d\t%s\treplay=%d\tplan=train\trank=%d\tsize=%d\tstep=%d\tnode=%d\tkind=allreduce\tname=%s\tcomm=%s\tseq=%d\n' \
    "$5" "$2" $(($5 / 2)) "$3" "$4" "$step" "$node" "$name" "${6:-$comm}" "$5" >>"$1"
}
# rank FILE RANK SIZE FIRST LAST_STARTED LAST_DONE: seqs FIRST.. of one rank
rank() {
  header "$1" $((100 + $2))
  for ((seq = $4; seq <= $5; seq++)); do
    collective "$1" start "$2" "$3" "$seq"
    if [ "$seq" -le "$6" ]; then collective "$1" "done" "$2" "$3" "$seq"; fi
  done
}
# expect NAME STATUS PATTERN... -- FILE...: runs cgflight on the files and
# checks its exit status and that each pattern (grep -E) is in its output
expect() {
  local name=$1 status=$2 failed_before=$failures
  shift 2
  local patterns=()
  while [ "$1" != -- ]; do patterns+=("$1") && shift; done
  shift
  "$cgflight" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local got=$?
  [ "$got" = "$status" ] || fail "$name: exit status $got, expected $status"
  for p in "${patterns[@]}"; do
    grep -Eq -- "$p" "$dir/$name.out" "$dir/$name.err" || fail "$name: no line matches: $p"
  done
  if [ "$failures" != "$failed_before" ]; then sed "s/^/  $name| /" "$dir/$name.out" "$dir/$name.err"; fi
}

# in step: 3 ranks completed seqs 0..5
mkdir "$dir/step"
for r in 0 1 2; do rank "$dir/step/$r.txt" $r 3 0 5 5; done
expect step 0 "comm $comm: in step \(last collective seq 5 completed by all 3 ranks\)" -- "$dir"/step/*.txt

# diverged: ranks 0 and 1 started seq 5 and timed out; rank 2 completed seq 4
# and is stuck in a host step
mkdir "$dir/diverged"
for r in 0 1; do
  rank "$dir/diverged/$r.txt" $r 3 0 5 4
  printf '1700000009.000000000\ttimeout\treplay=2\tplan=train\trank=%d\tsize=3\n' $r >>"$dir/diverged/$r.txt"
done
rank "$dir/diverged/2.txt" 2 3 0 4 4
printf '1700000001.000000000\tstart\treplay=2\tplan=train\trank=0\tsize=0\tstep=2\tnode=7\tkind=host\tname=optimizer step\n' \
  >>"$dir/diverged/2.txt"
expect diverged 1 \
  "^comm $comm: diverged at collective seq 5: node #3 'grad.w' \(allreduce, plan 'train', step 3, replay 2\)$" \
  "^  rank 0: started it, not done \(last done: seq 4\)$" \
  "^  rank 2: never started it \(last started seq 4, node #2 'grad.a', last done seq 4\)$" \
  "^  verdict: rank 2 did not reach node #3 'grad.w'$" \
  "2.txt: .*last: .*start, .*node #7 'optimizer step' \(host\)$" \
  "^  .*/1.txt: at 1700000009.000000000, plan 'train', rank 1, replay 2$" -- "$dir"/diverged/*.txt

# a missing rank: ranks 0 and 1 in step, rank 2 left no dump
expect missing 1 "comm $comm: .*completed seq 5, but no dump from rank 2" -- "$dir"/step/0.txt "$dir"/step/1.txt
# ... and a missing rank while the others wait in seq 5
expect missing-waiting 1 "diverged at collective seq 5: node #3" "^  rank 2: no dump from rank 2 " \
  "verdict: every rank with a dump reached node #3 'grad.w'.*rank 2$" -- "$dir"/diverged/0.txt "$dir"/diverged/1.txt

# rings that lost their early events: rank 0 holds seqs 8..10 only, rank 1
# stopped after seq 6; seq 7 is in no ring, the divergence is named by seq
# only. A second communicator stays in step.
mkdir "$dir/ring"
rank "$dir/ring/0.txt" 0 2 8 10 10
rank "$dir/ring/1.txt" 1 2 0 6 6
collective "$dir/ring/0.txt" start 0 2 3 00000000000000cd
collective "$dir/ring/0.txt" "done" 0 2 3 00000000000000cd
collective "$dir/ring/1.txt" start 1 2 3 00000000000000cd
collective "$dir/ring/1.txt" "done" 1 2 3 00000000000000cd
expect ring 1 "^comm $comm: diverged at collective seq 7: no ring still holds its events$" \
  "^  rank 1: never started it \(last started seq 6, node #2" "^  verdict: rank 1 did not reach collective seq 7$" \
  "comm 00000000000000cd: in step \(last collective seq 3 completed by all 2 ranks\)" -- "$dir"/ring/*.txt
# rank 1 started seq 8 but did not complete it, which rank 0 did: seq 8 is
# named from rank 0's ring, where it is not the last start
rank "$dir/ring/1.txt" 1 2 6 8 7
collective "$dir/ring/1.txt" start 1 2 3 00000000000000cd
collective "$dir/ring/1.txt" "done" 1 2 3 00000000000000cd
expect ring-found 1 "^comm $comm: diverged at collective seq 8: node #2 'grad.a' \(allreduce, plan 'train', step 1, replay 4\)" \
  "^  rank 1: started it, not done" "verdict: every rank reached node #2 'grad.a', but rank 1 did not complete it" -- \
  "$dir"/ring/0.txt "$dir"/ring/1.txt

# device plans record completions only (at a timeout), no starts: rank 1
# completed up to seq 3, ranks 0 and 2 up to seq 5
mkdir "$dir/device"
for r in 0 1 2; do
  header "$dir/device/$r.txt" $((100 + r))
  for ((seq = 0; seq <= (r == 1 ? 3 : 5); seq++)); do collective "$dir/device/$r.txt" "done" $r 3 $seq; done
done
expect device 1 "^comm $comm: diverged at collective seq 4: node #2 'grad.a'" \
  "^  rank 1: not done, and its ring holds no start on this comm \(last done seq 3\)$" "^  rank 2: done$" \
  "^  verdict: rank 1 did not complete node #2 'grad.a' \(whether it got there is not recorded\)$" -- \
  "$dir"/device/*.txt

# malformed lines are skipped with a warning
cp "$dir/step/0.txt" "$dir/bad.txt"
printf 'garbage\n1700000000.1\tstart\treplay=x\trank=0\tsize=3\n1700000000.2\tdone\treplay=0\trank=5\tsize=3\tstep=1\tnode=2\tkind=allreduce\tname=\tcomm=%s\tseq=9\n' \
  "$comm" >>"$dir/bad.txt"
expect malformed 0 "bad.txt:14: skipped" "bad.txt:15: skipped" "bad.txt:16: skipped" "in step" -- \
  "$dir/bad.txt" "$dir"/step/1.txt "$dir"/step/2.txt

# usage and read errors
expect usage 2 "usage" --
expect unreadable 2 "no-such-file" -- "$dir/step/0.txt" "$dir/no-such-file.txt"

if [ "$failures" != 0 ]; then
  echo "test_cgflight: $failures checks failed"
  exit 1
fi
echo "test_cgflight: all checks passed"
