#!/usr/bin/python3
"""dedupd's /metrics: passes `promtool check metrics`, carries every metric of
the contract with its type and labels, pre-creates the bounded label sets at
0, and counts a known sequence of calls exactly.

usage: metrics_exposition_test.py DEDUPD DEDUPCTL PROMTOOL
"""

import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from promtest_util import (Cleanup, Ctl, Scrape, fail, log,
                           promtool_check_metrics, scrape, start_dedupd)

OUTCOMES = ["started", "takeover", "reentry", "in_use", "conflict",
            "duplicate"]
RESULTS = ["ok", "stale_fence", "not_found", "already_completed"]
WAITS = ["duplicate", "started", "timeout", "conflict"]
METHODS = ["Begin", "Complete", "Release", "Renew", "Get", "Forget"]

# family -> (type, label names of its series; histograms: without "le")
CONTRACT = {
    "dedup_begin_total": ("counter", {"outcome"}),
    "dedup_namespace_begin_total": ("counter", {"dedup_namespace", "outcome"}),
    "dedup_complete_total": ("counter", {"result"}),
    "dedup_release_total": ("counter", {"result"}),
    "dedup_renew_total": ("counter", {"result"}),
    "dedup_wait_total": ("counter", {"how"}),
    "dedup_invalid_requests_total": ("counter", {"method", "field"}),
    "dedup_grpc_errors_total": ("counter", {"method", "code"}),
    "dedup_expired_dropped_total": ("counter", set()),
    "dedup_event_log_dropped_total": ("counter", set()),
    "dedup_request_duration_seconds": ("histogram", {"method"}),
    "dedup_wait_duration_seconds": ("histogram", set()),
    "dedup_wal_sync_duration_seconds": ("histogram", set()),
    "dedup_writes_per_sync": ("histogram", set()),
    "dedup_records": ("gauge", set()),
    "dedup_inflight_leases": ("gauge", set()),
    "dedup_lapsed_leases": ("gauge", set()),
    "dedup_oldest_lapsed_lease_seconds": ("gauge", set()),
    "dedup_waiting_begins": ("gauge", set()),
    "dedup_inflight_tracking_saturated": ("gauge", set()),
    "dedup_rocksdb_live_sst_bytes": ("gauge", set()),
    "dedup_rocksdb_pending_compaction_bytes": ("gauge", set()),
    "dedup_rocksdb_block_cache_usage_bytes": ("gauge", set()),
    "dedup_rocksdb_memtable_bytes": ("gauge", set()),
    "dedup_build_info": ("gauge", {"version", "git_sha"}),
    "process_resident_memory_bytes": ("gauge", set()),
    "process_open_fds": ("gauge", set()),
    "process_cpu_seconds_total": ("counter", set()),
    "process_start_time_seconds": ("gauge", set()),
    "dedup_metrics_http_requests_total": ("counter", {"code"}),
    "dedup_metrics_http_connections_closed_total": ("counter", {"reason"}),
    "dedup_metrics_http_connections": ("gauge", set()),
    "dedup_session_streams_open": ("gauge", set()),
    "dedup_session_ops_total": ("counter", {"kind", "code"}),
    "dedup_session_frames_total": ("counter", {"direction"}),
}
# Created lazily (label values not known up front): may be absent at first.
LAZY = {"dedup_invalid_requests_total", "dedup_grpc_errors_total"}


def family_of(name, types):
    """The family a sample name belongs to (histogram suffixes stripped)."""
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[:-len(suffix)] in types:
            return name[:-len(suffix)]
    return None


def check_contract(s, allow_lazy_absent):
    errors = []
    for fam, (typ, labels) in CONTRACT.items():
        if fam not in s.types:
            if not (allow_lazy_absent and fam in LAZY):
                errors.append("missing metric family %s (%s)" % (fam, typ))
            continue
        if s.types[fam] != typ:
            errors.append("%s has TYPE %s, expected %s"
                          % (fam, s.types[fam], typ))
    for name, lbls, _v in s.samples:
        fam = family_of(name, s.types)
        if fam is None:
            errors.append("sample %s has no # TYPE line" % name)
            continue
        if fam not in CONTRACT:
            continue
        want = set(CONTRACT[fam][1])
        if name.endswith("_bucket") and CONTRACT[fam][0] == "histogram":
            want.add("le")
        # Kubernetes service discovery and the Prometheus Operator give
        # every target a `namespace` label: a label of ours by that name
        # would be renamed exported_namespace and regroup the rules.
        if "namespace" in lbls:
            errors.append("%s%s: label `namespace` collides with the "
                          "Kubernetes target label" % (name, lbls))
        if set(lbls) != want:
            errors.append("%s%s: label names %s, expected %s"
                          % (name, lbls, sorted(lbls), sorted(want)))
    if errors:
        fail("metrics contract:\n  " + "\n  ".join(errors))


