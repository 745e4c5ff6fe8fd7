#!/usr/bin/python3
"""deploy/grafana/dedup.json: every PromQL expression parses (promtool) and
names only metrics a real dedupd exports (a single node and every member of a
real 3-node group, scraped) or series recorded by deploy/prometheus; dedup's
namespace label is dedup_namespace everywhere, never `namespace` (the
Kubernetes target label).

usage: grafana_dashboard_test.py DEDUPD PROMTOOL DEPLOY_PROMETHEUS_DIR DASHBOARD
"""

import json
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from promtest_util import (Cleanup, NotReady, fail, free_port, log,
                           parse_exposition, scrape, start_dedupd, wait_ready)

# What Grafana substitutes before the query reaches Prometheus.
VARIABLES = {"$__rate_interval": "1m", "$job": ".+", "$instance": ".+",
             "$dedup_namespace": ".+"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "bool", "and", "or", "unless", "offset", "inf", "nan", "atan2"}
GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"')


def substitute(expr):
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    if "$" in expr:
        fail("unknown dashboard variable in %r" % expr)
    return expr


def label_names(expr):
    """Label names the expression matches on or groups by."""
    names = [m.group(1) for m in MATCHER.finditer(expr)]
    for m in GROUPING.finditer(expr):
        names += [n.strip() for n in m.group(2).split(",") if n.strip()]
    return names


def metric_names(expr):
    """Series names the expression selects: identifiers that are not
    functions, keywords, labels, durations or string contents."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = GROUPING.sub(" ", text)
    names = set()
    for m in IDENT.finditer(text):
        word = m.group(0)
        before = text[:m.start()]
        if before and (before[-1].isdigit() or before[-1] == "."):
            continue  # 1e3, 0.5
        if word.lower() in KEYWORDS or re.match(r"\s*\(", text[m.end():]):
            continue
        names.add(word)
    return names


def dashboard_queries(dashboard):
    """[(where, expr, legend)] of every panel target and variable query."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append(("panel %r" % p.get("title"), t.get("expr", ""),
                            t.get("legendFormat", "")))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_]\w*)\)", q.strip())
        if not m:
            fail("variable %s: unexpected query %r" % (v["name"], q))
        out.append(("variable %s" % v["name"], m.group(1), ""))
        out.append(("variable %s" % v["name"],
                    "count by (%s) (%s)" % (m.group(2), m.group(1)), ""))
    return out


def exported_names(texts):
    names = set()
    for text in texts:
        types, samples = parse_exposition(text)
        for fam, typ in types.items():
            names.add(fam)
            if typ == "histogram":
                names |= {fam + "_bucket", fam + "_sum", fam + "_count"}
            if typ == "summary":
                names |= {fam + "_sum", fam + "_count"}
        names |= {s[0] for s in samples}
    return names


def start_group(c, dedupd):
    """A 3-node group on 127.0.0.1-3; the metrics pages of its members once
    one of them leads."""
    nodes = []
    for i in (1, 2, 3):
        ip = "127.0.0.%d" % i
        nodes.append((i, ip, "%s:%d" % (ip, free_port()),
                      "%s:%d" % (ip, free_port())))
    peers = ",".join("%d=%s=%s" % (i, raft, addr)
                     for i, _ip, addr, raft in nodes)
    ports = []
    for i, ip, addr, _raft in nodes:
        ready = os.path.join(c.dir, "n%d.ready.json" % i)
        proc, _ = c.spawn("node%d" % i, [
            dedupd, "--node_id=%d" % i, "--peers=" + peers,
            "--address=" + addr, "--data_dir=" + os.path.join(c.dir, "n%d" % i),
            "--metrics_address=%s:0" % ip, "--event_log=off",
            "--ready_file=" + ready])
        try:
            info = wait_ready(ready, proc, 30, poll_s=0.05)
        except NotReady as e:
            fail(str(e))
        ports.append((ip, int(info["metrics_address"].rsplit(":", 1)[1])))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pages = [scrape(port, ip) for ip, port in ports]
        if any(re.search(r'^dedup_raft_role\{role="leader"\} 1$', p, re.M)
               for p in pages):
            return pages
        time.sleep(0.2)
    fail("the 3-node group elected no leader in 20 s")


