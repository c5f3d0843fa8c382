#!/bin/sh
# Runs test_mpi_abort_on_failure (which fails on purpose) and checks how the
# job ended (support/mpi_abort_on_failure.c):
#   one_rank with several ranks: the job is aborted within seconds, with a line
#     naming the failed rank, the place and the assertion;
#   one_rank with one rank, all_ranks: no abort; Check reports the failure on
#     every rank and the rest of the suite runs.
# usage: check_abort_on_failure.sh CASE RANKS MPIEXEC ARGS...
case_name=$1 ranks=$2
shift 2
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT

start=$(date +%s)
CK_RUN_CASE=$case_name "$@" >"$out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
cat "$out"
echo "-- $case_name on $ranks rank(s): exit status $rc after ${elapsed} s"

fail() {
  echo "FAILED: $*"
  exit 1
}
has() { grep -q -- "$1" "$out"; }

[ "$rc" -ne 0 ] || fail "the job exited 0, but a test failed on purpose"
last=$((ranks - 1))
src="test_mpi_abort_on_failure\.c:[0-9]*"
if [ "$case_name" = one_rank ] && [ "$ranks" -gt 1 ]; then
  # the test's own limit is 30 s: a job that was not aborted takes that long
  [ "$elapsed" -le 20 ] || fail "the job took ${elapsed} s to end; an abort takes a few"
  has "^rank $last of $ranks: assertion failed at .*$src: Assertion 'rank != size - 1' failed: deliberate failure on rank $last of $ranks (CG_TEST_SEED=[0-9]*); aborting the job$" ||
    fail "no line naming rank $last and the assertion"
  # no other rank failed an assertion, and nothing ran after the failure
  [ "$(grep -c "assertion failed at" "$out")" -eq 1 ] || fail "more than one rank reported a failed assertion"
  has ":P:" && fail "Check reported results: the job went on after the failure"
elif [ "$case_name" = one_rank ] || [ "$case_name" = all_ranks ]; then
  has "assertion failed at" && fail "the job was aborted; Check should have reported the failure"
  if [ "$case_name" = one_rank ]; then
    has "$src:F:one_rank:abort__last_rank_fails_while_the_others_wait:0: deliberate failure on rank 0 of 1$" ||
      fail "Check did not report the failure"
  else
    # the failed rank and the other ranks each report their side
    has "$src:F:all_ranks:abort__every_rank_fails_together:0: deliberate failure agreed by every rank: failed on this rank" ||
      fail "rank $last did not report its failure"
    [ "$(grep -c ":F:all_ranks:abort__every_rank_fails_together:0: .*failed on another rank" "$out")" -eq "$last" ] ||
      fail "not every other rank reported the failure"
  fi
  has "$src:P:$case_name:abort__the_suite_goes_on:0: Passed" || fail "the suite did not go on after the failure"
else
  fail "unknown case $case_name"
fi
echo "ok"
