#!/usr/bin/env bash
# deploy/systemd: systemd accepts dedupd.service and the group template
# dedupd@.service (an instance of it); both are Type=notify with a watchdog;
# the template's ExecStart, expanded as systemd does from an env file like
# dedupd-node.env.example, starts three members that form a group; and
# dedupd runs as an unprivileged user whose only writable path is its data
# directory.
# Usage: systemd_test.sh SOURCE_DIR DEDUPD DEDUPCTL
set -euo pipefail
src=$1 dedupd=$2 dedupctl=$3
tmp=$(mktemp -d)
pid=
pids=()
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# The units, pointed at the binary under test (verify wants it to exist).
for unit in dedupd.service dedupd@.service; do
  sed "s|/usr/local/bin/dedupd|$dedupd|" "$src/deploy/systemd/$unit" \
    >"$tmp/$unit"
done
if command -v systemd-analyze >/dev/null; then
  # A template is verified through an instance of it.
  for unit in dedupd.service dedupd@1.service; do
    out=$(systemd-analyze verify "$tmp/$unit" 2>&1) || {
      echo "systemd-analyze verify $unit failed:"; echo "$out"; exit 1; }
    # verify prints warnings without failing; none are expected.
    if grep -v "^$" <<<"$out" | grep -q .; then
      echo "systemd-analyze verify $unit warned:"; echo "$out"; exit 1
    fi
  done
else
  echo "systemd-analyze not installed: unit syntax not checked" >&2
fi
for unit in dedupd.service dedupd@.service; do
  for line in '^User=dedup$' '^ProtectSystem=strict$' '^NoNewPrivileges=yes$' \
      '^Type=notify$' '^WatchdogSec=[0-9]+$' \
      '^Documentation=file:///usr/local/share/doc/dedup/README\.md( |$)'; do
    grep -Eq "$line" "$tmp/$unit" || { echo "$unit: no line $line"; exit 1; }
  done
done
grep -q '^EnvironmentFile=/etc/dedup/dedupd-%i.env$' "$tmp/dedupd@.service"
grep -q '^StateDirectory=dedup/node-%i$' "$tmp/dedupd@.service"

# The template's ExecStart for instances 1-3, with env files like the
# example's (loopback ports here), expanded as systemd does: %i, ${VAR}
# within a word, $VAR alone split on spaces. Each member gets its own data
# dir and ready file (later flags win); they must form one group.
expand() {  # UNIT INSTANCE ENVFILE -> the command, one word a line
  /usr/bin/python3 - "$@" <<'PY'
import re, shlex, sys
unit, instance, envfile = sys.argv[1:]
text = open(unit).read().replace("\\\n", " ")
line = next(l for l in text.splitlines() if l.startswith("ExecStart="))
env = {}
for l in open(envfile):
    l = l.strip()
    if l and not l.startswith("#"):
        k, _, v = l.partition("=")
        env[k] = v
words = []
for w in shlex.split(line[len("ExecStart="):].replace("%i", instance)):
    m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
    if m:
        words += env.get(m.group(1), "").split()
        continue
    words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                        lambda g: env.get(g.group(1), ""), w))
print("\n".join(words))
PY
}
# The example's variables, and only those, are what the template reads.
example_vars=$(grep -oE '^[A-Z_]+=' "$src/deploy/systemd/dedupd-node.env.example" | sort | tr -d =)
unit_vars=$(grep -oE '\$\{?[A-Z_]+' "$tmp/dedupd@.service" | tr -d '${' | grep -v MAINPID | sort -u)
[[ "$example_vars" == "$unit_vars" ]] || {
  echo "env example names [$example_vars], the template reads [$unit_vars]"; exit 1; }
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
peers=
declare -A raft client
for i in 1 2 3; do
  raft[$i]=127.0.0.1:$(port) client[$i]=127.0.0.1:$(port)
  peers=$peers${peers:+,}$i=${raft[$i]}=${client[$i]}
