// How a client reaches dedupd securely: TLS (the server verified against a
// CA), optionally a client certificate (mTLS), and a bearer token sent on
// every call as gRPC metadata `authorization: Bearer <token>`.
//
// The token is added by a client interceptor, not by call credentials:
// grpc-js refuses call credentials composed with insecure channel
// credentials, and a token over plaintext on loopback is what local
// development against a tenants file needs. Over a network use TLS: a token
// sent in plaintext can be read on the way, so a client refuses to send one
// to a non-loopback address without TLS unless `allowInsecureToken` (as
// dedupd itself needs --insecure to serve plaintext off loopback).
//
// The token never appears in an error message, a log line or an inspected
// object of this package.
import { readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { inspect } from 'node:util';

import {
  type ChannelCredentials,
  Client as GrpcClient,
  type ClientOptions,
  credentials as grpcCredentials,
  InterceptingCall,
  type Interceptor,
} from '@grpc/grpc-js';

/**
 * A PEM file's path (a string without "-----BEGIN"), or the PEM itself (a
 * Buffer/Uint8Array, or a string holding "-----BEGIN").
 */
export type PemSource = string | Uint8Array;

export interface TlsOptions {
  /** The CA(s) the server's certificate must chain to. Absent: the system's (Node's) roots. */
  readonly rootCa?: PemSource;
  /** Client certificate chain (mTLS), with clientKey. */
  readonly clientCert?: PemSource;
  /** The key of clientCert. */
  readonly clientKey?: PemSource;
  /**
   * The name checked against the server's certificate instead of the
   * address's host (calling a node by IP, a leader named by its address).
   */
  readonly serverName?: string;
}

export interface SecurityOptions {
  /**
   * TLS settings, or true for TLS with the system's roots. Files are read
   * when the client is made (a missing one throws then). Default: plaintext.
   */
  readonly tls?: boolean | TlsOptions;
  /** Bearer token sent on every call (`authorization: Bearer <token>`). */
  readonly token?: string;
  /** A file holding the token, read again whenever it changes (rotation); surrounding whitespace is ignored. */
  readonly tokenFile?: string;
  /**
   * Send the token without TLS to an address that is not loopback (it can
   * be read on the way). Default false: such a client throws instead.
   */
  readonly allowInsecureToken?: boolean;
}

export const AUTHORIZATION_METADATA_KEY = 'authorization';
const PEM_MARK = '-----BEGIN';
// Printable ASCII without spaces: what travels as an HTTP/2 header value
// after "Bearer " (dedupd strips surrounding whitespace and compares the rest).
const TOKEN = /^[\x21-\x7e]+$/;

/** The PEM bytes of `source`, or null without one. Throws TypeError naming `what` (and the file). */
export function readPem(source: PemSource | undefined, what: string): Buffer | null {
  if (source === undefined) return null;
  let data: Buffer;
  let origin: string;
  if (typeof source !== 'string') {
    data = Buffer.from(source);
    origin = 'the bytes given';
  } else if (source.includes(PEM_MARK)) {
    data = Buffer.from(source, 'utf8');
    origin = 'the text given';
  } else {
    try {
      data = readFileSync(source);
    } catch (error) {
      throw new TypeError(`${what}: cannot read ${JSON.stringify(source)}: ${errorCode(error)}`);
    }
    origin = JSON.stringify(source);
  }
  if (!data.includes(PEM_MARK)) throw new TypeError(`${what}: ${origin} holds no PEM block`);
  return data;
}

/** The channel credentials and options of `tls` (files read now). */
export function tlsChannel(tls: true | TlsOptions): { credentials: ChannelCredentials; options: ClientOptions } {
  const o: TlsOptions = tls === true ? {} : tls;
  if ((o.clientCert === undefined) !== (o.clientKey === undefined)) {
    throw new TypeError('tls: give clientCert and clientKey together (mTLS)');
  }
  if (o.serverName !== undefined && o.serverName === '') throw new TypeError('tls: serverName must not be empty');
  const credentials = grpcCredentials.createSsl(
    readPem(o.rootCa, 'tls.rootCa'),
    readPem(o.clientKey, 'tls.clientKey'),
    readPem(o.clientCert, 'tls.clientCert'),
  );
  return {
    credentials,
    options: o.serverName === undefined ? {} : { 'grpc.ssl_target_name_override': o.serverName },
  };
}

/** The token a client sends, given as a string or read from a file (again whenever it changes). */
export class BearerToken {
  // ES private fields: Object.entries, JSON and util.inspect never list them.
  #stamp = '';
  #current = '';
  /** The token file, if the token comes from one. */
  readonly file: string | undefined;

  constructor(source: { readonly token?: string; readonly file?: string }) {
    if ((source.token === undefined) === (source.file === undefined)) {
      throw new TypeError('give token or tokenFile, not both or neither');
    }
    this.file = source.file;
    if (source.token !== undefined) this.#current = checked(source.token.trim(), 'the token given');
    else this.value(); // a missing or bad file throws now, not at the first call
  }

  /** The token now; a file is stat'ed on every call (microseconds) and read again when it changed. */
  value(): string {
    if (this.file === undefined) return this.#current;
    let stamp: string;
    let text: string;
    try {
      const st = statSync(this.file, { bigint: true });
      stamp = `${st.ino}:${st.mtimeNs}:${st.size}`;
      if (stamp === this.#stamp) return this.#current;
      text = readFileSync(this.file, 'utf8').trim();
    } catch (error) {
      throw new TypeError(`token file ${JSON.stringify(this.file)}: ${errorCode(error)}`);
    }
    this.#current = checked(text, `token file ${JSON.stringify(this.file)}`);
    this.#stamp = stamp;
    return this.#current;
  }

  toString(): string {
    return this.file === undefined ? 'BearerToken(<redacted>)' : `BearerToken(file=${JSON.stringify(this.file)})`;
  }

  toJSON(): string {
    return this.toString();
  }

  [inspect.custom](): string {
    return this.toString();
  }
}

function checked(token: string, origin: string): string {
  if (token === '') throw new TypeError(`${origin}: the token is empty`);
  // Never echo the token: say only what is wrong with it.
  if (!TOKEN.test(token)) {
    throw new TypeError(`${origin}: a bearer token is printable ASCII without spaces; this one has other characters`);
  }
  return token;
}

/** "ENOENT" and the like, for a file that cannot be read. */
function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? String(error);
}

/** Adds `authorization: Bearer <token>` to every call of a grpc-js client. */
export function tokenInterceptor(token: BearerToken): Interceptor {
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set(AUTHORIZATION_METADATA_KEY, `Bearer ${token.value()}`);
        next(metadata, listener);
      },
    });
}

