#!/usr/bin/python3
"""End to end: a real Prometheus scrapes a real dedupd with the deployed
configuration (target and intervals rewritten) and rule files, and the
recording rules compute the expected duplicate ratio.

usage: scrape_e2e_test.py DEDUPD DEDUPCTL PROMETHEUS DEPLOY_DIR

Begins are driven only after Prometheus has scraped the zero-initialised
counters, so each series' first sample in the 5m window is 0 and rate()
extrapolates every series of the target by the same factor: the ratio of two
rates is then exactly the ratio of the increases (1 duplicate of 4 Begins).
"""

import json
import os
import re
import sys
import time
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from promtest_util import (Cleanup, Ctl, fail, free_port, http_get, log,
                           start_dedupd)


def make_config(deploy_dir, metrics_port, out_path):
    with open(os.path.join(deploy_dir, "prometheus.yml")) as f:
        text = f.read()
    # The target also gets the labels Kubernetes service discovery (or the
    # Prometheus Operator) would give it, `namespace` among them: dedup's own
    # label must not collide with it (it would become exported_namespace).
    text, n = re.subn(r"(?m)^(\s*)- localhost:9464[ \t]*$",
                      lambda m: "%s- 127.0.0.1:%d\n%slabels:\n%s  namespace: "
                      "prod\n%s  pod: dedup-0" % (
                          m.group(1), metrics_port, m.group(1)[:-2],
                          m.group(1)[:-2], m.group(1)[:-2]), text)
    if n != 1:
        fail("prometheus.yml: expected one target localhost:9464, found %d" % n)
    text, n = re.subn(r"(?m)^(\s*(?:scrape_interval|evaluation_interval|"
                      r"scrape_timeout)):\s*\S+", r"\1: 1s", text)
    if n < 2:
        fail("prometheus.yml: scrape_interval/evaluation_interval not found")
    rule_files = []

    def absolute(m):
        path = os.path.join(deploy_dir, m.group(2))
        rule_files.append(m.group(2))
        return m.group(1) + path

    text = re.sub(r"(?m)^(\s*-\s*)(\S+_rules\.yml)\s*$", absolute, text)
    if sorted(rule_files) != ["alert_rules.yml", "recording_rules.yml"]:
        fail("prometheus.yml: rule_files %s, expected recording_rules.yml "
             "and alert_rules.yml" % rule_files)
    with open(out_path, "w") as f:
        f.write(text)