done
for i in 1 2 3; do
  {
    echo "DEDUPD_PEERS=$peers"
    echo "DEDUPD_RAFT_ADDRESS=${raft[$i]}"
    echo "DEDUPD_ADDRESS=${client[$i]}"
    echo "DEDUPD_METRICS_ADDRESS="
    echo "DEDUPD_FLAGS=--event_log=off --shutdown_grace_ms=1000"
  } >"$tmp/dedupd-$i.env"
  mapfile -t cmd < <(expand "$tmp/dedupd@.service" "$i" "$tmp/dedupd-$i.env")
  [[ "${cmd[0]}" == "$dedupd" && "${cmd[1]}" == "--node_id=$i" ]] || {
    echo "instance $i runs: ${cmd[*]}"; exit 1; }
  printf '%s\n' "${cmd[@]}" | grep -qx -- "--peers=$peers"
  printf '%s\n' "${cmd[@]}" | grep -qx -- "--event_log=off"
  "${cmd[@]}" --data_dir="$tmp/node-$i" --ready_file="$tmp/ready-$i.json" \
    >"$tmp/node-$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 300); do [[ -f "$tmp/ready-$i.json" ]] && break; sleep 0.1; done
  [[ -f "$tmp/ready-$i.json" ]] || { echo "member $i did not start:"; cat "$tmp/node-$i.log"; exit 1; }
done
leader=
for _ in $(seq 100); do
  status=$("$dedupctl" --address="${client[1]}" cluster status 2>&1 || true)
  if [[ $(grep -cw leader <<<"$status") -eq 1 && $(grep -cw follower <<<"$status") -eq 2 ]]; then
    leader=yes; break
  fi
  sleep 0.2
done
[[ -n "$leader" ]] || { echo "no group of 3 formed:"; echo "$status"; cat "$tmp"/node-*.log; exit 1; }
"$dedupctl" --address="${client[1]},${client[2]},${client[3]}" begin systemd-test g1 | grep -q 'status: STARTED'
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p" || { echo "a member exited $?"; cat "$tmp"/node-*.log; exit 1; }; done
pids=()

# As an unprivileged user (nobody), with a data dir it owns and nothing else
# writable: serves, answers, stops cleanly.
if [[ $(id -u) -ne 0 ]]; then
  echo "not root: the unprivileged run needs setpriv as root; skipped" >&2
  exit 0
fi
chmod 0755 "$tmp"
install -d -o nobody -g nogroup -m 0700 "$tmp/data"
# The ready file goes in a dir nobody may write (the data dir is the only
# other writable path, and everything found outside it below is a failure).
install -d -o nobody -g nogroup -m 0700 "$tmp/run"
(cd / && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
  --no-new-privs "$dedupd" --data_dir="$tmp/data" --address=127.0.0.1:0 \
  --metrics_address= --ready_file="$tmp/run/ready.json" >"$tmp/log" 2>&1) &
pid=$!
address=
for _ in $(seq 200); do
  if [[ -f "$tmp/run/ready.json" ]]; then
    address=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' \
      "$tmp/run/ready.json")
    break
  fi
  kill -0 "$pid" 2>/dev/null || { echo "dedupd exited:"; cat "$tmp/log"; exit 1; }
  sleep 0.1
done
[[ -n "$address" ]] || { echo "dedupd did not start:"; cat "$tmp/log"; exit 1; }
[[ $(stat -c %U /proc/$pid) == nobody ]] || { echo "not running as nobody"; exit 1; }
"$dedupctl" --address="$address" begin systemd-test k1 | grep -q 'status: STARTED'
kill -TERM "$pid"
wait "$pid" || { echo "dedupd exited $?:"; cat "$tmp/log"; exit 1; }
pid=
# Everything it wrote is inside its data dir.
[[ $(find "$tmp" -user nobody -not -path "$tmp/data*" -not -path "$tmp/run" | wc -l) -eq 0 ]]
echo "systemd unit verified; dedupd ran as nobody"