def promtool_parses(promtool, queries, tmpdir):
    """Every expression as a recording rule: promtool parses them all."""
    path = os.path.join(tmpdir, "dashboard_rules.yml")
    with open(path, "w") as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for i, (_where, expr, _legend) in enumerate(queries):
            f.write("      - record: dashboard:expr_%d\n        expr: %s\n"
                    % (i, json.dumps(expr)))
    res = subprocess.run([promtool, "check", "rules", path],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        fail("promtool check rules on the dashboard's expressions:\n%s%s"
             % (res.stdout, res.stderr))
    log("promtool parses all %d expressions" % len(queries))


def check_layout(dashboard):
    """Grafana imports it: unique panel ids, panels within the 24-column
    grid, every query on the dashboard's data source variable."""
    ids, count = set(), 0
    for p in dashboard["panels"]:
        count += 1
        g = p["gridPos"]
        if p["id"] in ids or g["x"] < 0 or g["x"] + g["w"] > 24:
            fail("panel %r: duplicate id or outside the grid" % p["title"])
        ids.add(p["id"])
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != "${datasource}":
                fail("panel %r: query not on ${datasource}" % p["title"])
    if not dashboard.get("uid") or count < 10:
        fail("dashboard without uid or with %d panels" % count)


def check_namespace_label(dashboard, queries):
    uses = 0
    for where, expr, legend in queries:
        labels = label_names(expr)
        bad = {"namespace", "exported_namespace"} & set(labels)
        if bad or re.search(r"\{\{\s*(exported_)?namespace\s*\}\}", legend):
            fail("%s uses the label %s (dedup's is dedup_namespace): %r %r"
                 % (where, bad or "namespace", expr, legend))
        uses += "dedup_namespace" in labels
    if uses < 3:
        fail("only %d expressions select or group by dedup_namespace" % uses)
    names = [v["name"] for v in dashboard["templating"]["list"]]
    if "dedup_namespace" not in names:
        fail("no dedup_namespace variable (variables: %s)" % names)
    log("dedup_namespace: %d expressions, a variable, no `namespace`" % uses)


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 64
    dedupd, promtool, deploy_dir, path = sys.argv[1:]
    with open(path) as f:
        dashboard = json.load(f)
    queries = [(w, substitute(e), l) for w, e, l in dashboard_queries(dashboard)]
    if len(queries) < 20:
        fail("only %d queries in %s" % (len(queries), path))
    with open(os.path.join(deploy_dir, "recording_rules.yml")) as f:
        rules = set(re.findall(r"(?m)^\s*-\s*record:\s*(\S+)\s*$", f.read()))
    with Cleanup("dedup-grafana-") as c:
        promtool_parses(promtool, queries, c.dir)
        check_namespace_label(dashboard, queries)
        check_layout(dashboard)
        _grpc, port = start_dedupd(c, dedupd, ["--metrics_namespaces=billing",
                                               "--event_log=off"])
        pages = [scrape(port)] + start_group(c, dedupd)
    exported = exported_names(pages)
    log("%d series names exported, %d recording rules"
        % (len(exported), len(rules)))
    unknown = []
    for where, expr, _legend in queries:
        for name in sorted(metric_names(expr)):
            if name not in exported and name not in rules:
                unknown.append("%s: %s in %r" % (where, name, expr))
    if unknown:
        fail("names neither exported by dedupd nor recorded by "
             "deploy/prometheus:\n  " + "\n  ".join(unknown))
    log("every name in %d queries is exported or recorded" % len(queries))
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
