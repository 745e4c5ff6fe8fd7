"""client/python is an installable package, offline, with Debian's Python:

    /usr/bin/python3 -m venv --system-site-packages V
    V/bin/pip install --no-build-isolation ./client/python

then `import dedup_client` works from any directory (stubs generated into the
package at build time) and makes a Begin/Complete round trip against a real
dedupd. The same from an sdist built from the tree (it carries the .proto
files and the LICENSE, so the wheel builds without the repository).

Needs python3-venv, python3-setuptools, python3-wheel, protoc and
grpc_python_plugin (scripts/install-deps --test). The venvs live in a temp
dir; pip runs with --no-index (no network: everything else comes from the
system site-packages)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from dedupd_process import Dedupd  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "client" / "python"
ROUND_TRIP = Path(__file__).with_name("round_trip.py")
SYSTEM_PYTHON = os.environ.get("DEDUP_PYTHON", "/usr/bin/python3")

SERVER: Dedupd


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd()


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


def clean_env() -> dict[str, str]:
    """The environment without anything that would find the source tree's
    dedup_client or the build's stubs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(argv: list[str], cwd: Path, timeout: float = 180) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=clean_env(), timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {done.returncode}:\n"
                             f"{done.stdout[-4000:]}")
    return done.stdout


class InstallTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="dedup-pkg-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)

    def venv(self, name: str) -> Path:
        venv = self.tmp / name
        run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", venv], self.tmp)
        return venv

    def round_trip(self, venv: Path) -> None:
        # From a directory that is neither the repository nor the venv.
        elsewhere = self.tmp / "elsewhere"
        elsewhere.mkdir(exist_ok=True)
        out = run([venv / "bin" / "python", ROUND_TRIP, SERVER.target, venv], elsewhere)
        self.assertTrue(out.strip().startswith("ok "), out)

    def test_pip_install_of_the_source_directory(self) -> None:
        venv = self.venv("from-tree")
        run([venv / "bin" / "pip", "install", "--no-build-isolation", "--no-index",
             "./client/python"], REPO)
        self.round_trip(venv)

    def test_pip_install_of_an_sdist(self) -> None:
        venv = self.venv("from-sdist")
        dist = self.tmp / "dist"
        run([venv / "bin" / "python", "-c",
             "import sys; from setuptools import build_meta; "
             "print(build_meta.build_sdist(sys.argv[1]))", dist], PACKAGE)
        (sdist,) = dist.glob("dedup-client-*.tar.gz")
        with tarfile.open(sdist) as tar:
            names = {n.split("/", 1)[-1] for n in tar.getnames()}
        self.assertLessEqual(
            {"LICENSE", "proto/dedup/v1/dedup.proto", "proto/dedup/v1/error_details.proto",
             "setup.py", "pyproject.toml", "dedup_client/py.typed"}, names)
        self.assertFalse(any("_stubs" in n for n in names), names)  # generated at build
        run([venv / "bin" / "pip", "install", "--no-build-isolation", "--no-index", sdist],
            self.tmp)
        self.round_trip(venv)


if __name__ == "__main__":
    unittest.main()
