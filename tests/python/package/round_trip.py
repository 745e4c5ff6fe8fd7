"""Run by test_install.py with an installed dedup-client's interpreter (a
venv), from a directory outside the repository and without PYTHONPATH:
imports the package, checks it is the installed one with its metadata (its
__version__ and py.typed too), and
makes a Begin/Complete round trip (blocking and asyncio) against the dedupd
at argv[1]. Prints "ok <fence>" when all is well."""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
import uuid
from pathlib import Path

import dedup_client
from dedup_client import AsyncClient, Client, dedup_pb2, with_idempotency_async

target, prefix = sys.argv[1], Path(sys.argv[2]).resolve()
where = Path(dedup_client.__file__).resolve()
assert prefix in where.parents, f"dedup_client imported from {where}, not {prefix}"
stubs = Path(dedup_pb2.__file__).resolve()
assert where.parent in stubs.parents, f"stubs from {stubs}, not the package"

meta = importlib.metadata.metadata("dedup-client")
assert meta["License"] == "Apache-2.0", meta["License"]
files = [str(f) for f in importlib.metadata.files("dedup-client")]
assert any(f.endswith(".dist-info/LICENSE") for f in files), files
# One version: the distribution's metadata is read from dedup_client.__version__.
version = importlib.metadata.version("dedup-client")
assert dedup_client.__version__ == version, (dedup_client.__version__, version)
assert version and version[0].isdigit(), version
# PEP 561 marker: type checkers use the package's annotations.
assert (where.parent / "py.typed").is_file(), f"no py.typed beside {where}"
assert "dedup_client/py.typed" in files, files

key = f"pkg-{uuid.uuid4()}"
with Client(target) as client:
    begin = client.begin("pkg", key, b"h", owner="o")
    assert begin.status == dedup_pb2.BeginResponse.STARTED, begin
    done = client.complete("pkg", key, begin.fence, dedup_pb2.SUCCESS, b'"done"')
    assert done.status == dedup_pb2.CompleteResponse.OK, done
    again = client.begin("pkg", key, b"h", owner="p")
    assert (again.status, again.result) == (dedup_pb2.BeginResponse.DUPLICATE, b'"done"'), again


async def async_round_trip() -> None:
    async with AsyncClient(target) as client:
        first = await with_idempotency_async(client, "pkg", {"k": key}, lambda: "async")
        second = await with_idempotency_async(client, "pkg", {"k": key}, lambda: "again")
        assert (first.duplicate, second.duplicate, second.result) == (False, True, "async")


asyncio.run(async_round_trip())
print("ok", begin.fence)
