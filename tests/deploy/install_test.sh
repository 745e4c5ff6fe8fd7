#!/usr/bin/env bash
# cmake --install: the tree it makes (binaries, systemd units, docs,
# Prometheus rules), the units rewritten to the prefix (their ExecStart and
# Documentation= name files that exist there; systemd-analyze accepts them),
# and DESTDIR staging, which keeps the prefix in the units.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install"; }

want=(
  bin/dedupctl
  bin/dedupd
  lib/systemd/system/dedupd.service
  lib/systemd/system/dedupd@.service
  share/dedup/prometheus/alert_rules.yml
  share/dedup/prometheus/prometheus.yml
  share/dedup/prometheus/recording_rules.yml
  share/doc/dedup/ARCHITECTURE.md
  share/doc/dedup/LICENSE
  share/doc/dedup/README.md
  share/doc/dedup/examples/dedupd-node.env.example
  share/doc/dedup/k8s/README.md
)
for f in "$src"/docs/*.md; do want+=("share/doc/dedup/docs/$(basename "$f")"); done
for f in "$src"/deploy/grafana/*.json; do
  [[ -e "$f" ]] && want+=("share/dedup/grafana/$(basename "$f")")
done
got=$(cd "$prefix" && find . -type f | sed 's|^\./||' | sort)
expected=$(printf '%s\n' "${want[@]}" | sort)
[[ "$got" == "$expected" ]] ||
  fail "installed tree differs:"$'\n'"$(diff <(echo "$expected") <(echo "$got"))"
for b in dedupd dedupctl; do [[ -x "$prefix/bin/$b" ]] || fail "bin/$b not executable"; done
"$prefix/bin/dedupctl" --help >/dev/null || fail "installed dedupctl does not run"
for f in prometheus.yml recording_rules.yml alert_rules.yml; do
  cmp -s "$src/deploy/prometheus/$f" "$prefix/share/dedup/prometheus/$f" ||
    fail "share/dedup/prometheus/$f is not deploy/prometheus/$f"
done

# The units point at the prefix: binaries and docs that are there.
for unit in dedupd.service dedupd@.service; do
  u=$prefix/lib/systemd/system/$unit
  ! grep -v '^#' "$u" | grep -q /usr/local || fail "$unit still names /usr/local: $(grep -n /usr/local "$u")"
  exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$u")
  [[ "$exec_start" == "$prefix/bin/dedupd" ]] || fail "$unit runs $exec_start"
  docs=$(sed -n 's/^Documentation=//p' "$u")
  [[ -n "$docs" ]] || fail "$unit has no Documentation="
  for uri in $docs; do
    [[ "$uri" == file://"$prefix"/share/doc/dedup/* ]] || fail "$unit: $uri is not in the installed docs"
    [[ -f "${uri#file://}" ]] || fail "$unit: $uri is not installed"
  done
done
if command -v systemd-analyze >/dev/null; then
  cp "$prefix/lib/systemd/system/"*.service "$tmp/"
  for unit in dedupd.service dedupd@1.service; do
    out=$(systemd-analyze verify "$tmp/$unit" 2>&1) || fail "verify $unit: $out"
    [[ -z "$out" ]] || fail "verify $unit warned: $out"
  done
fi

# DESTDIR stages the tree; the units keep the real prefix.
DESTDIR=$tmp/stage cmake --install "$build" --prefix /opt/dedup >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "DESTDIR install"; }
staged=$(cd "$tmp/stage/opt/dedup" && find . -type f | sed 's|^\./||' | sort)
[[ "$staged" == "$expected" ]] || fail "DESTDIR tree differs"
grep -q '^ExecStart=/opt/dedup/bin/dedupd ' "$tmp/stage/opt/dedup/lib/systemd/system/dedupd.service" ||
  fail "DESTDIR: $(grep ^ExecStart "$tmp/stage/opt/dedup/lib/systemd/system/dedupd.service")"
! grep -rq "$tmp/stage" "$tmp/stage/opt/dedup/lib/systemd/system" || fail "DESTDIR leaked into the units"
echo "install tree and units checked"
