/**
 * The environment variables every dedup client reads, with the same names
 * (dedupctl, the C++ client, Python and this package):
 *
 *   DEDUP_ADDRESS     host:port, or a comma-separated list of a group's nodes
 *   DEDUP_TOKEN_FILE  file holding the bearer token sent with every call
 *   DEDUP_CA_FILE     PEM CA that signed the server's certificate (TLS on)
 *   DEDUP_CERT_FILE   PEM client certificate (mTLS), with DEDUP_KEY_FILE
 *   DEDUP_KEY_FILE    PEM key of DEDUP_CERT_FILE
 *
 * Unset and empty are the same. DedupClient reads them for what its options
 * leave open; an explicit option always wins.
 */
import type { TlsOptions } from './security.js';

export const DEDUP_ENV = {
  address: 'DEDUP_ADDRESS',
  tokenFile: 'DEDUP_TOKEN_FILE',
  caFile: 'DEDUP_CA_FILE',
  certFile: 'DEDUP_CERT_FILE',
  keyFile: 'DEDUP_KEY_FILE',
} as const;

/** The options environmentDefaults may fill in. */
export interface EnvironmentOptions {
  readonly address?: string;
  readonly addresses?: readonly string[];
  readonly tls?: boolean | TlsOptions;
  readonly credentials?: unknown;
  readonly token?: string;
  readonly tokenFile?: string;
}

type Env = Readonly<Record<string, string | undefined>>;

function get(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

/**
 * `options` with what they leave open taken from the DEDUP_* variables of
 * `env` (default process.env): no address or addresses -> DEDUP_ADDRESS; no
 * tls and no credentials -> DEDUP_CA_FILE / DEDUP_CERT_FILE / DEDUP_KEY_FILE
 * (file paths, read when the client is made); neither token nor tokenFile
 * -> DEDUP_TOKEN_FILE.
 */
export function environmentDefaults<T extends EnvironmentOptions>(options: T, env: Env = process.env): T {
  const address = options.address === undefined && options.addresses === undefined ? get(env, DEDUP_ENV.address) : undefined;
  const [rootCa, clientCert, clientKey] = [DEDUP_ENV.caFile, DEDUP_ENV.certFile, DEDUP_ENV.keyFile].map((n) => get(env, n));
  const tls: TlsOptions | undefined =
    options.tls === undefined && options.credentials === undefined && (rootCa ?? clientCert ?? clientKey) !== undefined
      ? {
          ...(rootCa !== undefined && { rootCa }),
          ...(clientCert !== undefined && { clientCert }),
          ...(clientKey !== undefined && { clientKey }),
        }
      : undefined;
  const tokenFile = options.token === undefined && options.tokenFile === undefined ? get(env, DEDUP_ENV.tokenFile) : undefined;
  return {
    ...options,
    ...(address !== undefined && { address }),
    ...(tls !== undefined && { tls }),
    ...(tokenFile !== undefined && { tokenFile }),
  };
}
