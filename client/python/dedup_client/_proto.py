"""The generated dedup.v1 stubs (Dedup, and Cluster for its ShardMap), with a useful message when they are missing.

An installed dedup-client carries them in dedup_client._stubs (setup.py
generates them when the package is built). Used from the source tree they
come from the build instead (CMake target `dedup_python_stubs`, generated
into <build>/client/python/gen, which must be on sys.path next to
client/python). They are never committed.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("dedup_client._stubs") is not None:
    # An installed package: its own stubs (an import error in them is real).
    from dedup_client._stubs.dedup.v1 import (
        cluster_pb2, cluster_pb2_grpc, dedup_pb2, dedup_pb2_grpc, error_details_pb2)
else:
    try:
        from dedup.v1 import (
            cluster_pb2, cluster_pb2_grpc, dedup_pb2, dedup_pb2_grpc, error_details_pb2)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "dedup_client needs the generated dedup.v1 stubs: install the package "
            "(pip install ./client/python), or build the CMake target "
            "dedup_python_stubs and put <build>/client/python/gen on PYTHONPATH "
            f"({e})"
        ) from e

__all__ = [
    "cluster_pb2", "cluster_pb2_grpc", "dedup_pb2", "dedup_pb2_grpc", "error_details_pb2"]