/**
 * True for a target on this machine: 127.0.0.0/8, ::1, localhost
 * (host:port, [v6]:port, optionally with an ipv4:/ipv6:/dns: scheme), or a
 * unix: socket.
 */
export function isLoopbackAddress(address: string): boolean {
  let target = address.trim();
  if (target.startsWith('unix:') || target.startsWith('unix-abstract:')) return true;
  for (const scheme of ['dns:///', 'dns:', 'ipv4:', 'ipv6:']) {
    if (target.startsWith(scheme)) {
      target = target.slice(scheme.length);
      break;
    }
  }
  let host: string;
  if (target.startsWith('[')) {
    const end = target.indexOf(']');
    host = end >= 0 ? target.slice(1, end) : target.slice(1);
  } else if (target.split(':').length === 2) {
    host = target.slice(0, target.lastIndexOf(':'));
  } else {
    host = target;
  }
  host = host.toLowerCase();
  if (host === 'localhost' || host === 'localhost.' || host === 'ip6-localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) return host === '::1' || /^(0{1,4}:){7}0{0,3}1$/.test(host);
  return false;
}

/**
 * The reconnect backoff of every channel a client opens, under the caller's
 * channelOptions (which win). gRPC's own waits 1 s after the first failed
 * connection attempt, then 1.6x longer each time (20 % jitter) up to 120 s:
 * a client whose dedupd restarted (a crash, a deploy, a node of a group
 * coming back) kept failing for a while after it listened again, the longer
 * the outage the longer. Here attempts start 100 ms apart and are never more
 * than 1 s apart. Measured with test/reconnect.integration.test.ts (grpc-js
 * 1.14, the server SIGKILLed, the client calling every 50 ms, then a restart
 * on the same port), from the server listening again to the first call it
 * answered, three runs each: after a 0.25 s outage 0.69-0.71 s with gRPC's
 * backoff, 0.15-0.22 s with this one; after a 3 s outage 1.7-2.1 s, now
 * 0.5-0.65 s. (grpc.min_reconnect_backoff_ms is left out:
 * grpc-js does not read it, and the C-core clients read it as the least time
 * a connection attempt is given, see client/reconnect_backoff.h.)
 */
export const RECONNECT_OPTIONS: ClientOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
};

