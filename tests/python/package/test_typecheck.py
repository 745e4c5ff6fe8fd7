"""A user's `mypy --strict` run against the INSTALLED dedup_client: the
package is installed into a venv (as test_install.py does), then
typed_user.py, a program that uses it as the README shows, type-checks with
no error (py.typed, the generated .pyi stubs, dedup_client.RpcError and
StatusCode instead of grpc's untyped names) and runs against dedupd with
DEDUP_ADDRESS. A misuse of the API is an error, so the check can fail.

Needs Debian's mypy (scripts/install-deps --test)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from dedupd_process import Dedupd  # noqa: E402
from test_install import PACKAGE, REPO, SYSTEM_PYTHON, clean_env, run  # noqa: E402

USER_FILE = Path(__file__).with_name("typed_user.py")
MYPY = shutil.which("mypy") or "/usr/bin/mypy"


class TypecheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        if not os.access(MYPY, os.X_OK):
            raise AssertionError("mypy not found: run scripts/install-deps --test (Debian package mypy)")
        tmp = tempfile.TemporaryDirectory(prefix="dedup-typecheck-")
        cls.addClassCleanup(tmp.cleanup)
        cls.tmp = Path(tmp.name)
        cls.venv = cls.tmp / "venv"
        run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", cls.venv], cls.tmp)
        run([cls.venv / "bin" / "pip", "install", "--no-build-isolation", "--no-index",
             PACKAGE], REPO)
        cls.user = cls.tmp / "user"
        cls.user.mkdir()

    def mypy(self, source: str) -> subprocess.CompletedProcess[str]:
        (self.user / "user.py").write_text(source, encoding="utf-8")
        env = clean_env()
        env.pop("MYPYPATH", None)
        return subprocess.run(
            [MYPY, "--strict", "--no-incremental", "--cache-dir", str(self.tmp / "cache"),
             "--python-executable", str(self.venv / "bin" / "python"), "user.py"],
            cwd=self.user, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=300)

    def test_a_users_program_passes_mypy_strict(self) -> None:
        checked = self.mypy(USER_FILE.read_text(encoding="utf-8"))
        self.assertEqual(checked.returncode, 0, checked.stdout)
        self.assertIn("Success: no issues found", checked.stdout)

    def test_a_misuse_is_a_type_error(self) -> None:
        source = USER_FILE.read_text(encoding="utf-8")
        checked = self.mypy(source + "\nclient.begin(1, 'k')\nOutcome.SUCCESS.nonexistent\n")
        self.assertNotEqual(checked.returncode, 0, checked.stdout)
        self.assertIn('Argument 1 to "begin" of "Client" has incompatible type "int"',
                      checked.stdout)
        self.assertIn('"Outcome" has no attribute "nonexistent"', checked.stdout)

    def test_the_installed_metadata_names_the_project_urls(self) -> None:
        out = run([self.venv / "bin" / "python", "-c",
                   "import importlib.metadata as m; "
                   "print('\\n'.join(m.metadata('dedup-client').get_all('Project-URL')))"],
                  self.user)
        urls = dict(line.split(", ", 1) for line in out.strip().splitlines())
        self.assertEqual(set(urls), {"Homepage", "Documentation", "Repository", "Issues"}, out)
        self.assertTrue(all(u.startswith("https://") for u in urls.values()), out)

    def test_the_program_runs_against_dedupd_from_the_environment(self) -> None:
        server = Dedupd()
        self.addCleanup(server.stop)
        env = clean_env()
        env["DEDUP_ADDRESS"] = f"127.0.0.1:1,{server.target}"
        done = subprocess.run([str(self.venv / "bin" / "python"), str(USER_FILE)],
                              cwd=self.user, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertEqual(done.stdout.split()[1:],
                         ["STARTED", "OK", "SUCCESS", "100", "True", "INVALID_ARGUMENT", "found"])


if __name__ == "__main__":
    unittest.main()
