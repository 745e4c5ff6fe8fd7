#!/usr/bin/env bash
# Restart time of a member of a 3-node group that holds RECORDS completed
# records (default 10M): starts a group on 127.0.0.1-3 (temporary data dirs,
# free ports), loads the records through the leader, then
#   1. stops a follower with SIGTERM and starts it again,
#   2. kills the leader with SIGKILL and starts it again (the other two elect
#      a leader meanwhile),
# and prints for each restart: seconds until the node listens (its RocksDB is
# open and libraft has loaded and replayed its log), seconds until its applied
# index reaches the group's commit index, its resident memory and its disk.
# Usage: bench/memory/cluster_restart.sh [BUILD_DIR] [RECORDS]
set -euo pipefail
build=${1:-build}
records=${2:-10000000}
dedupd=$build/server/dedupd
dedupctl=$build/client/dedupctl
loader=$build/bench/memory/load_records
for f in "$dedupd" "$dedupctl" "$loader"; do
  [[ -x "$f" ]] || { echo "cluster_restart: $f missing (scripts/build)" >&2; exit 2; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
  exec 2>/dev/null  # not the shell's "Killed" notices
  for p in "${pids[@]}"; do kill -KILL "$p" || true; wait "$p" || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"
}

peers=""
declare -A client
for n in 1 2 3; do
  raft="127.0.0.$n:$(free_port "127.0.0.$n")"
  client[$n]="127.0.0.$n:$(free_port "127.0.0.$n")"
  peers+="${peers:+,}$n=$raft=${client[$n]}"
done
all="${client[1]},${client[2]},${client[3]}"

# start N: starts node N (appending to its log); sets pid[N].
declare -A pid
start() {
  local n=$1
  "$dedupd" --node_id="$n" --peers="$peers" --address="${client[$n]}" \
    --metrics_address= --event_log=off --data_dir="$tmp/n$n" \
    --ready_file="$tmp/n$n.ready.json" 2>>"$tmp/n$n.log" &
  pid[$n]=$!
  pids+=("${pid[$n]}")
}

# ready N: true once node N's current process has written its ready file
# (the pid in it is that process's; an earlier run's file may remain after
# a SIGKILL).
ready() {
  [[ -f "$tmp/n$1.ready.json" ]] &&
    [[ $(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' \
      "$tmp/n$1.ready.json") == "${pid[$1]}" ]]
}

# status: "ID ROLE COMMIT APPLIED" per node that answers.
status() {
  # (dedupctl exits non-zero while a node is down: its table still counts)
  { "$dedupctl" --address="$all" --follow_leader=false cluster status 2>/dev/null || true; } \
    | awk 'NR > 1 && $3 != "unreachable" { print $1, $3, $5, $6 }'
}
leader_id() { status | awk '$2 == "leader" { print $1; exit }'; }

wait_for_leader() {
  for _ in $(seq 400); do
    [[ -n "$(leader_id)" ]] && return 0
    sleep 0.05
  done
  echo "cluster_restart: no leader" >&2
  exit 1
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# restart N SIGNAL: stops node N with SIGNAL, starts it again, reports.
restart() {
  local n=$1 signal=$2 t0 t_listen t_caught target applied
  kill -"$signal" "${pid[$n]}"
  wait "${pid[$n]}" 2>/dev/null || true
  wait_for_leader
  # Everything acknowledged so far, as the group's leader sees it.
  target=$(status | awk '$2 == "leader" { print $3; exit }')
  t0=$(now)
  rm -f "$tmp/n$n.ready.json"  # a SIGKILLed node leaves its file
  start "$n"
  until ready "$n"; do
    kill -0 "${pid[$n]}" 2>/dev/null || { cat "$tmp/n$n.log" >&2; exit 1; }
    sleep 0.02
  done
  t_listen=$(now)
  while :; do
    applied=$(status | awk -v n="$n" '$1 == n { print $4 }')
    [[ -n "$applied" ]] && ((applied >= target)) && break
    sleep 0.05
  done
  t_caught=$(now)
  echo "restart node $n ($signal): listening after $(elapsed "$t0" "$t_listen") s," \
    "applied index $applied >= commit $target after $(elapsed "$t0" "$t_caught") s;" \
    "rss $(awk '/VmRSS/ { printf "%.0f MiB", $2 / 1024 }' "/proc/${pid[$n]}/status")," \
    "disk $(du -sh "$tmp/n$n" | cut -f1) (raft log $(du -sh "$tmp/n$n/raft" | cut -f1))"
}

for n in 1 2 3; do start "$n"; done
wait_for_leader
leader=$(leader_id)
t0=$(now)
"$loader" --address="${client[$leader]}" --records="$records" --reads=0 >&2
echo "loaded $records records through node $leader in $(elapsed "$t0" "$(now)") s"
follower=$(status | awk '$2 == "follower" { print $1; exit }')
restart "$follower" TERM
restart "$(leader_id)" KILL