def check_initial(s):
    """Bounded label sets exist at 0 before any call (rate() and increase()
    miss a series' first increment when it appears already incremented)."""
    for o in OUTCOMES:
        if s.value("dedup_begin_total", outcome=o) != 0:
            fail("dedup_begin_total{outcome=%s} not 0 at start" % o)
        for ns in ("billing", "other"):
            if s.value("dedup_namespace_begin_total", dedup_namespace=ns,
                       outcome=o) != 0:
                fail("namespace_begin_total{%s,%s} not 0 at start" % (ns, o))
    namespaces = {l["dedup_namespace"] for l, _ in
                  s.find("dedup_namespace_begin_total")}
    if namespaces != {"billing", "other"}:
        fail("dedup_namespace label values %s, expected billing and other "
             "(--metrics_namespaces=billing)" % sorted(namespaces))
    for fam in ("dedup_complete_total", "dedup_release_total",
                "dedup_renew_total"):
        for r in RESULTS:
            if s.value(fam, result=r) != 0:
                fail("%s{result=%s} not 0 at start" % (fam, r))
    for h in WAITS:
        if s.value("dedup_wait_total", how=h) != 0:
            fail("dedup_wait_total{how=%s} not 0 at start" % h)
    for m in METHODS:
        if s.value("dedup_request_duration_seconds_count", method=m) != 0:
            fail("dedup_request_duration_seconds_count{method=%s} not 0" % m)
        les = sorted(float(l["le"]) for l, _ in
                     s.find("dedup_request_duration_seconds_bucket", method=m))
        if not les or les[0] != 0.00005 or les[-2] != 5 or les[-1] != float(
                "inf"):
            fail("dedup_request_duration_seconds{method=%s} buckets %s, "
                 "expected 50µs..5s and +Inf" % (m, les))
    for fam in ("dedup_expired_dropped_total", "dedup_event_log_dropped_total",
                "dedup_lapsed_leases", "dedup_inflight_leases",
                "dedup_waiting_begins", "dedup_oldest_lapsed_lease_seconds"):
        if s.value(fam) != 0:
            fail("%s is %s at start, expected 0" % (fam, s.value(fam)))
    info = s.find("dedup_build_info")
    if len(info) != 1 or info[0][1] != 1 or not info[0][0].get("version") \
            or not info[0][0].get("git_sha"):
        fail("dedup_build_info: %r, expected one series = 1 with non-empty "
             "version and git_sha" % info)
    start = s.value("process_start_time_seconds")
    if abs(start - time.time()) > 120:
        fail("process_start_time_seconds %s is not about now (%s)"
             % (start, time.time()))
    if s.value("process_open_fds") <= 0:
        fail("process_open_fds not positive")
    if s.value("process_resident_memory_bytes") < 1 << 20:
        fail("process_resident_memory_bytes < 1 MiB")


def drive(ctl):
    """A known sequence of calls. Returns nothing; every answer is checked."""
    # billing (labelled): 3 fresh keys started and completed, 1 duplicate.
    for i in range(1, 4):
        r = ctl.begin("billing", "k%d" % i, expect_status="STARTED")
        ctl.complete("billing", "k%d" % i, r["fence"], "--result=done%d" % i)
    ctl.begin("billing", "k1", expect_status="DUPLICATE")
    ctl.complete("billing", "nokey", 5, expect_rc=3)  # not_found
    ctl.run("get", "billing", "k2")
    ctl.run("forget", "billing", "k3")

    # mail (not labelled: counted as "other").
    ctl.begin("mail", "m1", "--owner=w1", expect_status="STARTED")
    ctl.begin("mail", "m1", "--owner=w2", expect_status="IN_USE")
    ctl.begin("mail", "m1", "--owner=w1", expect_status="STARTED")  # reentry
    ctl.begin("mail", "m1", "--owner=w3", "--args_hash_hex=ff",
              expect_status="CONFLICT")
    # Waits 200ms for w1's outcome, then answers IN_USE (how="timeout").
    ctl.begin("mail", "m1", "--owner=w4", "--wait_ms=200",
              expect_status="IN_USE")

    # m2: a crashed worker (lease ran out, nobody took over).
    ctl.begin("mail", "m2", "--owner=crashed", "--lease_ms=100",
              expect_status="STARTED")
    # m3: lease runs out, another owner takes over; the first owner's
    # Complete, Renew and Release are refused with STALE_FENCE.
    old = ctl.begin("mail", "m3", "--owner=slow", "--lease_ms=100",
                    expect_status="STARTED")["fence"]
    time.sleep(0.4)
    new = ctl.begin("mail", "m3", "--owner=fast", expect_status="STARTED")
    if new.get("takeover") != "true":
        fail("begin m3 after the lease ran out: takeover %r, expected true"
             % new.get("takeover"))
    ctl.complete("mail", "m3", old, "--result=late", expect_rc=3)
    ctl.run("renew", "mail", "m3", old, expect_rc=3)
    ctl.run("release", "mail", "m3", old, expect_rc=3)
    ctl.run("renew", "mail", "m3", new["fence"])
    ctl.complete("mail", "m3", new["fence"], "--result=ok")
    # Same Complete again: answered OK (idempotent).
    ctl.complete("mail", "m3", new["fence"], "--result=ok")

    # Bad input: INVALID_ARGUMENT naming the field; not a Begin answer.
    ctl.run("begin", "bad namespace!", "k", expect_rc=2)


