#!/usr/bin/env bash
# Checks the README's run command as written, in a fresh clone of the
# committed tree: it must install, build and start dedupd on 127.0.0.1:50051
# with data in ./data, serve a Begin/Complete/Begin(DUPLICATE) cycle, and stop
# cleanly on SIGTERM. The test command is what .ci/run executes, so CI itself
# runs it; here we check that .ci/run's first command is exactly that one
# (later stages may follow it).
# Usage: readme_commands_test.sh REPO_DIR DEDUPCTL
set -euo pipefail
repo=$1
dedupctl=$2

fail() { echo "FAIL: $*" >&2; exit 1; }

commands=$(sed -n '/readme-commands:begin/,/readme-commands:end/p' "$repo/README.md" |
  grep -E '^\./' | sed 's/[[:space:]]*#.*$//')
run_cmd=$(echo "$commands" | sed -n 1p)
test_cmd=$(echo "$commands" | sed -n 2p)
[[ -n "$run_cmd" && -n "$test_cmd" ]] || fail "README lacks the two commands"
echo "run command:  $run_cmd"
echo "test command: $test_cmd"
first=$(grep -vE '^[[:space:]]*(#|$|set |cd )' "$repo/.ci/run" | sed -n 1p)
[[ "$first" == "$test_cmd" || "$first" == "exec $test_cmd" ]] ||
  fail ".ci/run does not run '$test_cmd' first (it runs '$first')"

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL -- "-$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

git clone --quiet --no-hardlinks "$repo" "$work/clone"
cd "$work/clone"
log="$work/run.log"
# The run command forwards extra flags to dedupd (scripts/run: "$@"), so it
# gets a --ready_file: dedupd writes it once serving, with the bound address.
ready="$work/ready.json"
# Own process group, so the whole pipeline can be signalled like Ctrl-C would.
setsid bash -c "$run_cmd --ready_file=$ready" >"$log" 2>&1 &
server_pid=$!

deadline=$((SECONDS + 1200))
until [[ -f "$ready" ]]; do
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; fail "run command exited early"; }
  ((SECONDS < deadline)) || { tail -50 "$log"; fail "server not ready after 20 min"; }
  sleep 1
done
address=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' "$ready")
[[ "$address" == 127.0.0.1:50051 ]] || fail "dedupd serves on $address, not 127.0.0.1:50051"
echo "server up after ${SECONDS}s"

out=$("$dedupctl" begin readme key-1 --owner=readme-test)
echo "$out"
fence=$(echo "$out" | awk -F': *' '$1=="fence"{print $2}')
echo "$out" | grep -q "STARTED" || fail "first begin not STARTED"
"$dedupctl" complete readme key-1 "$fence" --result=hello
out=$("$dedupctl" begin readme key-1)
echo "$out"
echo "$out" | grep -q "DUPLICATE" || fail "second begin not DUPLICATE"
echo "$out" | grep -q "hello" || fail "stored result not replayed"
[[ -d "$work/clone/data" ]] || fail "no ./data directory in the clone"

kill -TERM -- "-$server_pid"
wait "$server_pid" || fail "run command exited non-zero after SIGTERM"
grep -q "stopped cleanly" "$log" || { cat "$log"; fail "no clean stop"; }
server_pid=""
echo "PASS"
