#!/usr/bin/env bash
# scripts/sanitizer-triage on hand-written compute-sanitizer logs: the known
# NCCL 16-byte over-read (NVIDIA/nccl#265; the report below is what
# compute-sanitizer 2025.3.1 printed for NCCL's LL128 allreduce of a
# 4,194,332-byte buffer on two H100s) next to a real error on another rank,
# their lines interleaved; reports in NCCL kernels that are not that read;
# the old "bytes after" form; more errors counted than printed; a plain log;
# standard input; an unreadable log. Checks each test's row (errors, known,
# other, summaries, ctest's verdict) and the exit status (0: no other
# errors, 1: some, 2: unreadable). Needs no GPU.
# Usage: tests/tools/test_sanitizer_triage.sh PATH/TO/sanitizer-triage
set -uo pipefail
triage=${1:?usage: test_sanitizer_triage.sh PATH/TO/sanitizer-triage}
dir=$(mktemp -d "${TMPDIR:-/tmp}/test_sanitizer_triage.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect NAME STATUS PATTERN... -- ARGS...: runs the triage and checks its
# exit status and that each pattern (grep -E) is in its output
expect() {
  local name=$1 status=$2 failed_before=$failures
  shift 2
  local patterns=()
  while [ "$1" != -- ]; do patterns+=("$1") && shift; done
  shift
  "$triage" "$@" >"$dir/$name.out" 2>&1
  local got=$?
  [ "$got" = "$status" ] || fail "$name: exit status $got, expected $status"
  for p in "${patterns[@]}"; do
    grep -Eq -- "$p" "$dir/$name.out" || fail "$name: no line matches: $p"
  done
  if [ "$failures" != "$failed_before" ]; then sed "s/^/  $name| /" "$dir/$name.out"; fi
}
# row NAME ERRORS KNOWN OTHER SUMMARIES VERDICT: the pattern of a test's row
row() { printf '^%s +%s +%s +%s +%s +%s$' "$(printf '%s' "$1" | sed 's/[.()]/\\&/g')" "$2" "$3" "$4" "$5" "$6"; }

# known REPORT-PREFIX: the over-read as compute-sanitizer prints it (the
# read starts 12 bytes before the end of a 4,194,332-byte allocation)
known() {
  local p=$1
  cat <<EOF
$p========= Invalid __global__ read of size 16 bytes
$p=========     at ncclDevFunc_AllReduce_Sum_f32_RING_LL128()+0x5fd0
$p=========     by thread (388,0,0) in block (23,0,0)
$p=========     Access to 0x7fc6a6600010 is out of bounds
$p=========     and is inside the nearest allocation at 0x7fc6a6200000 of size 4,194,332 bytes
$p=========         Device Frame: ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)+0x1d70
$p=========     Saved host backtrace up to driver entry point at kernel launch time
$p=========         Host Frame: cuLaunchKernelEx [0x39fc2f] in libcuda.so.1
$p=========         Host Frame: ncclLaunchKernel(ncclComm*, ncclKernelPlan*) in enqueue.cc:1654 [0x70d07] in libnccl.so.2
$p=========         Host Frame: pncclGroupEnd in group.cc:107 [0x7ba01] in libnccl.so.2
$p========= 
EOF
}

