"""What Client and AsyncClient share: their options, checked the same way,
the Router of their addresses, and the backoff. See dedup_client.client for
what each option means."""

from __future__ import annotations

import os
import random
from typing import Any, Callable, Optional, Sequence, Union

from dedup_client import environment
from dedup_client.backoff import Backoff
from dedup_client.routing import Router
from dedup_client.shard_routing import FETCH_TIMEOUT_S, ShardMap
from dedup_client.security import (
    BearerToken,
    TlsConfig,
    as_tls_config,
    channel_factory as secure_channel_factory,
    check_token_destination,
    make_token,
)


class ClientBase:
    """Options, addresses, leader guess and backoff of one client.
    Subclasses set how channels are opened (_router_class, _secure,
    _insecure)."""

    _router_class: Callable[..., Router] = Router
    # None: grpc.secure_channel / grpc.insecure_channel.
    _secure: Optional[Callable[..., Any]] = None
    _insecure: Optional[Callable[..., Any]] = None

    def __init__(
        self,
        target: Any = None,
        deadline_s: float = 5.0,
        max_attempts: Optional[int] = None,
        backoff_base_s: float = 0.05,
        backoff_cap_s: float = 2.0,
        *,
        max_leader_hops: int = 3,
        channel_factory: Optional[Callable[[str], Any]] = None,
        tls: Union[None, bool, TlsConfig] = None,
        token: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        allow_insecure_token: bool = False,
        channel_options: Sequence[tuple[str, Any]] = (),
        uniform01: Callable[[], float] = random.random,
    ) -> None:
        target, tls, token_file = _with_environment(
            target, tls, token, token_file, channel_factory)
        if max_attempts is None:
            max_attempts = (
                10 if isinstance(target, (list, tuple)) and len(target) > 1 else 5
            )
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if max_leader_hops < 0:
            raise ValueError("max_leader_hops must not be negative")
        given_channel = not isinstance(target, (str, list, tuple))
        tls_config = as_tls_config(tls)
        if (tls_config is not None or channel_options) and (
                given_channel or channel_factory is not None):
            raise ValueError(
                "tls and channel_options apply to channels the Client opens: "
                "not with a grpc.Channel target or a channel_factory")
        bearer = make_token(token, token_file)
        if channel_factory is None and not given_channel:
            # Now, not at the first call: a token must not wait for traffic
            # to be refused. (A redirect's address is checked when opened.)
            for address in [target] if isinstance(target, str) else target:
                if isinstance(address, str):  # (Router refuses the others)
                    check_token_destination(
                        address, tls_config, bearer, allow_insecure_token)
            channel_factory = secure_channel_factory(
                tls_config, bearer, allow_insecure_token, channel_options,
                secure=self._secure, insecure=self._insecure)
        self._token: Optional[BearerToken] = bearer
        self._router = self._router_class(target, channel_factory, bearer)
        self.deadline_s = deadline_s
        self.max_attempts = max_attempts
        self.max_leader_hops = max_leader_hops
        self.backoff = Backoff(backoff_base_s, backoff_cap_s)
        self._uniform01 = uniform01

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses given ("" for a given channel)."""
        return self._router.addresses

    def leader_address(self) -> str:
        """The address calls go to now: the last node that answered as the
        leader or was named as it ("" for a given channel)."""
        return self._router.leader()

    def shard_map(self) -> Optional[ShardMap]:
        """The cluster's shard map this client routes by (None: calls go to
        the leader guess, as to a single group; see
        dedup_client.shard_routing)."""
        return self._router.shards.current

    def _shard_fetch_timeout_s(self) -> float:
        return min(self.deadline_s, FETCH_TIMEOUT_S)

    def retry_delay_s(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (0 for the first):
        full-jitter backoff with this client's settings and jitter source."""
        return self.backoff.delay(retry, self._uniform01)


def _with_environment(
    target: Any,
    tls: Union[None, bool, TlsConfig],
    token: Optional[str],
    token_file: Any,
    channel_factory: Optional[Callable[[str], Any]],
) -> tuple[Any, Union[None, bool, TlsConfig], Any]:
    """target, tls and token_file with what the arguments leave open taken
    from the DEDUP_* variables (dedup_client.environment): no target ->
    DEDUP_ADDRESS; a "a:1,b:2" string -> its list. For channels the client
    opens itself (no grpc.Channel target, no channel_factory): tls None ->
    DEDUP_CA_FILE/CERT_FILE/KEY_FILE, neither token nor token_file ->
    DEDUP_TOKEN_FILE."""
    if target is None:
        target = environment.addresses_from_env()
    elif isinstance(target, str) and "," in target:
        target = environment.split_addresses(target)
    opens_channels = channel_factory is None and isinstance(target, (str, list, tuple))
    if opens_channels:
        if tls is None:
            tls = environment.tls_from_env()
        if token is None and token_file is None:
            token_file = environment.token_file_from_env()
    return target, tls, token_file