class Prom:
    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port

    def api(self, path, **params):
        url = self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            fail("GET %s: %d %s" % (url, status, body[:500]))
        return doc["data"]

    def query(self, expr):
        """Instant query: [(labels, float value)]."""
        data = self.api("/api/v1/query", query=expr)
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def wait_for(self, what, expr, predicate, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.query(expr)
            except (OSError, ValueError) as e:  # not up yet
                last = repr(e)
            else:
                if predicate(last):
                    log("%s: %s -> %s" % (what, expr, last))
                    return last
            time.sleep(0.2)
        fail("%s: timed out after %ss waiting on %s; last answer %s"
             % (what, timeout, expr, last))


def single(pred):
    return lambda r: len(r) == 1 and pred(r[0][1])


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 64
    dedupd, dedupctl, prometheus, deploy_dir = sys.argv[1:]
    deploy_dir = os.path.abspath(deploy_dir)
    started = time.monotonic()
    with Cleanup("dedup-prom-e2e-") as c:
        grpc_port, metrics_port = start_dedupd(
            c, dedupd, ["--metrics_namespaces=billing"])
        log("dedupd on %d, metrics on %d" % (grpc_port, metrics_port))

        config = os.path.join(c.dir, "prometheus.yml")
        make_config(deploy_dir, metrics_port, config)
        prom_port = free_port()
        c.spawn("prometheus", [
            prometheus, "--config.file=" + config,
            "--storage.tsdb.path=" + os.path.join(c.dir, "tsdb"),
            "--web.listen-address=127.0.0.1:%d" % prom_port,
            "--log.level=warn"])
        prom = Prom(prom_port)

        # Prometheus is up, has scraped dedupd, and saw the counters at 0.
        prom.wait_for("target up", 'up{job="dedup"}', single(lambda v: v == 1),
                      timeout=20)
        prom.wait_for(
            "zero counters scraped",
            'dedup_namespace_begin_total{job="dedup",dedup_namespace="billing"}',
            lambda r: len(r) == 8 and all(v == 0 for _, v in r), timeout=10)

        ctl = Ctl(dedupctl, grpc_port)
        for i in range(1, 4):
            r = ctl.begin("billing", "inv-%d" % i, expect_status="STARTED")
            ctl.complete("billing", "inv-%d" % i, r["fence"],
                         "--result=sent-%d" % i)
        ctl.begin("billing", "inv-1", expect_status="DUPLICATE")
        # Namespaces not in --metrics_namespaces count as "other".
        ctl.begin("mail", "msg-1", expect_status="STARTED")
        ctl.begin("mail", "msg-2", expect_status="STARTED")

        prom.wait_for(
            "load scraped",
            'sum(dedup_namespace_begin_total{job="dedup",dedup_namespace="billing"})',
            single(lambda v: v == 4), timeout=10)
        prom.wait_for(
            "dedup_namespace beside the Kubernetes namespace target label",
            'count(dedup_namespace_begin_total{namespace="prod",'
            'dedup_namespace=~"billing|other"})',
            single(lambda v: v == 16), timeout=10)
        prom.wait_for("no exported_namespace label",
                      'count({exported_namespace!=""}) or vector(0)',
                      single(lambda v: v == 0), timeout=10)
        prom.wait_for(
            "billing duplicate ratio",
            'dedup_namespace:dedup_duplicate_ratio:rate5m{dedup_namespace="billing"}',
            single(lambda v: abs(v - 0.25) <= 0.01), timeout=10)
        prom.wait_for(
            "other namespace ratio",
            'dedup_namespace:dedup_duplicate_ratio:rate5m{dedup_namespace="other"}',
            single(lambda v: v == 0), timeout=10)
        prom.wait_for(
            "overall duplicate ratio (1 of 6 Begins)",
            'job:dedup_duplicate_ratio:rate5m{job="dedup"}',
            single(lambda v: abs(v - 1 / 6) <= 0.01), timeout=10)
        prom.wait_for(
            "Begin rate by outcome",
            'job_outcome:dedup_begin:rate5m{job="dedup",outcome="started"}'
            ' / on (job) job_outcome:dedup_begin:rate5m{job="dedup",'
            'outcome="duplicate"}',
            single(lambda v: abs(v - 5) <= 0.05), timeout=10)
        prom.wait_for(
            "Begin p99 recorded",
            'job_method:dedup_request_duration_seconds:p99_5m{method="Begin"}',
            single(lambda v: 0 < v <= 5), timeout=10)
        # 25% duplicates at > 0.01 Begins/s: the alert is pending (for: 10m).
        deadline = time.monotonic() + 10
        while True:
            alerts = prom.api("/api/v1/alerts")["alerts"]
            dup = [a for a in alerts
                   if a["labels"].get("alertname") == "DedupHighDuplicateRate"]
            if [(a["labels"].get("dedup_namespace"), a["state"]) for a in dup] == \
                    [("billing", "pending")]:
                log("DedupHighDuplicateRate pending for billing")
                break
            if time.monotonic() > deadline:
                fail("DedupHighDuplicateRate: expected one pending alert for "
                     "billing, got %s" % dup)
            time.sleep(0.2)
        others = [a["labels"]["alertname"] for a in alerts
                  if a["labels"].get("alertname") != "DedupHighDuplicateRate"]
        if others:
            fail("unexpected alerts against a healthy dedupd: %s" % others)

        # Every rule evaluated without error against the real metrics.
        groups = prom.api("/api/v1/rules")["groups"]
        names = sorted(g["name"] for g in groups)
        if names != ["dedup.alerts", "dedup.recording"]:
            fail("rule groups loaded: %s" % names)
        bad = [(r["name"], r.get("health"), r.get("lastError"))
               for g in groups for r in g["rules"]
               if r.get("health") != "ok"]
        if bad:
            fail("rules not healthy: %s" % bad)
        log("%d rules healthy" % sum(len(g["rules"]) for g in groups))
    log("PASS in %.1fs" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
