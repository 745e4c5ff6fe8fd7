// deploy/k8s, checked offline: the kustomize base (`kubectl kustomize
// deploy/k8s`) and the base with the Prometheus Operator component
// (deploy/k8s/monitoring) build; every object validates against the
// Kubernetes API schemas (kubernetes-models, generated from the OpenAPI spec)
// or, for ServiceMonitor and PrometheusRule, the Operator's CRD schemas
// (@kubernetes-models/prometheus-operator), with no field the API does not
// know; the group's invariants hold (3 members, one per node, gRPC probes,
// liveness on its own health service, leadership handed over before a stop,
// at most one member disrupted, Raft closed to everyone but the members);
// the ServiceMonitor scrapes the members as the alerts' job; the
// PrometheusRule carries deploy/prometheus' rules and its generator's output
// is up to date; and the start command turns pod dedup-N into node N+1 with
// the member Services as peers and the Raft groups of the ConfigMap
// dedup-shape (--groups unless 1). Each check also runs on broken copies, which
// it must reject.
//
// Env: DEDUP_K8S_DIR (default: ../../deploy/k8s from here), DEDUPD (optional:
// the real dedupd, which must accept the start command's flags). Without
// kubectl the files the kustomization lists are read instead (and the
// kustomize tests are skipped).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { parseAllDocuments } from 'yaml';

const here = dirname(fileURLToPath(import.meta.url));
const manifestDir = resolve(process.env.DEDUP_K8S_DIR ?? join(here, '..', '..', 'deploy', 'k8s'));
const monitoringDir = join(manifestDir, 'monitoring');
const prometheusDir = join(manifestDir, '..', 'prometheus');
const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;

const GROUP = { 'app.kubernetes.io/name': 'dedup', 'app.kubernetes.io/instance': 'dedup' };
const REPLICAS = 3;
const CLIENT_PORT = 50051;
const RAFT_PORT = 7001;
const METRICS_PORT = 9464;
// Plaintext grpc.health.v1 only (--health_address): kubelet's probes speak no TLS.
const HEALTH_PORT = 8081;
// The grpc.health.v1 service that answers liveness (server/liveness_watch.h).
const LIVENESS_SERVICE = 'dedup.v1.Liveness';

// --- loading ---------------------------------------------------------------

/** The YAML documents of `text` (from `source`), as plain objects. */
function parseDocuments(text, source) {
  const objects = [];
  for (const doc of parseAllDocuments(text)) {
    const problems = [...doc.errors, ...doc.warnings].map((e) => e.message);
    assert.deepEqual(problems, [], `${source}: YAML problems`);
    const object = doc.toJS();
    if (object !== null) objects.push(object);
  }
  return objects;
}

/** The resources a kustomization.yaml lists. */
function kustomizationResources(dir) {
  const [k] = parseDocuments(readFileSync(join(dir, 'kustomization.yaml'), 'utf8'), dir);
  return k.resources ?? [];
}

/**
 * The ConfigMaps a kustomization.yaml's configMapGenerator makes from
 * literals, named as written (kustomize adds a hash suffix and rewrites the
 * references to it).
 */
function generatedConfigMaps(dir) {
  const [k] = parseDocuments(readFileSync(join(dir, 'kustomization.yaml'), 'utf8'), dir);
  return (k.configMapGenerator ?? []).map((g) => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: g.name },
    data: Object.fromEntries((g.literals ?? []).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])),
  }));
}

/**
 * The objects of the kustomization in `dir` as `kubectl kustomize` builds
 * them, each as { file, object } (file: "kustomize <dir>"). Without kubectl:
 * the files it lists, as they are.
 */
function loadManifests(dir) {
  if (kubectl) {
    const out = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8' });
    return parseDocuments(out, `kubectl kustomize ${dir}`).map((object) => ({ file: `kustomize ${dir}`, object }));
  }
  const objects = [];
  for (const file of kustomizationResources(dir)) {
    for (const object of parseDocuments(readFileSync(join(dir, file), 'utf8'), file)) objects.push({ file, object });
  }
  for (const object of generatedConfigMaps(dir)) objects.push({ file: 'kustomization.yaml', object });
  assert.ok(objects.length > 0, `no objects in ${dir}`);
  return objects;
}

/** `kubectl kustomize` of an overlay: the base plus the monitoring component. */
function loadWithMonitoring() {
  const overlay = mkdtempSync(join(scratch, 'overlay-'));
  writeFileSync(
    join(overlay, 'kustomization.yaml'),
    `resources: [${relative(overlay, manifestDir)}]\ncomponents: [${relative(overlay, monitoringDir)}]\n`,
  );
  const out = execFileSync('kubectl', ['kustomize', overlay], { encoding: 'utf8' });
  return parseDocuments(out, 'base + monitoring');
}

const clone = (value) => structuredClone(value);

// --- schema validation -------------------------------------------------------

/**
 * The kubernetes-models class for apiVersion/kind, or undefined when the
 * package has none (an unknown kind or API version).
 */
async function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z0-9]+$/.test(kind)) {
    return undefined;
  }
  const packages = apiVersion.startsWith('monitoring.coreos.com/')
    ? ['@kubernetes-models/prometheus-operator']
    : ['kubernetes-models'];
  for (const pkg of packages) {
    try {
      const module = await import(`${pkg}/${apiVersion}/${kind}`);
      return module[kind];
    } catch {
      // not this package
    }
  }
  return undefined;
}

/**
 * Wraps `root` so that every property a validator reads is recorded; objects
 * whose keys it enumerates (maps such as labels) count as fully read. After
 * validation, unread() lists the paths of fields the schema does not know:
 * the generated validators read each property their schema defines, and no
 * other, so an unread key is one `kubectl apply` would refuse (strict field
 * validation) or silently drop.
 */
