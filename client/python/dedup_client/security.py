"""How a Client reaches dedupd securely: TLS (the server verified against a
CA), optionally a client certificate (mTLS), and a bearer token sent on every
call as gRPC metadata `authorization: Bearer <token>`.

The token is added by a channel interceptor, not by gRPC call credentials:
gRPC refuses call credentials on a plaintext channel, and a token over
plaintext on loopback is what local development against a tenants file
needs. Over a network use TLS: a token sent in plaintext can be read on the
way, so the client refuses to send one to a non-loopback address without
TLS unless told `allow_insecure_token=True` (as dedupd itself needs
--insecure to serve plaintext off loopback).

The token never appears in a repr, an exception or a log line of this
package.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import grpc

from dedup_client.reconnect import with_reconnect_backoff

PemSource = Union[str, bytes, "os.PathLike[str]"]
"""A PEM file's path (str or os.PathLike), or the PEM itself (bytes, or a
str holding "-----BEGIN")."""

AUTHORIZATION_METADATA_KEY = "authorization"

# Printable ASCII without spaces: what travels as an HTTP/2 header value
# after "Bearer " (dedupd strips surrounding whitespace and compares the rest).
_TOKEN = re.compile(r"[\x21-\x7e]+")
_PEM_MARK = "-----BEGIN"


def read_pem(source: Optional[PemSource], what: str) -> Optional[bytes]:
    """The PEM bytes of `source` (None stays None). Raises ValueError naming
    `what` (and the file) when it cannot be read or holds no PEM block."""
    if source is None:
        return None
    if isinstance(source, bytes):
        data, origin = source, "the bytes given"
    elif isinstance(source, str) and _PEM_MARK in source:
        data, origin = source.encode("ascii", "replace"), "the text given"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"{what}: cannot read {path!r}: {e.strerror}") from None
        origin = repr(path)
    else:
        raise TypeError(f"{what}: a file path or PEM bytes, not {type(source).__name__}")
    if _PEM_MARK.encode() not in data:
        raise ValueError(f"{what}: {origin} holds no PEM block")
    return data


@dataclass(frozen=True)
class TlsConfig:
    """TLS settings of a Client.

    root_ca: the CA(s) the server's certificate must chain to (PemSource);
    None uses gRPC's default roots (the system's). client_cert and
    client_key: a client certificate chain and its key, both or neither
    (mTLS; dedupd started with --tls_client_ca_file may map the
    certificate's names to a tenant). server_name: the name checked against
    the server's certificate instead of the address's host (e.g. "localhost"
    or a Kubernetes service name when calling pods by IP).

    Files are read when a Client is made (a missing file raises then); a
    rotated client certificate is picked up by a new Client.
    """

    root_ca: Optional[PemSource] = None
    client_cert: Optional[PemSource] = None
    client_key: Optional[PemSource] = None
    server_name: Optional[str] = None

    def __post_init__(self) -> None:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("TlsConfig: give client_cert and client_key together (mTLS)")
        if self.server_name is not None and not self.server_name:
            raise ValueError("TlsConfig: server_name must not be empty")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The credentials of a channel with these settings (files read now)."""
        return grpc.ssl_channel_credentials(
            root_certificates=read_pem(self.root_ca, "TLS root_ca"),
            private_key=read_pem(self.client_key, "TLS client_key"),
            certificate_chain=read_pem(self.client_cert, "TLS client_cert"),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


class BearerToken:
    """The token a client sends, given as a string or read from a file.

    A file is read again whenever it changes (checked with a stat on every
    call, a few microseconds), so a rotated token is used from the next call
    on; surrounding whitespace is ignored. Thread-safe.
    """

    def __init__(
        self, token: Optional[str] = None, *, file: Optional[Union[str, "os.PathLike[str]"]] = None
    ) -> None:
        if (token is None) == (file is None):
            raise ValueError("BearerToken: give a token or a file, not both or neither")
        self._file = os.fspath(file) if file is not None else None
        self._lock = threading.Lock()
        self._stamp: Optional[tuple[int, int, int]] = None  # guarded by _lock
        self._value = ""  # guarded by _lock
        if token is not None:
            self._value = _checked(token.strip(), "the token given")
        else:
            self.value()  # a missing or bad file fails now, not at the first call

    @property
    def file(self) -> Optional[str]:
        return self._file

    def value(self) -> str:
        """The token now (re-read if its file changed). Raises ValueError if
        the file cannot be read or holds no valid token."""
        if self._file is None:
            return self._value
        try:
            st = os.stat(self._file)
        except OSError as e:
            raise ValueError(f"token file {self._file!r}: {e.strerror}") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    with open(self._file, "r", encoding="ascii", errors="replace") as f:
                        text = f.read().strip()
                except OSError as e:
                    raise ValueError(f"token file {self._file!r}: {e.strerror}") from None
                self._value = _checked(text, f"token file {self._file!r}")
                self._stamp = stamp
            return self._value

    def metadata(self) -> tuple[str, str]:
        return (AUTHORIZATION_METADATA_KEY, "Bearer " + self.value())

    def __repr__(self) -> str:
        where = f"file={self._file!r}" if self._file is not None else "<redacted>"
        return f"BearerToken({where})"


def _checked(token: str, origin: str) -> str:
    if not token:
        raise ValueError(f"{origin}: the token is empty")
    if not _TOKEN.fullmatch(token):
        # Never echo the token: say only what is wrong with it.
        raise ValueError(
            f"{origin}: a bearer token is printable ASCII without spaces; "
            "this one has other characters")
    return token


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class TokenInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Adds `authorization: Bearer <token>` to every unary call of a channel
    (blocking, with_call and future alike)."""

    def __init__(self, token: BearerToken) -> None:
        self._token = token

    def intercept_unary_unary(self, continuation, client_call_details, request):
        metadata = [
            item for item in (client_call_details.metadata or ())
            if item[0] != AUTHORIZATION_METADATA_KEY
        ]
        metadata.append(self._token.metadata())
        details = _CallDetails(
            client_call_details.method,
            client_call_details.timeout,
            metadata,
            client_call_details.credentials,
            getattr(client_call_details, "wait_for_ready", None),
            getattr(client_call_details, "compression", None),
        )
        return continuation(details, request)


def is_loopback_address(address: str) -> bool:
    """True for a gRPC target on this machine: 127.0.0.0/8, ::1, localhost
    (host:port, [v6]:port, optionally with an ipv4:/ipv6:/dns:/// scheme),
    or a unix: socket."""
    target = address.strip()
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            target = target[len(scheme):]
            break
    if target.startswith("["):
        host = target[1:target.find("]")] if "]" in target else target[1:]
    elif target.count(":") == 1:
        host = target.rsplit(":", 1)[0]
    else:
        host = target  # no port, or a bare IPv6 address
    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_token(token: Optional[str], token_file: Any) -> Optional[BearerToken]:
    """The BearerToken of Client's `token` / `token_file` arguments, or None."""
    if token is not None and token_file is not None:
        raise ValueError("give token or token_file, not both")
    if token is None and token_file is None:
        return None
    return BearerToken(token) if token is not None else BearerToken(file=token_file)


def as_tls_config(tls: Union[None, bool, TlsConfig]) -> Optional[TlsConfig]:
    if tls is None or tls is False:
        return None
    if tls is True:
        return TlsConfig()
    if isinstance(tls, TlsConfig):
        return tls
    raise TypeError(f"tls: a TlsConfig or a bool, not {type(tls).__name__}")


def check_token_destination(
    address: str,
    tls: Optional[TlsConfig],
    token: Optional[BearerToken],
    allow_insecure_token: bool,
) -> None:
    """Raises ValueError when `token` would go in plaintext to `address`
    off loopback without allow_insecure_token."""
    if token is not None and tls is None and not allow_insecure_token and (
            not is_loopback_address(address)):
        raise ValueError(
            f"refusing to send a bearer token in plaintext to {address}: give "
            "tls=TlsConfig(...) (or allow_insecure_token=True on a trusted network)")


def channel_factory(
    tls: Optional[TlsConfig],
    token: Optional[BearerToken],
    allow_insecure_token: bool = False,
    options: Sequence[tuple[str, Any]] = (),
    *,
    secure: Optional[Callable[..., Any]] = None,
    insecure: Optional[Callable[..., Any]] = None,
) -> Callable[[str], grpc.Channel]:
    """Opens the (not yet intercepted) channel of an address: TLS with
    `tls`'s credentials (files read once, here), else plaintext, with the
    short reconnect backoff of dedup_client.reconnect unless `options` sets
    its own. With a token and no TLS, an address off loopback raises
    ValueError unless allow_insecure_token. secure / insecure open the
    channel (default grpc.secure_channel / grpc.insecure_channel, looked up
    at each call; AsyncClient passes grpc.aio's)."""
    credentials = tls.channel_credentials() if tls is not None else None
    all_options = with_reconnect_backoff(
        list(options) + (tls.channel_options() if tls is not None else []))

    def open_channel(address: str) -> grpc.Channel:
        if credentials is not None:
            return (secure or grpc.secure_channel)(address, credentials, options=all_options)
        check_token_destination(address, tls, token, allow_insecure_token)
        return (insecure or grpc.insecure_channel)(address, options=all_options)

    return open_channel


def open_channel(
    address: str,
    *,
    tls: Union[None, bool, TlsConfig] = None,
    token: Optional[str] = None,
    token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    allow_insecure_token: bool = False,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A channel to `address` secured as a Client with the same arguments
    would be, for dedupd's other services (dedup.v1.Admin, dedup.v1.Cluster,
    grpc.health.v1). Unary calls on it carry the token. Close it when done."""
    bearer = make_token(token, token_file)
    channel = channel_factory(as_tls_config(tls), bearer, allow_insecure_token, options)(address)
    return grpc.intercept_channel(channel, TokenInterceptor(bearer)) if bearer else channel
