#!/usr/bin/env bash
# Makes tests/compat/fixtures/<name>.tar.gz: data dirs written by an earlier
# release of dedupd (a single node and a 3-node group), with the manifest of
# the records in them, for the upgrade test (test_upgrade.py). Run once per
# release whose data dirs the current binary must open; the output is
# committed, like RocksDB's and PostgreSQL's compatibility fixtures.
#
#   tests/compat/make_fixture.sh [COMMIT [NAME]]
#
# COMMIT (default 7ea0664, the last commit before the data dir recorded its
# format) is built in a temporary git worktree with its own scripts/build
# (through ccache: mostly cache hits), started with its own flags, given the
# records of write_records.py through its own Python stubs, stopped with
# SIGTERM (it must exit 0), and its data dirs packed. NAME defaults to
# format-<version>-<commit>.
#
# DEDUP_KEEP_PREVIOUS=PATH also copies that release's dedupd to PATH, for the
# upgrade test's mixed-version group (cmake -DDEDUP_PREVIOUS_DEDUPD=PATH).
#
# The group's Raft addresses are fixed (127.0.29.N:2910N): libraft keeps the
# configuration, addresses included, in the log, so the test starts the new
# nodes on the same ones.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
commit=${1:-7ea0664}
sha=$(git -C "$repo" rev-parse --short=7 "$commit^{commit}")
name=${2:-format-1-$sha}
out="$repo/tests/compat/fixtures"
python=/usr/bin/python3  # Debian's: it has python3-grpcio

work=$(mktemp -d /tmp/dedup-fixture.XXXXXX)
tree="$work/src"
pids=()
cleanup() {
  local rc=$?
  if ((rc != 0)); then
    mkdir -p /tmp/dedup-fixture-logs && cp "$work"/*.log /tmp/dedup-fixture-logs/ 2>/dev/null || true
    echo "make_fixture: failed; dedupd logs in /tmp/dedup-fixture-logs" >&2
  fi
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  git -C "$repo" worktree remove --force "$tree" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

git -C "$repo" worktree add --detach "$tree" "$sha" >/dev/null
"$tree/scripts/build" dedupd dedup_python_stubs >/dev/null
dedupd="$tree/build/server/dedupd"
if [[ -n ${DEDUP_KEEP_PREVIOUS:-} ]]; then cp "$dedupd" "$DEDUP_KEEP_PREVIOUS"; fi
export PYTHONPATH="$tree/build/client/python/gen" PYTHONDONTWRITEBYTECODE=1

data="$work/data"
mkdir -p "$data"
# What the records need: TTLs and retention that outlast the fixture's use
# (retention below the 2^40 ms a log entry may carry: more makes 7ea0664's
# followers stop on the entry),
# the protocol's longest lease; a policy per namespace (not stored in the
# data dir: the test starts the new binary with the same file).
cp "$repo/tests/compat/policy.json" "$data/policy.json"
flags=(--max_ttl_s=4000000000 --max_lease_ms=4294967295
  --tombstone_retention_s=1000000000 --policy_file="$data/policy.json"
  --compaction_grace_s=0 --metrics_address= --event_log=stderr)

wait_ready() {  # FILE PID
  for _ in $(seq 1 300); do
    if [[ -s $1 ]] && grep -q "\"pid\": *$2\b" "$1"; then return 0; fi
    kill -0 "$2" 2>/dev/null || { echo "dedupd $2 exited; see $work/*.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "dedupd $2 not ready" >&2
  exit 1
}

stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid"; done
  for pid in "${pids[@]}"; do
    if ! wait "$pid"; then echo "dedupd $pid did not stop cleanly" >&2; exit 1; fi
  done
  pids=()
}

# A single node (durability sync, the default).
"$dedupd" "${flags[@]}" --address=127.0.0.1:0 --data_dir="$data/single" \
  --ready_file="$work/single.ready" >"$work/single.log" 2>&1 &
pids+=($!)
wait_ready "$work/single.ready" "${pids[0]}"
address=$(sed -n 's/.*"address": *"\([^"]*\)".*/\1/p' "$work/single.ready")
"$python" "$repo/tests/compat/write_records.py" "$address" >"$data/single.manifest.json"
stop_all

# A 3-node group.
peers=""
for n in 1 2 3; do
  peers+="${peers:+,}$n=127.0.29.$n:2910$n=127.0.29.$n:2920$n"
done
for n in 1 2 3; do
  "$dedupd" "${flags[@]}" --node_id="$n" --peers="$peers" \
    --address="127.0.29.$n:2920$n" --data_dir="$data/group/n$n" \
    --ready_file="$work/n$n.ready" >"$work/n$n.log" 2>&1 &
  pids+=($!)
done
for n in 1 2 3; do wait_ready "$work/n$n.ready" "${pids[$((n - 1))]}"; done
"$python" "$repo/tests/compat/write_records.py" \
  "127.0.29.1:29201,127.0.29.2:29202,127.0.29.3:29203" >"$data/group.manifest.json"
stop_all

# RocksDB logs to stderr here; drop any info log an older release kept.
find "$data" \( -name 'LOG' -o -name 'LOG.old.*' \) -delete
cat >"$data/FIXTURE" <<EOF
commit $(git -C "$repo" rev-parse "$sha")
made $(date -u +%Y-%m-%dT%H:%M:%SZ)
peers $peers
EOF
mkdir -p "$out"
tar -C "$data" --sort=name --owner=0 --group=0 --numeric-owner \
  -czf "$out/$name.tar.gz" .
echo "$out/$name.tar.gz: $(du -h "$out/$name.tar.gz" | cut -f1)"