# ---- the over-read on rank 0 and a real error on rank 1, lines interleaved
# (as two ranks' output can be), in a ctest --verbose log, with the repeat that
# --output-on-failure prints without the test's number (not counted again);
# a clean test after it
{
  cat <<'EOF'
test 61
    Start 61: gpu.test_nccl_replay.n4

61: Test command: /usr/bin/mpiexec "-n" "4" "-l" "/usr/local/cuda/bin/compute-sanitizer" "--tool" "memcheck" "/b/tests/gpu/test_nccl_replay"
61: Working Directory: /b/tests/gpu
61: Test timeout computed to be: 900
61: [0] ========= COMPUTE-SANITIZER
61: [1] ========= COMPUTE-SANITIZER
61: [2] ========= COMPUTE-SANITIZER
61: [3] ========= COMPUTE-SANITIZER
61: [2] Running suite(s): nccl_replay
EOF
  paste -d '\n' <(known "61: [0] ") <(cat <<'EOF'
61: [1] ========= Invalid __global__ write of size 4 bytes
61: [1] =========     at scale_kernel(float *, unsigned long, float)+0x90
61: [1] =========     by thread (31,0,0) in block (2,0,0)
61: [1] =========     Access to 0x7f3c5e40001c is out of bounds
61: [1] =========     and is 1 bytes after the nearest allocation at 0x7f3c5e000000 of size 4,194,332 bytes
61: [1] =========     Saved host backtrace up to driver entry point at kernel launch time
61: [1] =========         Host Frame: main [0x9076] in test_nccl_replay
61: [1] ========= 
EOF
) | grep -v '^$'
  cat <<'EOF'
61: [0] ========= ERROR SUMMARY: 1 error
61: [1] ========= ERROR SUMMARY: 1 error
61: [2] ========= ERROR SUMMARY: 0 errors
61: [3] ========= ERROR SUMMARY: 0 errors
1/2 Test #61: gpu.test_nccl_replay.n4 ..........***Failed   12.31 sec
[1] ========= Invalid __global__ write of size 4 bytes
[1] =========     at scale_kernel(float *, unsigned long, float)+0x90
[1] ========= 
[1] ========= ERROR SUMMARY: 1 error
test 62
    Start 62: gpu.test_nccl_kinds.n4

62: Test command: /usr/bin/mpiexec "-n" "4" "-l" "/usr/local/cuda/bin/compute-sanitizer" "/b/tests/gpu/test_nccl_kinds"
62: [0] ========= COMPUTE-SANITIZER
62: [0] ========= ERROR SUMMARY: 0 errors
62: [1] ========= ERROR SUMMARY: 0 errors
2/2 Test #62: gpu.test_nccl_kinds.n4 ...........   Passed   20.02 sec
EOF
} >"$dir/mixed.log"
expect mixed 1 "$(row gpu.test_nccl_replay.n4 2 1 1 4 Failed)" "$(row gpu.test_nccl_kinds.n4 0 0 0 2 Passed)" \
  "known \(NVIDIA/nccl#265\) rank 0: ncclDevFunc_AllReduce_Sum_f32_RING_LL128 reads 16 bytes from 0x7fc6a6600010, 4 past the end of a 4,194,332-byte allocation" \
  "OTHER rank 1: Invalid __global__ write of size 4 bytes in scale_kernel; Access to 0x7f3c5e40001c" \
  "2 tests, 2 errors: 1 known .*, 1 other \(in 1 tests\)" -- "$dir/mixed.log"
# the over-read alone passes the triage, on every rank and in every launch (one
# line per test); a test it failed (memcheck ended the NCCL kernel) is named
{
  echo "    Start 7: samples.mlp_train.n4"
  for r in 0 1 2 3; do known "7: [$r] "; done
  known "7: [2] "
  for r in 0 1 3; do echo "7: [$r] ========= ERROR SUMMARY: 1 error"; done
  echo "7: [2] ========= ERROR SUMMARY: 2 errors"
  echo "1/1 Test  #7: samples.mlp_train.n4 .............***Failed   31.20 sec"
} >"$dir/known.log"
expect known 0 "$(row samples.mlp_train.n4 5 5 0 4 Failed)" "its only reports are the known read" \
  "1 tests, 5 errors: 5 known .*, 0 other$" -- "$dir/known.log"
