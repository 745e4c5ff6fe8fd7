// An in-process gRPC server speaking dedup.v1.Dedup whose answers a test
// scripts (a follower's UNAVAILABLE with `dedup-leader`, an ABORTED with
// `dedup-outcome: unknown`, then a real-looking answer), recording every
// request with the deadline it arrived with. For the client's failover unit
// tests; the integration tests use the real dedupd.
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceDefinition,
  type sendUnaryData,
  status as GrpcStatus,
} from '@grpc/grpc-js';

import * as wire from '../src/wire.js';

export interface FakeCall {
  readonly method: string;
  readonly request: Record<string, unknown>;
  /** Unix ms the call was received. */
  readonly receivedAt: number;
  /** The call's deadline as the server saw it (Unix ms; Infinity without one). */
  readonly deadline: number;
  /** The call's `authorization` metadata, if any. */
  readonly authorization: string | undefined;
}

export type Reply =
  | { readonly response: object }
  | { readonly error: { readonly code: number; readonly details: string; readonly trailers?: Record<string, string | Buffer> } };

/** Answers the `nth` (0-based) call of `method`. */
export type Script = (method: string, request: Record<string, unknown>, nth: number) => Reply | Promise<Reply>;

export class FakeDedupd {
  readonly calls: FakeCall[] = [];

  private constructor(
    private readonly server: Server,
    readonly address: string,
  ) {}

  /**
   * `only`: the methods served; grpc-js answers the others UNIMPLEMENTED (a
   * server older than them). Default: every method of dedup.proto.
   */
  static async start(script: Script, only?: readonly string[]): Promise<FakeDedupd> {
    const server = new Server();
    const service = wire.packageDefinition()[wire.SERVICE_NAME] as ServiceDefinition;
    const handlers: Record<string, unknown> = {};
    let fake: FakeDedupd | undefined;
    for (const method of Object.keys(service)) {
      if (only !== undefined && !only.includes(method)) continue;
      handlers[method] = (call: ServerUnaryCall<Record<string, unknown>, object>, callback: sendUnaryData<object>) => {
        const deadline = call.getDeadline();
        const calls = fake?.calls ?? [];
        const nth = calls.filter((c) => c.method === method).length;
        calls.push({
          method,
          request: call.request,
          receivedAt: Date.now(),
          deadline: deadline instanceof Date ? deadline.getTime() : deadline,
          authorization: call.metadata.get('authorization')[0]?.toString(),
        });
        Promise.resolve()
          .then(() => script(method, call.request, nth))
          .then(
            (reply) => {
              if ('response' in reply) {
                callback(null, reply.response);
                return;
              }
              const metadata = new Metadata();
              for (const [key, value] of Object.entries(reply.error.trailers ?? {})) metadata.set(key, value);
              callback({ code: reply.error.code, details: reply.error.details, metadata });
            },
            (error: unknown) => callback({ code: GrpcStatus.INTERNAL, details: `fake script threw: ${String(error)}` }),
          );
      };
    }
    server.addService(service, handlers as never);
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))),
    );
    fake = new FakeDedupd(server, `127.0.0.1:${port}`);
    return fake;
  }

  /** The calls of one method, in order. */
  callsOf(method: string): FakeCall[] {
    return this.calls.filter((c) => c.method === method);
  }

  stop(): void {
    this.server.forceShutdown();
  }
}

// ---- Replies ----

export function notLeader(leader?: string): Reply {
  return {
    error: {
      code: GrpcStatus.UNAVAILABLE,
      details: leader === undefined ? 'not the leader, and no leader is known yet' : `not the leader; the leader is at ${leader}`,
      ...(leader !== undefined && { trailers: { 'dedup-leader': leader } }),
    },
  };
}

export function outcomeUnknown(): Reply {
  return {
    error: {
      code: GrpcStatus.ABORTED,
      details: 'outcome unknown: leadership lost',
      trailers: { 'dedup-outcome': 'unknown' },
    },
  };
}

export function started(fence: number): wire.BeginResponseWire {
  return {
    status: 'STARTED', fence: String(fence), takeover: false, outcome: 'OUTCOME_UNSPECIFIED', result: Buffer.alloc(0),
    created_at: '1', completed_at: '0', expires_at: '2', lease_expires_at: '2', attempts: 1, retry_after_ms: 0,
    checkpoint: null, rerun: false, tombstone_expires_at: '0',
  };
}

export function fenced(status: string, fence: number): { status: string; fence: string } {
  return { status, fence: String(fence) };
}
