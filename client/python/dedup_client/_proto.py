"""The generated dedup.v1 stubs, with a useful message when they are missing.

The stubs are generated at build time (CMake target `dedup_python_stubs`)
into <build>/client/python/gen, which must be on sys.path next to
client/python. They are never committed.
"""

from __future__ import annotations

try:
    from dedup.v1 import dedup_pb2, dedup_pb2_grpc, error_details_pb2
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "dedup_client needs the generated dedup.v1 stubs: build the CMake "
        "target dedup_python_stubs and put <build>/client/python/gen on "
        f"PYTHONPATH ({e})"
    ) from e

__all__ = ["dedup_pb2", "dedup_pb2_grpc", "error_details_pb2"]