/** How the channels of a client are opened: credentials, options (interceptors included), and the guard on addresses. */
export interface ChannelSecurity {
  readonly credentials: ChannelCredentials;
  readonly options: ClientOptions;
  /** Throws for an address the token must not go to in plaintext. */
  readonly guard: (address: string) => void;
}

/**
 * The channel security of `options`. `credentials` given (custom channel
 * credentials) excludes `tls`; the token goes with either.
 */
export function channelSecurity(
  options: SecurityOptions & { readonly credentials?: ChannelCredentials; readonly channelOptions?: ClientOptions },
): ChannelSecurity {
  const tls = options.tls === undefined || options.tls === false ? undefined : options.tls;
  if (tls !== undefined && options.credentials !== undefined) {
    throw new TypeError('give tls or credentials, not both');
  }
  const token =
    options.token !== undefined || options.tokenFile !== undefined
      ? new BearerToken({
          ...(options.token !== undefined && { token: options.token }),
          ...(options.tokenFile !== undefined && { file: options.tokenFile }),
        })
      : undefined;
  const secured = tls !== undefined ? tlsChannel(tls) : undefined;
  const credentials = secured?.credentials ?? options.credentials ?? grpcCredentials.createInsecure();
  const clientOptions: ClientOptions = {
    ...RECONNECT_OPTIONS,
    ...options.channelOptions,
    ...secured?.options,
    ...(token !== undefined && { interceptors: [...(options.channelOptions?.interceptors ?? []), tokenInterceptor(token)] }),
  };
  // Custom credentials may be TLS: only the client's own plaintext is judged.
  const plaintext = secured === undefined && options.credentials === undefined;
  const guard = (address: string): void => {
    if (token !== undefined && plaintext && options.allowInsecureToken !== true && !isLoopbackAddress(address)) {
      throw new TypeError(
        `refusing to send a bearer token in plaintext to ${address}: give tls (or allowInsecureToken on a trusted network)`,
      );
    }
  };
  return { credentials, options: clientOptions, guard };
}

/**
 * A grpc-js client (a channel) to `address` secured as a DedupClient with the
 * same options would be, for dedupd's other services (dedup.v1.Admin,
 * dedup.v1.Cluster, grpc.health.v1): call makeUnaryRequest on it. Every
 * call carries the token. Close it when done.
 */
export function openChannel(
  address: string,
  options: SecurityOptions & { readonly credentials?: ChannelCredentials; readonly channelOptions?: ClientOptions } = {},
): GrpcClient {
  const security = channelSecurity(options);
  security.guard(address);
  return new GrpcClient(address, security.credentials, security.options);
}