def check_after(s):
    def eq(name, want, **labels):
        got = s.value(name, **labels)
        if got != want:
            fail("%s%s = %s, expected %s" % (name, labels, got, want))

    begins = {"started": 6, "takeover": 1, "reentry": 1, "in_use": 2,
              "conflict": 1, "duplicate": 1}
    for o, n in begins.items():
        eq("dedup_begin_total", n, outcome=o)
    billing = {"started": 3, "duplicate": 1}
    other = {"started": 3, "takeover": 1, "reentry": 1, "in_use": 2,
             "conflict": 1}
    for o in OUTCOMES:
        eq("dedup_namespace_begin_total", billing.get(o, 0),
           dedup_namespace="billing", outcome=o)
        eq("dedup_namespace_begin_total", other.get(o, 0),
           dedup_namespace="other", outcome=o)
    complete = {"ok": 5, "stale_fence": 1, "not_found": 1}
    for r in RESULTS:
        eq("dedup_complete_total", complete.get(r, 0), result=r)
        eq("dedup_renew_total", {"ok": 1, "stale_fence": 1}.get(r, 0),
           result=r)
        eq("dedup_release_total", {"stale_fence": 1}.get(r, 0), result=r)
    for h in WAITS:
        eq("dedup_wait_total", 1 if h == "timeout" else 0, how=h)
    eq("dedup_invalid_requests_total", 1, method="Begin", field="namespace")
    eq("dedup_grpc_errors_total", 1, method="Begin", code="INVALID_ARGUMENT")
    # The one Begin that waited is timed in dedup_wait_duration_seconds.
    calls = {"Begin": 12, "Complete": 7, "Release": 1, "Renew": 2, "Get": 1,
             "Forget": 1}
    eq("dedup_wait_duration_seconds_count", 1)
    for m, n in calls.items():
        eq("dedup_request_duration_seconds_count", n, method=m)
        inf = s.value("dedup_request_duration_seconds_bucket", method=m,
                      le="+Inf")
        if inf != n:
            fail("dedup_request_duration_seconds_bucket{method=%s,le=+Inf} "
                 "= %s, expected %s" % (m, inf, n))
    # Storage writes happened and carried operations.
    writes = s.value("dedup_wal_sync_duration_seconds_count")
    ops = s.value("dedup_writes_per_sync_sum")
    if writes < 1 or s.value("dedup_writes_per_sync_count") != writes:
        fail("dedup_wal_sync_duration_seconds_count %s and "
             "dedup_writes_per_sync_count %s: expected equal and > 0"
             % (writes, s.value("dedup_writes_per_sync_count")))
    if ops < writes:
        fail("dedup_writes_per_sync_sum %s < number of writes %s"
             % (ops, writes))
    # m1 is in flight with a live lease; m2 lapsed (crashed worker) about
    # 0.3s+ ago; m3 completed.
    eq("dedup_inflight_leases", 1)
    eq("dedup_lapsed_leases", 1)
    oldest = s.value("dedup_oldest_lapsed_lease_seconds")
    if not 0.2 <= oldest <= 30:
        fail("dedup_oldest_lapsed_lease_seconds = %s, expected the age of "
             "m2's lapsed lease (0.2s..30s)" % oldest)
    eq("dedup_waiting_begins", 0)
    if s.value("process_cpu_seconds_total") <= 0:
        fail("process_cpu_seconds_total not positive")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 64
    dedupd, dedupctl, promtool = sys.argv[1:]
    with Cleanup("dedup-metrics-") as c:
        grpc_port, metrics_port = start_dedupd(
            c, dedupd, ["--metrics_namespaces=billing"])
        log("dedupd on %d, metrics on %d" % (grpc_port, metrics_port))

        first = scrape(metrics_port)
        promtool_check_metrics(promtool, first)
        s = Scrape(first)
        check_contract(s, allow_lazy_absent=True)
        check_initial(s)
        log("initial scrape: contract and zero-initialised series OK")

        drive(Ctl(dedupctl, grpc_port))
        time.sleep(0.3)  # m2's lease (100ms) has surely lapsed by now

        second = scrape(metrics_port)
        promtool_check_metrics(promtool, second)
        s = Scrape(second)
        check_contract(s, allow_lazy_absent=False)
        check_after(s)
        log("after the known calls: every counter, histogram and gauge OK")
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
