#!/usr/bin/env bash
# Resident memory of dedupd with 10M live records versus 1M, same flags, same
# run. Target: ratio <= 1.5 (the block cache is bounded and nothing is kept
# per record outside RocksDB).
# Usage: bench/memory/rss_ratio.sh [BUILD_DIR] [SMALL] [LARGE]
set -euo pipefail
build=${1:-build}
small=${2:-1000000}
large=${3:-10000000}
dedupd=$build/server/dedupd
loader=$build/bench/memory/load_records

# start_dedupd DIR: starts dedupd on DIR; sets pid and address once it
# serves (its ready file, a new one for each start, names the bound address).
start_dedupd() {
  local dir=$1
  : >"$dir.log"
  rm -f "$dir.ready.json"
  "$dedupd" --address=127.0.0.1:0 --metrics_address= --event_log=off \
    --durability=none --data_dir="$dir" --ready_file="$dir.ready.json" 2>"$dir.log" &
  pid=$!
  until [[ -f "$dir.ready.json" ]]; do
    kill -0 "$pid" 2>/dev/null || { cat "$dir.log" >&2; exit 1; }
    sleep 0.05
  done
  address=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' \
    "$dir.ready.json")
}

stop_dedupd() {
  kill -TERM "$pid"
  wait "$pid" || true
}

measure() {
  local records=$1 dir rss t0 t1
  dir=$(mktemp -d)
  start_dedupd "$dir"
  "$loader" --address="$address" --records="$records" >&2
  sleep 2
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  stop_dedupd
  # A restart opens the database and scans it once for in-flight leases.
  t0=$(date +%s.%N)
  start_dedupd "$dir"
  t1=$(date +%s.%N)
  stop_dedupd
  echo "records=$records rss_kib=$rss disk=$(du -sh "$dir" | cut -f1)" \
    "restart_to_listening_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')" >&2
  rm -rf "$dir" "$dir.log" "$dir.ready.json"
  echo "$rss"
}

rss_small=$(measure "$small")
rss_large=$(measure "$large")
awk -v s="$rss_small" -v l="$rss_large" -v ns="$small" -v nl="$large" \
  'BEGIN { printf "RSS %d records: %.1f MiB; %d records: %.1f MiB; ratio %.2f (target <= 1.5)\n", ns, s/1024, nl, l/1024, l/s }'