function readTracker(root) {
  const read = new Map(); // object -> Set of keys read, or 'all'
  const proxies = new WeakMap();
  const wrap = (value) => {
    if (value === null || typeof value !== 'object') return value;
    if (proxies.has(value)) return proxies.get(value);
    if (!read.has(value)) read.set(value, new Set());
    const proxy = new Proxy(value, {
      get(target, key, receiver) {
        const seen = read.get(target);
        if (seen !== 'all' && typeof key === 'string') seen.add(key);
        return wrap(Reflect.get(target, key, receiver));
      },
      has(target, key) {
        const seen = read.get(target);
        if (seen !== 'all' && typeof key === 'string') seen.add(key);
        return Reflect.has(target, key);
      },
      ownKeys(target) {
        read.set(target, 'all');
        return Reflect.ownKeys(target);
      },
    });
    proxies.set(value, proxy);
    return proxy;
  };
  const unread = () => {
    const paths = [];
    const walk = (value, path) => {
      if (value === null || typeof value !== 'object') return;
      const seen = read.get(value);
      for (const [key, child] of Object.entries(value)) {
        const childPath = Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`;
        if (!Array.isArray(value) && seen !== 'all' && !(seen?.has(key) ?? false)) {
          paths.push(childPath);
          continue;
        }
        walk(child, childPath);
      }
    };
    walk(root, '');
    return paths;
  };
  return { proxy: wrap(root), unread };
}

/** Schema problems of one object: [] when the API server would take it. */
async function schemaProblems(object) {
  const Model = await modelFor(object?.apiVersion, object?.kind);
  if (Model === undefined) return [`unknown kind ${object?.apiVersion}/${object?.kind}`];
  const problems = [];
  if (typeof object.metadata?.name !== 'string' || object.metadata.name === '') {
    problems.push('metadata.name is missing');
  }
  const tracker = readTracker(object);
  try {
    Model.prototype.validate.call(tracker.proxy);
  } catch (error) {
    problems.push(`schema: ${error.message}`);
  }
  for (const path of tracker.unread()) problems.push(`unknown field ${path}`);
  return problems;
}

// --- invariants ---------------------------------------------------------------

const matches = (selector, labels) =>
  selector !== undefined &&
  Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);

const sameLabels = (a, b) =>
  a !== undefined && b !== undefined && JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());

/** Values of `--name=value` flags in a shell script's text. */
function flagValue(script, name) {
  const found = script.match(new RegExp(`--${name}=("[^"]*"|\\S+)`));
  return found === null ? undefined : found[1].replace(/^"|"$/g, '');
}

/** Violations of the group's invariants in the objects of deploy/k8s. */
function invariantProblems(objects) {
  const problems = [];
  const of = (kind) => objects.filter((o) => o.kind === kind);
  const sets = of('StatefulSet');
  if (sets.length !== 1) return [`want exactly 1 StatefulSet, found ${sets.length}`];
  const set = sets[0];
  const spec = set.spec ?? {};
  const pod = spec.template?.spec ?? {};
  const podLabels = spec.template?.metadata?.labels ?? {};
  const name = set.metadata?.name;

  if (spec.replicas !== REPLICAS) problems.push(`StatefulSet replicas is ${spec.replicas}, want ${REPLICAS}`);
  if (!sameLabels(spec.selector?.matchLabels, GROUP)) problems.push('StatefulSet selector is not the group labels');
  if (!matches(GROUP, podLabels)) problems.push('pod template lacks the group labels');
  if (spec.podManagementPolicy !== 'Parallel') problems.push('podManagementPolicy is not Parallel');

  // One member per node.
  const antiAffinity = pod.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
  if (
    !antiAffinity.some(
      (term) => term.topologyKey === 'kubernetes.io/hostname' && matches(term.labelSelector?.matchLabels, podLabels),
    )
  ) {
    problems.push('no required pod anti-affinity on kubernetes.io/hostname selecting the group');
  }

  const containers = pod.containers ?? [];
  const dedupd = containers.find((c) => c.name === 'dedupd');
  if (dedupd === undefined) return [...problems, 'no container named dedupd'];
  const ports = Object.fromEntries((dedupd.ports ?? []).map((p) => [p.name, p.containerPort]));
  if (ports.grpc !== CLIENT_PORT) problems.push(`container port grpc is ${ports.grpc}, want ${CLIENT_PORT}`);
  if (ports.raft !== RAFT_PORT) problems.push(`container port raft is ${ports.raft}, want ${RAFT_PORT}`);
  if (ports.metrics !== METRICS_PORT) problems.push(`container port metrics is ${ports.metrics}, want ${METRICS_PORT}`);
  if (ports.health !== HEALTH_PORT) problems.push(`container port health is ${ports.health}, want ${HEALTH_PORT}`);

  // The start command serves what the ports and probes say.
  const script = (dedupd.command ?? []).join('\n');
  for (const [flag, want] of [
    ['address', `0.0.0.0:${CLIENT_PORT}`],
    ['metrics_address', `0.0.0.0:${METRICS_PORT}`],
    ['health_address', `0.0.0.0:${HEALTH_PORT}`],
    ['raft_address', `$POD_IP:${RAFT_PORT}`],
  ]) {
    if (flagValue(script, flag) !== want) problems.push(`start command --${flag} is not ${want}`);
  }
  // The cluster's shape comes from a ConfigMap an overlay can change: the
  // number of groups, a positive integer.
  const groupsEnv = (dedupd.env ?? []).find((e) => e.name === 'DEDUP_GROUPS');
  const groupsRef = groupsEnv?.valueFrom?.configMapKeyRef;
  const shapeMap = of('ConfigMap').find((c) => c.metadata?.name === groupsRef?.name);
  if (groupsRef === undefined || groupsRef.key !== 'groups') {
    problems.push('DEDUP_GROUPS does not come from a ConfigMap key groups');
  } else if (shapeMap === undefined) {
    problems.push(`DEDUP_GROUPS names ConfigMap ${groupsRef.name}, which is not here`);
  } else if (!/^[1-9][0-9]*$/.test(shapeMap.data?.groups ?? '')) {
    problems.push(`ConfigMap ${groupsRef.name} groups is '${shapeMap.data?.groups}', not a positive integer`);
  }
  if (!/\$\{shape:\+"\$shape"\}/.test(script)) problems.push('the start command does not pass --groups ($shape)');
  const dataDir = flagValue(script, 'data_dir') ?? '';
  const claims = (spec.volumeClaimTemplates ?? []).map((c) => c.metadata?.name);
  const dataMount = (dedupd.volumeMounts ?? []).find((m) => claims.includes(m.name));
  if (claims.length !== 1) problems.push(`want 1 volumeClaimTemplate, found ${claims.length}`);
  if (dataMount === undefined || !dataDir.startsWith(`${dataMount.mountPath}/`)) {
    problems.push(`--data_dir=${dataDir} is not on the volume claimed per pod`);
  }

  // Probes: Kubernetes' own gRPC probe on the plaintext health port (the
  // client port may speak TLS, which kubelet's probe cannot).
  for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
    const p = dedupd[probe];
    if (p === undefined) {
      if (probe !== 'startupProbe') problems.push(`${probe} is missing`);
      continue;
    }
    const handlers = ['grpc', 'httpGet', 'tcpSocket', 'exec'].filter((h) => p[h] !== undefined);
    if (handlers.join() !== 'grpc' || p.grpc.port !== HEALTH_PORT) {
      problems.push(`${probe} is not a grpc probe on port ${HEALTH_PORT}`);
      continue;
    }
    // Readiness is "" (NOT_SERVING on a full disk: no traffic); liveness
    // and startup ask the liveness service, which only a wedged process
    // fails, or a disk-full pod would be restarted in a loop.
    const want = probe === 'readinessProbe' ? '' : LIVENESS_SERVICE;
    if ((p.grpc.service ?? '') !== want) {
      problems.push(`${probe} asks service '${p.grpc.service ?? ''}', want '${want}'`);
    }
  }

  // Leadership handed over before the stop, with time for it and the drain.
  const preStop = (dedupd.lifecycle?.preStop?.exec?.command ?? []).join(' ');
  if (!/\bdedupctl --address=127\.0\.0\.1:50051 .*--follow_leader=false .*\bcluster transfer\b/.test(preStop)) {
    problems.push('preStop does not run dedupctl --address=127.0.0.1:50051 --follow_leader=false ... cluster transfer (a follower must not move a healthy leader)');
  }
  const preStopMs = Number(flagValue(preStop, 'deadline_ms') ?? 5000);
  const drainMs = Number(flagValue(script, 'shutdown_grace_ms') ?? 10000);
  // preStop, then SIGTERM: transfer (up to 3 s), drain, and 5 s to close.
  const needS = Math.ceil((preStopMs + 3000 + drainMs + 5000) / 1000);
  if (!(pod.terminationGracePeriodSeconds >= needS)) {
    problems.push(`terminationGracePeriodSeconds is ${pod.terminationGracePeriodSeconds}, want >= ${needS}`);
  }

  // Services.
  const services = Object.fromEntries(of('Service').map((s) => [s.metadata?.name, s]));
  const peers = services[spec.serviceName];
  if (peers === undefined) {
    problems.push(`serviceName ${spec.serviceName} is not a Service here`);
  } else {
    if (peers.spec?.clusterIP !== 'None') problems.push(`${spec.serviceName} is not headless`);
    if (peers.spec?.publishNotReadyAddresses !== true) problems.push(`${spec.serviceName} does not publish not-ready addresses`);
    if (!matches(peers.spec?.selector, podLabels)) problems.push(`${spec.serviceName} does not select the group`);
  }
  for (let i = 0; i < REPLICAS; i++) {
    const member = services[`${name}-${i}`];
    if (member === undefined) {
      problems.push(`member Service ${name}-${i} is missing`);
      continue;
    }
    const s = member.spec ?? {};
    if (s.clusterIP === 'None') problems.push(`member Service ${name}-${i} is headless (Raft needs a stable IP)`);
    if (s.publishNotReadyAddresses !== true) problems.push(`member Service ${name}-${i} does not publish not-ready addresses`);
    if (s.ipFamilies?.join() !== 'IPv4') problems.push(`member Service ${name}-${i} is not IPv4 only`);
    if (!matches(s.selector, { ...podLabels, 'statefulset.kubernetes.io/pod-name': `${name}-${i}` }) ||
        s.selector['statefulset.kubernetes.io/pod-name'] !== `${name}-${i}`) {
      problems.push(`member Service ${name}-${i} does not select pod ${name}-${i} only`);
    }
    const servicePorts = Object.fromEntries((s.ports ?? []).map((p) => [p.port, p.targetPort]));
    if (servicePorts[RAFT_PORT] !== 'raft' || servicePorts[CLIENT_PORT] !== 'grpc') {
      problems.push(`member Service ${name}-${i} does not forward ${RAFT_PORT}->raft and ${CLIENT_PORT}->grpc`);
    }
  }
  const clientServices = Object.values(services).filter(
    (s) => s.spec?.clusterIP !== 'None' && sameLabels(s.spec?.selector, GROUP),
  );
  if (!clientServices.some((s) => (s.spec?.ports ?? []).some((p) => p.port === CLIENT_PORT && p.targetPort === 'grpc'))) {
    problems.push('no client Service selecting every member on the grpc port');
  }

  // At most one member disrupted at a time.
  const budgets = of('PodDisruptionBudget').filter((b) => matches(b.spec?.selector?.matchLabels, podLabels));
  if (budgets.length !== 1) {
    problems.push(`want 1 PodDisruptionBudget selecting the group, found ${budgets.length}`);
  } else if (budgets[0].spec.maxUnavailable !== 1 || budgets[0].spec.minAvailable !== undefined) {
    problems.push(`PodDisruptionBudget maxUnavailable is ${budgets[0].spec.maxUnavailable}, want 1 (and no minAvailable)`);
  }

  problems.push(...networkPolicyProblems(of('NetworkPolicy'), podLabels));
  return problems;
}

/**
 * The policies selecting the members must admit the Raft port from the
 * members only, and the client port from namespaces labelled dedup-client.
 */
function networkPolicyProblems(policies, podLabels) {
  const problems = [];
  const ours = policies.filter((p) => matches(p.spec?.podSelector?.matchLabels, podLabels));
  if (ours.length === 0) return ['no NetworkPolicy selects the group'];
  const rules = [];
  for (const policy of ours) {
    const types = policy.spec.policyTypes ?? ['Ingress'];
    if (!types.includes('Ingress')) problems.push(`NetworkPolicy ${policy.metadata.name} does not restrict ingress`);
    rules.push(...(policy.spec.ingress ?? []));
  }
  const admits = (rule, port) => (rule.ports ?? []).length === 0 || rule.ports.some((p) => p.port === port || p.port === undefined);
  const fromMembersOnly = (peer) =>
    peer.podSelector !== undefined &&
    peer.namespaceSelector === undefined &&
    peer.ipBlock === undefined &&
    matches(peer.podSelector.matchLabels, podLabels) &&
    (peer.podSelector.matchExpressions ?? []).length === 0;
  for (const rule of rules) {
    if (!admits(rule, RAFT_PORT)) continue;
    const from = rule.from ?? [];
    if (from.length === 0 || !from.every(fromMembersOnly)) {
      problems.push(`an ingress rule admits the Raft port ${RAFT_PORT} from outside the group`);
    }
  }
  if (!rules.some((r) => admits(r, RAFT_PORT) && (r.from ?? []).some(fromMembersOnly))) {
    problems.push(`no ingress rule admits the Raft port ${RAFT_PORT} from the members`);
  }
  const fromClients = (peer) => peer.namespaceSelector?.matchLabels?.['dedup-client'] === 'true' && peer.ipBlock === undefined;
  if (!rules.some((r) => admits(r, CLIENT_PORT) && (r.from ?? []).some(fromClients))) {
    problems.push(`no ingress rule admits the client port ${CLIENT_PORT} from namespaces labelled dedup-client: "true"`);
  }
  if (!rules.some((r) => admits(r, CLIENT_PORT) && (r.from ?? []).some(fromMembersOnly))) {
    problems.push(`no ingress rule admits the client port ${CLIENT_PORT} from the members (snapshot transfers)`);
  }
  return problems;
}

// --- the start command ----------------------------------------------------------

const scratch = mkdtempSync(join(tmpdir(), 'dedup-k8s-test-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * Runs the dedupd container's command with /bin/sh, `getent` answering for
 * every name and `dedupd` replaced by a stub that prints its arguments, one
 * a line. Returns { status, stderr, args }.
 */
function runStartCommand(command, env) {
  const bin = mkdtempSync(join(scratch, 'bin-'));
  writeFileSync(join(bin, 'getent'), '#!/bin/sh\necho "10.96.0.10 STREAM $2"\n');
  writeFileSync(join(bin, 'dedupd'), '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n');
  chmodSync(join(bin, 'getent'), 0o755);
  chmodSync(join(bin, 'dedupd'), 0o755);
  const [shell, ...args] = command;
  const run = spawnSync(shell, args, {
    env: { PATH: `${bin}:/usr/bin:/bin`, ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: run.status, stderr: run.stderr, args: run.stdout.split('\n').filter((l) => l !== '') };
}

function containerEnv(dedupd, podName) {
  const env = { POD_NAME: podName, POD_NAMESPACE: 'k8s-manifest-test', POD_IP: '10.244.1.7' };
  for (const e of dedupd.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    // A ConfigMap key, as the kubelet resolves it (an optional one may be absent).
    const ref = e.valueFrom?.configMapKeyRef;
    const map = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === ref?.name);
    if (map?.data?.[ref.key] !== undefined) env[e.name] = map.data[ref.key];
  }
  return env;
}

// --- the tests ------------------------------------------------------------------

const loaded = loadManifests(manifestDir);
const objects = loaded.map((l) => l.object);
const statefulSet = () => clone(objects.find((o) => o.kind === 'StatefulSet'));
const dedupdContainer = (set) => set.spec.template.spec.containers.find((c) => c.name === 'dedupd');

describe(`deploy/k8s (${manifestDir})`, () => {
  test('every object validates against the Kubernetes API schema, with no unknown field', async () => {
    assert.ok(objects.length >= 4);
    for (const { file, object } of loaded) {
      assert.deepEqual(await schemaProblems(object), [], `${file}: ${object.kind}/${object.metadata?.name}`);
    }
  });

  test('the group invariants hold', () => {
    assert.deepEqual(invariantProblems(objects), []);
  });

  test('the start command makes pod dedup-N node N+1 with the member Services as peers', () => {
    const set = statefulSet();
    const dedupd = dedupdContainer(set);
    for (let ordinal = 0; ordinal < REPLICAS; ordinal++) {
      const run = runStartCommand(dedupd.command, containerEnv(dedupd, `${set.metadata.name}-${ordinal}`));
      assert.equal(run.status, 0, run.stderr);
      const members = [0, 1, 2].map((i) => `${set.metadata.name}-${i}.k8s-manifest-test.svc.cluster.local`);
      assert.deepEqual(run.args, [
        `--node_id=${ordinal + 1}`,
        `--peers=${members.map((m, i) => `${i + 1}=${m}:${RAFT_PORT}=${m}:${CLIENT_PORT}`).join(',')}`,
        '--groups=3',
        `--raft_address=10.244.1.7:${RAFT_PORT}`,
        `--address=0.0.0.0:${CLIENT_PORT}`,
        `--metrics_address=0.0.0.0:${METRICS_PORT}`,
        `--health_address=0.0.0.0:${HEALTH_PORT}`,
        '--data_dir=/var/lib/dedup/data',
        '--shutdown_grace_ms=10000',
        '--lame_duck_ms=5000',
        '--peer_tls_cert_file=/etc/dedup/peer-tls/tls.crt',
        '--peer_tls_key_file=/etc/dedup/peer-tls/tls.key',
        '--peer_tls_ca_file=/etc/dedup/peer-tls/ca.crt',
        '--insecure',
      ]);
    }
  });

  test('DEDUP_RECOVER_FROM_NODE recovers that node and makes the others join', () => {
    const set = statefulSet();
    const dedupd = dedupdContainer(set);
    const flagsOf = (ordinal) => {
      const env = { ...containerEnv(dedupd, `${set.metadata.name}-${ordinal}`), DEDUP_RECOVER_FROM_NODE: '2' };
      const run = runStartCommand(dedupd.command, env);
      assert.equal(run.status, 0, run.stderr);
      return run.args;
    };
    assert.equal(flagsOf(1).at(-1), '--recover_as_sole_voter');
    assert.equal(flagsOf(0).at(-1), '--join');
    assert.equal(flagsOf(2).at(-1), '--join');
    assert.ok(!flagsOf(0).includes('--recover_as_sole_voter'));
  });

  test('members talk mTLS with the files of a mounted Secret', () => {
    const set = statefulSet();
    const dedupd = dedupdContainer(set);
    const { args } = runStartCommand(dedupd.command, containerEnv(dedupd, `${set.metadata.name}-0`));
    const peerFiles = args.filter((a) => /^--peer_tls_(cert|key|ca)_file=/.test(a)).map((a) => a.split('=')[1]);
    assert.equal(peerFiles.length, 3, args.join(' '));
    const secretVolumes = new Set((set.spec.template.spec.volumes ?? []).filter((v) => v.secret).map((v) => v.name));
    for (const file of peerFiles) {
      const mount = (dedupd.volumeMounts ?? []).find((m) => file.startsWith(`${m.mountPath}/`));
      assert.ok(mount && secretVolumes.has(mount.name), `${file} is not on a mounted Secret`);
      assert.equal(mount.readOnly, true, `${mount.name} is writable`);
    }
  });

  test('the start command passes the shape: --groups unless 1, --replication_factor when set', () => {
    const dedupd = dedupdContainer(statefulSet());
    const flagsWith = (shape) => {
      const run = runStartCommand(dedupd.command, { ...containerEnv(dedupd, 'dedup-0'), ...shape });
      assert.equal(run.status, 0, run.stderr);
      return run.args.filter((a) => /^--(groups|replication_factor)=/.test(a));
    };
    assert.deepEqual(flagsWith({}), ['--groups=3']);
    assert.deepEqual(flagsWith({ DEDUP_GROUPS: '12', DEDUP_REPLICATION_FACTOR: '5' }), ['--groups=12', '--replication_factor=5']);
    assert.deepEqual(flagsWith({ DEDUP_GROUPS: '1' }), []);
    for (const bad of ['0', '3x', '-2', '07']) {
      const run = runStartCommand(dedupd.command, { ...containerEnv(dedupd, 'dedup-0'), DEDUP_GROUPS: bad });
      assert.equal(run.status, 2, `DEDUP_GROUPS=${bad}: ${run.stderr}`);
      assert.match(run.stderr, /is not a positive integer/);
      assert.deepEqual(run.args, []);
    }
  });

  test('the start command refuses a pod name without an ordinal', () => {
    const dedupd = dedupdContainer(statefulSet());
    const run = runStartCommand(dedupd.command, containerEnv(dedupd, 'dedup-x'));
    assert.equal(run.status, 2);
    assert.match(run.stderr, /no ordinal in pod name 'dedup-x'/);
    assert.deepEqual(run.args, []);
  });

  test('the real dedupd accepts the start command flags', { skip: process.env.DEDUPD ? false : 'DEDUPD not set' }, () => {
    const dedupd = dedupdContainer(statefulSet());
    const env = containerEnv(dedupd, 'dedup-1');
    // A dedupd from before sharding has no --groups: check the rest of the
    // flags with one group (the start command then passes none).
    const help = spawnSync(process.env.DEDUPD, ['--help'], { encoding: 'utf8', timeout: 30_000 });
    if (!`${help.stdout}${help.stderr}`.includes('--groups ')) {
      console.log(`# ${process.env.DEDUPD} has no --groups: checked with DEDUP_GROUPS=1`);
      env.DEDUP_GROUPS = '1';
      delete env.DEDUP_REPLICATION_FACTOR;
    }
    const { args } = runStartCommand(dedupd.command, env);
    // Outside Kubernetes the member names do not resolve: dedupd must get
    // that far (every flag known and valid before it) and stop with exit 2.
    const run = spawnSync(process.env.DEDUPD, args, { encoding: 'utf8', timeout: 30_000 });
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /--peers: cannot resolve 'dedup-0\.k8s-manifest-test\.svc\.cluster\.local'/);
  });
});

describe('the checks reject broken manifests', () => {
  const broken = (mutate) => {
    const copy = clone(objects);
    mutate(copy);
    return copy;
  };
  const find = (list, kind, name) => list.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  const container = (list) => dedupdContainer(find(list, 'StatefulSet'));

  const invariantCases = [
    ['2 replicas', (l) => { find(l, 'StatefulSet').spec.replicas = 2; }, /replicas is 2/],
    ['no anti-affinity', (l) => { delete find(l, 'StatefulSet').spec.template.spec.affinity; }, /anti-affinity/],
    ['preferred anti-affinity only', (l) => {
      const a = find(l, 'StatefulSet').spec.template.spec.affinity.podAntiAffinity;
      a.preferredDuringSchedulingIgnoredDuringExecution = [{ weight: 1, podAffinityTerm: a.requiredDuringSchedulingIgnoredDuringExecution[0] }];
      delete a.requiredDuringSchedulingIgnoredDuringExecution;
    }, /anti-affinity/],
    ['tcp readiness probe', (l) => { container(l).readinessProbe = { tcpSocket: { port: CLIENT_PORT } }; }, /readinessProbe is not a grpc probe/],
    ['liveness probe on the metrics port', (l) => { container(l).livenessProbe.grpc.port = METRICS_PORT; }, /livenessProbe is not a grpc probe/],
    ['readiness probe on the client port (TLS there breaks it)', (l) => { container(l).readinessProbe.grpc.port = CLIENT_PORT; }, /readinessProbe is not a grpc probe/],
    ['no liveness probe', (l) => { delete container(l).livenessProbe; }, /livenessProbe is missing/],
    ['liveness on the readiness status', (l) => { delete container(l).livenessProbe.grpc.service; }, /livenessProbe asks service '', want 'dedup.v1.Liveness'/],
    ['startup on the readiness status', (l) => { delete container(l).startupProbe.grpc.service; }, /startupProbe asks service ''/],
    ['readiness on liveness', (l) => { container(l).readinessProbe.grpc.service = LIVENESS_SERVICE; }, /readinessProbe asks service 'dedup.v1.Liveness', want ''/],
    ['no preStop', (l) => { delete container(l).lifecycle; }, /preStop/],
    ['short grace period', (l) => { find(l, 'StatefulSet').spec.template.spec.terminationGracePeriodSeconds = 10; }, /terminationGracePeriodSeconds is 10/],
    ['peers Service not publishing not-ready pods', (l) => { find(l, 'Service', 'dedup-peers').spec.publishNotReadyAddresses = false; }, /dedup-peers does not publish/],
    ['peers Service with a cluster IP', (l) => { delete find(l, 'Service', 'dedup-peers').spec.clusterIP; }, /dedup-peers is not headless/],
    ['a member Service missing', (l) => { l.splice(l.indexOf(find(l, 'Service', 'dedup-2')), 1); }, /member Service dedup-2 is missing/],
    ['a member Service selecting another pod', (l) => {
      find(l, 'Service', 'dedup-1').spec.selector['statefulset.kubernetes.io/pod-name'] = 'dedup-0';
    }, /dedup-1 does not select pod dedup-1/],
    ['PDB maxUnavailable 2', (l) => { find(l, 'PodDisruptionBudget').spec.maxUnavailable = 2; }, /maxUnavailable is 2/],
    ['PDB minAvailable instead', (l) => {
      const b = find(l, 'PodDisruptionBudget').spec; delete b.maxUnavailable; b.minAvailable = 1;
    }, /maxUnavailable is undefined/],
    ['Raft port open to client namespaces', (l) => {
      find(l, 'NetworkPolicy').spec.ingress[1].ports.push({ protocol: 'TCP', port: RAFT_PORT });
    }, /admits the Raft port 7001 from outside/],
    ['a rule with no ports (all ports) from client namespaces', (l) => {
      delete find(l, 'NetworkPolicy').spec.ingress[1].ports;
    }, /admits the Raft port 7001 from outside/],
    ['Raft port open to every namespace\'s members', (l) => {
      find(l, 'NetworkPolicy').spec.ingress[0].from[0].namespaceSelector = {};
    }, /admits the Raft port 7001 from outside/],
    ['no NetworkPolicy', (l) => { l.splice(l.indexOf(find(l, 'NetworkPolicy')), 1); }, /no NetworkPolicy selects the group/],
    ['client port closed to client namespaces', (l) => { find(l, 'NetworkPolicy').spec.ingress.splice(1, 1); }, /dedup-client/],
    ['groups as a literal value, not from the ConfigMap', (l) => {
      const e = container(l).env.find((v) => v.name === 'DEDUP_GROUPS');
      delete e.valueFrom;
      e.value = '3';
    }, /DEDUP_GROUPS does not come from a ConfigMap/],
    ['the shape ConfigMap missing', (l) => { l.splice(l.indexOf(find(l, 'ConfigMap')), 1); }, /DEDUP_GROUPS names ConfigMap dedup-shape.*, which is not here/],
    ['zero groups', (l) => { find(l, 'ConfigMap').data.groups = '0'; }, /groups is '0', not a positive integer/],
    ['the start command without --groups', (l) => {
      const c = container(l);
      c.command[2] = c.command[2].replace('${shape:+"$shape"}', '');
    }, /does not pass --groups/],
    ['data dir off the volume', (l) => {
      const c = container(l);
      c.command[2] = c.command[2].replace('--data_dir=/var/lib/dedup/data', '--data_dir=/data');
    }, /--data_dir=\/data is not on the volume/],
  ];
  for (const [name, mutate, want] of invariantCases) {
    test(`invariants: ${name}`, () => {
      const problems = invariantProblems(broken(mutate));
      assert.ok(problems.some((p) => want.test(p)), `want ${want} in ${JSON.stringify(problems)}`);
    });
  }

  const schemaCases = [
    ['a misspelt field', (s) => { s.spec.template.spec.containers[0].readinessProbe.periodSecond = 5; }, /unknown field \.spec\.template\.spec\.containers\[0\]\.readinessProbe\.periodSecond/],
    ['a field at the wrong level', (s) => { s.spec.terminationGracePeriodSeconds = 45; }, /unknown field \.spec\.terminationGracePeriodSeconds/],
    ['a string for an integer', (s) => { s.spec.replicas = '3'; }, /schema: .*replicas/],
    ['a probe port out of range type', (s) => { s.spec.template.spec.containers[0].livenessProbe.grpc.port = 'grpc'; }, /schema: .*grpc\/port/],
    ['a bad enum', (s) => { s.spec.podManagementPolicy = 'AllAtOnce'; }, /schema: .*podManagementPolicy/],
    ['a missing required field', (s) => { delete s.spec.selector; }, /schema: .*selector/],
    ['an unknown kind', (s) => { s.kind = 'StatefulSets'; }, /unknown kind apps\/v1\/StatefulSets/],
  ];
  for (const [name, mutate, want] of schemaCases) {
    test(`schema: ${name}`, async () => {
      const set = statefulSet();
      mutate(set);
      const problems = await schemaProblems(set);
      assert.ok(problems.some((p) => want.test(p)), `want ${want} in ${JSON.stringify(problems)}`);
    });
  }

  test('schema: a labels map keeps any key (not an unknown field)', async () => {
    const set = statefulSet();
    set.metadata.labels['example.com/anything'] = 'x';
    assert.deepEqual(await schemaProblems(set), []);
  });
});

// --- kustomize, the image, and the Prometheus Operator component -------------

/** The project version from CMakeLists.txt's project() line. */
function projectVersion() {
  const cmake = readFileSync(join(manifestDir, '..', '..', 'CMakeLists.txt'), 'utf8');
  const found = cmake.match(/project\(dedup VERSION (\d+\.\d+\.\d+)/);
  assert.ok(found, 'no project(dedup VERSION x.y.z) in CMakeLists.txt');
  return found[1];
}

/** The rule groups of deploy/prometheus' rule files, in generator order. */
function ruleFileGroups() {
  return ['recording_rules.yml', 'alert_rules.yml'].flatMap(
    (f) => parseDocuments(readFileSync(join(prometheusDir, f), 'utf8'), f)[0].groups,
  );
}

/** Problems of the ServiceMonitor and PrometheusRule among `objects`. */
function monitoringProblems(objects) {
  const problems = [];
  const of = (kind) => objects.filter((o) => o.kind === kind);
  const monitors = of('ServiceMonitor');
  if (monitors.length !== 1) return [`want 1 ServiceMonitor, found ${monitors.length}`];
  const monitor = monitors[0].spec ?? {};
  const selected = of('Service').filter(
    (s) => matches(monitor.selector?.matchLabels, s.metadata?.labels) && (monitor.selector?.matchExpressions ?? []).length === 0,
  );
  const endpoints = monitor.endpoints ?? [];
  if (endpoints.length !== 1) problems.push(`want 1 ServiceMonitor endpoint, found ${endpoints.length}`);
  // Each selected Service with the endpoint's port is scraped: exactly one,
  // the headless one listing not-ready members too.
  const scraped = selected.filter((s) => (s.spec?.ports ?? []).some((p) => p.name === endpoints[0]?.port));
  if (scraped.length !== 1) {
    problems.push(`ServiceMonitor scrapes ${scraped.length} Services (${scraped.map((s) => s.metadata.name)}), want 1`);
  } else {
    const service = scraped[0];
    const port = service.spec.ports.find((p) => p.name === endpoints[0].port);
    if (port.port !== METRICS_PORT) problems.push(`ServiceMonitor port ${port.name} is ${port.port}, want ${METRICS_PORT}`);
    if (service.spec.publishNotReadyAddresses !== true) problems.push(`ServiceMonitor scrapes ${service.metadata.name}, which hides not-ready members`);
    // The alerts select job="dedup": the job is the jobLabel's value.
    const job = service.metadata.labels?.[monitor.jobLabel];
    if (job !== 'dedup') problems.push(`ServiceMonitor job is '${job}' (jobLabel ${monitor.jobLabel}), want 'dedup'`);
  }
  if ((endpoints[0]?.path ?? '/metrics') !== '/metrics') problems.push(`ServiceMonitor path is ${endpoints[0].path}`);

  const rules = of('PrometheusRule');
  if (rules.length !== 1) return [...problems, `want 1 PrometheusRule, found ${rules.length}`];
  if (!isDeepStrictEqual(rules[0].spec?.groups, ruleFileGroups())) {
    problems.push('PrometheusRule groups differ from deploy/prometheus/{recording,alert}_rules.yml');
  }
  return problems;
}

describe('kustomize and the Prometheus Operator component', () => {
  test('the base lists every manifest in deploy/k8s', () => {
    const files = readdirSync(manifestDir).filter((f) => /\.ya?ml$/.test(f) && f !== 'kustomization.yaml').sort();
    assert.deepEqual([...kustomizationResources(manifestDir)].sort(), files);
  });

  test('the image is the Dockerfile\'s, tagged with the project version', { skip: !kubectl && 'no kubectl' }, () => {
    const dedupd = dedupdContainer(statefulSet());
    assert.equal(dedupd.image, `dedup/dedupd:${projectVersion()}`);
  });

  test('the component\'s objects validate against the Operator\'s CRD schemas', { skip: !kubectl && 'no kubectl' }, async () => {
    const all = loadWithMonitoring();
    const extra = all.filter((o) => o.apiVersion.startsWith('monitoring.coreos.com/'));
    assert.deepEqual(extra.map((o) => `${o.kind}/${o.metadata.name}`).sort(), ['PrometheusRule/dedup', 'ServiceMonitor/dedup']);
    // The base's objects come out unchanged.
    assert.deepEqual(all.filter((o) => !extra.includes(o)), objects);
    for (const object of extra) {
      assert.deepEqual(await schemaProblems(object), [], `${object.kind}/${object.metadata.name}`);
    }
  });

  test('the ServiceMonitor scrapes the members as job dedup; the PrometheusRule has the rule files\' groups', { skip: !kubectl && 'no kubectl' }, () => {
    assert.deepEqual(monitoringProblems(loadWithMonitoring()), []);
  });

  test('prometheusrule.yaml is what generate-prometheusrule makes of the rule files now', () => {
    const run = spawnSync('python3', [join(monitoringDir, 'generate-prometheusrule'), '--check'], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    // And parsed, outside kustomize too.
    const [rule] = parseDocuments(readFileSync(join(monitoringDir, 'prometheusrule.yaml'), 'utf8'), 'prometheusrule.yaml');
    assert.deepEqual(rule.spec.groups, ruleFileGroups());
  });

  const brokenMonitoring = [
    ['a selector matching the client Service, which has a metrics port too', (l) => {
      delete l.find((o) => o.kind === 'ServiceMonitor').spec.selector.matchLabels['app.kubernetes.io/component'];
      l.find((o) => o.kind === 'Service' && o.metadata.name === 'dedup').spec.ports.push({ name: 'metrics', port: METRICS_PORT, targetPort: 'metrics' });
    }, /scrapes 2 Services \(dedup,dedup-peers\)/],
    ['the scraped Service hiding not-ready members', (l) => {
      l.find((o) => o.kind === 'Service' && o.metadata.name === 'dedup-peers').spec.publishNotReadyAddresses = false;
    }, /hides not-ready members/],
    ['a port name no Service has', (l) => { l.find((o) => o.kind === 'ServiceMonitor').spec.endpoints[0].port = 'http'; }, /scrapes 0 Services/],
    ['the Service\'s name as the job', (l) => { delete l.find((o) => o.kind === 'ServiceMonitor').spec.jobLabel; }, /job is 'undefined'/],
    ['a rule dropped', (l) => { l.find((o) => o.kind === 'PrometheusRule').spec.groups[0].rules.pop(); }, /PrometheusRule groups differ/],
  ];
  for (const [name, mutate, want] of brokenMonitoring) {
    test(`monitoring rejects: ${name}`, { skip: !kubectl && 'no kubectl' }, () => {
      const copy = loadWithMonitoring();
      mutate(copy);
      const problems = monitoringProblems(copy);
      assert.ok(problems.some((p) => want.test(p)), `want ${want} in ${JSON.stringify(problems)}`);
    });
  }

  test('schema: a ServiceMonitor with a field the CRD does not know, or a number for a port name', { skip: !kubectl && 'no kubectl' }, async () => {
    const monitor = loadWithMonitoring().find((o) => o.kind === 'ServiceMonitor');
    const misspelt = clone(monitor);
    misspelt.spec.endpoints[0].intervall = '15s';
    assert.ok((await schemaProblems(misspelt)).some((p) => /unknown field \.spec\.endpoints\[0\]\.intervall/.test(p)));
    const numeric = clone(monitor);
    numeric.spec.endpoints[0].port = METRICS_PORT;
    assert.ok((await schemaProblems(numeric)).some((p) => /schema: .*port/.test(p)), JSON.stringify(await schemaProblems(numeric)));
    const rule = loadWithMonitoring().find((o) => o.kind === 'PrometheusRule');
    delete rule.spec.groups[0].name;
    assert.ok((await schemaProblems(rule)).some((p) => /schema: .*name/.test(p)), JSON.stringify(await schemaProblems(rule)));
  });
});

// Guard against a silently empty run (e.g. the glob matching nothing).
test('deploy/k8s holds the expected objects', () => {
  // (kustomize names a generated ConfigMap with a hash of its data)
  const kinds = objects.map((o) => `${o.kind}/${o.kind === 'ConfigMap' ? o.metadata.name.replace(/-[a-z0-9]{10}$/, '') : o.metadata.name}`).sort();
  assert.deepEqual(kinds, [
    'ConfigMap/dedup-shape',
    'NetworkPolicy/dedup',
    'PodDisruptionBudget/dedup',
    'Service/dedup',
    'Service/dedup-0',
    'Service/dedup-1',
    'Service/dedup-2',
    'Service/dedup-peers',
    'StatefulSet/dedup',
  ]);
  execFileSync('/bin/sh', ['-n', '-c', dedupdContainer(statefulSet()).command[2]]);
});
