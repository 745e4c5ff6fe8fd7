"""The environment variables every dedup client reads, with the same names
(dedupctl, the C++ client, TypeScript and this package):

    DEDUP_ADDRESS     host:port, or a comma-separated list of a group's nodes
    DEDUP_TOKEN_FILE  file holding the bearer token sent with every call
    DEDUP_CA_FILE     PEM CA that signed the server's certificate (TLS on)
    DEDUP_CERT_FILE   PEM client certificate (mTLS), with DEDUP_KEY_FILE
    DEDUP_KEY_FILE    PEM key of DEDUP_CERT_FILE

Unset and empty are the same. Client and AsyncClient read them for what
their arguments leave open: no target, no tls, neither token nor
token_file. An explicit argument always wins."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from dedup_client.security import TlsConfig

ADDRESS = "DEDUP_ADDRESS"
TOKEN_FILE = "DEDUP_TOKEN_FILE"
CA_FILE = "DEDUP_CA_FILE"
CERT_FILE = "DEDUP_CERT_FILE"
KEY_FILE = "DEDUP_KEY_FILE"


def split_addresses(text: str) -> list[str]:
    """"a:1, b:2,a:1" -> ["a:1", "b:2"]: split on commas, blanks trimmed,
    duplicates dropped. ValueError for an empty entry."""
    addresses: list[str] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise ValueError(f"empty entry in the address list {text!r}")
        if entry not in addresses:
            addresses.append(entry)
    return addresses


def _get(name: str, environ: Optional[Mapping[str, str]]) -> Optional[str]:
    value = (os.environ if environ is None else environ).get(name, "")
    return value or None


def addresses_from_env(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """DEDUP_ADDRESS's addresses; ValueError when it is not set."""
    text = _get(ADDRESS, environ)
    if text is None:
        raise ValueError(f"give a target (host:port) or set {ADDRESS}")
    return split_addresses(text)


def token_file_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """DEDUP_TOKEN_FILE, or None."""
    return _get(TOKEN_FILE, environ)


def tls_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[TlsConfig]:
    """A TlsConfig of DEDUP_CA_FILE, DEDUP_CERT_FILE and DEDUP_KEY_FILE, or
    None when none is set (plaintext)."""
    ca, cert, key = (_get(n, environ) for n in (CA_FILE, CERT_FILE, KEY_FILE))
    if ca is None and cert is None and key is None:
        return None
    return TlsConfig(root_ca=ca, client_cert=cert, client_key=key)
