#!/usr/bin/env bash
# deploy/systemd/dedupd.service: systemd accepts the unit, and dedupd runs as
# an unprivileged user whose only writable path is its data directory.
# Usage: systemd_test.sh SOURCE_DIR DEDUPD DEDUPCTL
set -euo pipefail
src=$1 dedupd=$2 dedupctl=$3
tmp=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# The unit, pointed at the binary under test (verify wants it to exist).
sed "s|/usr/local/bin/dedupd|$dedupd|" "$src/deploy/systemd/dedupd.service" \
  >"$tmp/dedupd.service"
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify "$tmp/dedupd.service" 2>&1) || {
    echo "systemd-analyze verify failed:"; echo "$out"; exit 1; }
  # verify prints warnings without failing; none are expected.
  if grep -v "^$" <<<"$out" | grep -q .; then
    echo "systemd-analyze verify warned:"; echo "$out"; exit 1
  fi
else
  echo "systemd-analyze not installed: unit syntax not checked" >&2
fi
grep -q '^User=dedup$' "$tmp/dedupd.service"
grep -q '^ProtectSystem=strict$' "$tmp/dedupd.service"
grep -q '^NoNewPrivileges=yes$' "$tmp/dedupd.service"

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
