"""Build hooks of the dedup-client distribution (metadata: pyproject.toml).

The dedup.v1 stubs are generated into the package (dedup_client/_stubs) when
it is built, from proto/dedup/v1/*.proto, with the `protoc` binary and
grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc), as
tests/python/CMakeLists.txt does; grpc_tools is not needed. They are never
committed and never written into the source tree, only into the build's
build_lib (a temporary directory: nothing of a build is left here but the
git-ignored dedup_client.egg-info).

Built from the repository, the .proto files and the LICENSE are copied from
<repo>/proto and <repo>/LICENSE into this directory first (git-ignored), so
an sdist carries them and a wheel can be built from the sdist alone (where
there is no <repo> to copy from).

Environment: PROTOC and GRPC_PYTHON_PLUGIN name the binaries if they are not
on PATH (/usr/bin/grpc_python_plugin is tried too).
"""

from __future__ import annotations

import atexit
import filecmp
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build import build
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROTOS = ("dedup/v1/dedup.proto", "dedup/v1/error_details.proto", "dedup/v1/cluster.proto")
STUBS_PACKAGE = "dedup_client/_stubs"


def copy_from_repository() -> None:
    """<repo>/proto/... and <repo>/LICENSE into this directory, when building
    from the repository (an sdist already holds them)."""
    pairs = [(REPO / "proto" / p, HERE / "proto" / p) for p in PROTOS]
    pairs.append((REPO / "LICENSE", HERE / "LICENSE"))
    for source, target in pairs:
        if not source.is_file():
            continue
        if target.is_file() and filecmp.cmp(source, target, shallow=False):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def find_tool(env: str, name: str, fallback: str = "") -> str:
    path = os.environ.get(env) or shutil.which(name) or (
        fallback if fallback and os.access(fallback, os.X_OK) else "")
    if not path:
        raise RuntimeError(
            f"dedup-client: {name} is needed to generate the dedup.v1 stubs "
            f"(Debian: protobuf-compiler / protobuf-compiler-grpc; or set {env})")
    return path


def generate_stubs(out: Path) -> list[Path]:
    """Generates the stubs into `out` (a package); returns the files written."""
    proto_dir = HERE / "proto"
    missing = [p for p in PROTOS if not (proto_dir / p).is_file()]
    if missing:
        raise RuntimeError(f"dedup-client: missing {', '.join(missing)} under {proto_dir}")
    protoc = find_tool("PROTOC", "protoc")
    plugin = find_tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin", "/usr/bin/grpc_python_plugin")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    subprocess.run(
        [protoc, f"--proto_path={proto_dir}", f"--python_out={out}", f"--pyi_out={out}",
         f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={plugin}",
         str(proto_dir / PROTOS[0]), str(proto_dir / PROTOS[2])],
        check=True)
    subprocess.run(
        [protoc, f"--proto_path={proto_dir}", f"--python_out={out}", f"--pyi_out={out}",
         str(proto_dir / PROTOS[1])],
        check=True)
    # The generated service module imports its messages as top-level
    # `dedup.v1`; inside this package that is a relative import.
    for name in ("dedup_pb2_grpc.py", "cluster_pb2_grpc.py"):
        grpc_module = out / "dedup" / "v1" / name
        text = grpc_module.read_text(encoding="utf-8")
        fixed, count = re.subn(r"^from dedup\.v1 import ", "from . import ", text, flags=re.M)
        if count == 0:
            raise RuntimeError(f"dedup-client: unexpected imports in {grpc_module}")
        grpc_module.write_text(fixed, encoding="utf-8")
    for package in (out, out / "dedup", out / "dedup" / "v1"):
        (package / "__init__.py").write_text(
            '"""Generated at build time from proto/dedup/v1 (setup.py)."""\n', encoding="utf-8")
    return sorted(p for p in out.rglob("*") if p.is_file())


class BuildOutsideTheTree(build):
    """Builds in a fresh temporary directory (unless --build-base says
    otherwise): pip builds a local directory in place, and a build/ left in
    client/python could ship files of an earlier build."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.build_base = tempfile.mkdtemp(prefix="dedup-client-build-")
        atexit.register(shutil.rmtree, self.build_base, True)


class BuildPyWithStubs(build_py):
    """build_py, plus the stubs generated into build_lib/dedup_client/_stubs."""

    def run(self) -> None:
        # Files of an earlier build whose sources are gone would be packaged
        # too: start from an empty package directory.
        package = Path(self.build_lib) / "dedup_client"
        if package.exists() and not self.dry_run:
            shutil.rmtree(package)
        super().run()
        if not self.dry_run:
            self._stubs = generate_stubs(Path(self.build_lib) / STUBS_PACKAGE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        stubs = [str(p) for p in getattr(self, "_stubs", [])]
        return list(super().get_outputs(include_bytecode)) + stubs


copy_from_repository()
setup(cmdclass={"build": BuildOutsideTheTree, "build_py": BuildPyWithStubs})