[ "$(grep -c "^  known (NVIDIA" "$dir/known.out")" = 1 ] || fail "known: one line for the test's over-reads expected"

# ---- reports in NCCL kernels that are not the known read, and the older
# "bytes after" form of it (a plain log: no ctest, no ranks)
cat >"$dir/nccl.log" <<'EOF'
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at ncclDevFunc_AllReduce_Sum_f32_RING_LL128()+0x5fd0
=========     by thread (388,0,0) in block (23,0,0)
=========     Access to 0x7fdd62c00010 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7fdd62800000 of size 4,194,320 bytes
========= 
========= Invalid __global__ write of size 16 bytes
=========     at ncclDevFunc_AllReduce_Sum_f32_RING_LL128()+0x6000
=========     by thread (388,0,0) in block (23,0,0)
=========     Access to 0x7fc6a6600010 is out of bounds
=========     and is inside the nearest allocation at 0x7fc6a6200000 of size 4,194,332 bytes
========= 
========= Invalid __global__ read of size 16 bytes
=========     at my_vector_kernel(const uint4 *, unsigned long)+0x40
=========     by thread (0,0,0) in block (0,0,0)
=========     Access to 0x7fc6a6600010 is out of bounds
=========     and is inside the nearest allocation at 0x7fc6a6200000 of size 4,194,332 bytes
========= 
========= Invalid __global__ read of size 8 bytes
=========     at ncclDevFunc_AllReduce_Sum_f64_RING_LL()+0x100
=========     by thread (1,0,0) in block (0,0,0)
=========     Access to 0x7fc6a6600018 is out of bounds
=========     and is inside the nearest allocation at 0x7fc6a6200000 of size 4,194,332 bytes
========= 
========= Invalid __global__ read of size 16 bytes
=========     at ncclDevFunc_AllGather_RING_LL128()+0x80
=========     by thread (5,0,0) in block (1,0,0)
=========     Access to 0x7fc6a6600030 is out of bounds
=========     and is 21 bytes after the nearest allocation at 0x7fc6a6200000 of size 4,194,332 bytes
========= 
========= Invalid __global__ read of size 16 bytes
=========     at ncclDevFunc_Broadcast_RING_LL128()+0x80
=========     by thread (5,0,0) in block (1,0,0)
=========     Address 0x7fc6a660001c is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7fc6a6200000 of size 4,194,332 bytes
========= 
========= Misaligned address
=========     at ncclDevFunc_SendRecv()+0x20
========= 
========= ERROR SUMMARY: 7 errors
EOF
expect nccl 1 "$(row '(log)' 7 1 6 1 -)" \
  "known \(NVIDIA/nccl#265\): ncclDevFunc_Broadcast_RING_LL128 reads 16 bytes from 0x7fc6a660001c, 1 past the end" \
  "OTHER: Invalid __global__ read of size 16 bytes in ncclDevFunc_AllReduce_Sum_f32_RING_LL128; Access to 0x7fdd62c00010" \
  "OTHER: Invalid __global__ write of size 16 bytes in ncclDevFunc_AllReduce_Sum_f32_RING_LL128" \
  "OTHER: Invalid __global__ read of size 16 bytes in my_vector_kernel" \
  "OTHER: Invalid __global__ read of size 8 bytes in ncclDevFunc_AllReduce_Sum_f64_RING_LL" \
  "OTHER: Invalid __global__ read of size 16 bytes in ncclDevFunc_AllGather_RING_LL128; Access to 0x7fc6a6600030" \
  "OTHER: Misaligned address in ncclDevFunc_SendRecv" -- "$dir/nccl.log"

# ---- more errors counted than printed (--print-limit), a warning, racecheck
{
  echo "    Start 3: gpu.test_embed.n2"
  known "3: [0] "
  echo "3: [0] ========= ERROR SUMMARY: 3 errors"
  echo "3: [1] ========= Warning: a warning the summary does not count"
  echo "3: [1] ========= ERROR SUMMARY: 0 errors"
  echo "    Start 4: gpu.test_nccl_fusion.n2"
  echo "4: [0] ========= Warning: Race reported between Read access at k()+0x10 and Write access at k()+0x20 [4 hazards]"
  echo "4: [0] ========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)"
  echo "4: [1] ========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
} >"$dir/limit.log"
expect limit 1 "$(row gpu.test_embed.n2 3 1 2 2 -)" "$(row gpu.test_nccl_fusion.n2 1 0 1 2 -)" \
  "OTHER rank 0: 2 more errors counted than reports printed" "note rank 1: Warning: a warning" -- "$dir/limit.log"

# ---- standard input, nothing sanitized, an unreadable log
expect stdin 1 "$(row gpu.test_nccl_kinds.n4 0 0 0 2 Passed)" -- <"$dir/mixed.log"
printf 'no sanitizer here\n' >"$dir/empty.log"
expect empty 0 "0 tests, 0 errors: 0 known" -- "$dir/empty.log"
expect unreadable 2 "cannot read" -- "$dir/no-such.log"

if [ "$failures" != 0 ]; then
  echo "test_sanitizer_triage: $failures failures"
  exit 1
fi
echo "test_sanitizer_triage: all cases passed"
