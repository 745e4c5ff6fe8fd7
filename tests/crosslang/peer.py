"""The Python side of the cross-language replay test (test_crosslang.py
drives it): through with_idempotency, the client's own JSON convention.

  peer.py TARGET CASES_JSON store    stores cases.origins.python's success
      and error under python:success / python:error
  peer.py TARGET CASES_JSON replay   replays the cpp and typescript origins'
      keys, which must not run fn

Prints "ok <check>" per check passed and "FAIL <check>: <why>" per check
failed; exits 1 if any failed.
"""

from __future__ import annotations

import builtins
import json
import sys
from typing import Any

from dedup_client import Client, ReplayedError, with_idempotency
from dedup_client.args_hash import canonicalize

failures = 0


def check(passed: bool, what: str, why: str) -> None:
    global failures
    if passed:
        print(f"ok {what}")
    else:
        print(f"FAIL {what}: {why}")
        failures += 1


def same_value(got: Any, expected: Any) -> bool:
    # RFC 8785 form: key order and number spelling may differ between
    # writers, the value must not (and True is not 1 there).
    return canonicalize(got) == canonicalize(expected)


def store(client: Client, ns: str, args: Any, mine: dict[str, Any]) -> None:
    ran = []

    def succeed() -> Any:
        ran.append(True)
        return mine["value"]

    try:
        result = with_idempotency(client, ns, args, succeed, key="python:success")
        check(bool(ran) and not result.duplicate and same_value(result.result, mine["value"]),
              "python:success stored", f"ran {ran}, got {result!r}")
    except Exception as error:  # noqa: BLE001 - reported as a failed check
        check(False, "python:success stored", repr(error))

    # The stored name is the exception's class name (bare for builtins).
    spec = mine["error"]
    cls = getattr(builtins, spec["name"])
    raised = cls(spec["message"])

    def fail() -> Any:
        raise raised

    try:
        with_idempotency(client, ns, args, fail, key="python:error")
        check(False, "python:error stored", "fn's exception was not re-raised")
    except Exception as error:  # noqa: BLE001 - must be fn's own exception
        check(error is raised, "python:error stored", repr(error))


def replay(client: Client, ns: str, args: Any, origin: str, spec: dict[str, Any]) -> None:
    ran = []

    def must_not_run() -> Any:
        ran.append(True)
        return "fn ran: not a replay"

    key = f"{origin}:success"
    try:
        result = with_idempotency(client, ns, args, must_not_run, key=key)
        check(not ran and result.duplicate and same_value(result.result, spec["value"]),
              f"{key} replayed", f"ran {ran}, got {result!r}")
    except Exception as error:  # noqa: BLE001 - reported as a failed check
        check(False, f"{key} replayed", repr(error))

    key = f"{origin}:error"
    expected = spec["error"]
    try:
        result = with_idempotency(client, ns, args, must_not_run, key=key)
        check(False, f"{key} replayed", f"no ReplayedError: ran {ran}, got {result!r}")
    except ReplayedError as error:
        code = (error.stored or {}).get("code")
        check(not ran and error.name == expected["name"]
              and error.message == expected["message"] and code == expected.get("code"),
              f"{key} replayed",
              f"ran {ran}, name {error.name!r}, message {error.message!r}, code {code!r}, "
              f"payload {error.payload!r}")
    except Exception as error:  # noqa: BLE001 - reported as a failed check
        check(False, f"{key} replayed", repr(error))


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[3] not in ("store", "replay"):
        print("usage: peer.py TARGET CASES_JSON store|replay", file=sys.stderr)
        return 2
    target, cases_path, mode = sys.argv[1:]
    with open(cases_path, encoding="utf-8") as file:
        cases = json.load(file)
    ns, args, origins = cases["namespace"], cases["args"], cases["origins"]
    with Client(target) as client:
        if mode == "store":
            store(client, ns, args, origins["python"])
        else:
            for origin in ("cpp", "typescript"):
                replay(client, ns, args, origin, origins[origin])
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
