"""The package's version has one source (dedup_client.__version__, which
pyproject.toml reads) and the package carries its PEP 561 marker.
tests/python/package checks both on an installed package."""

from __future__ import annotations

import re
import tomllib
import unittest
from pathlib import Path

import dedup_client

PACKAGE_DIR = Path(dedup_client.__file__).resolve().parent
PYPROJECT = PACKAGE_DIR.parent / "pyproject.toml"


class PackageMetadataTest(unittest.TestCase):
    def test_version_is_exported_and_is_the_distributions(self) -> None:
        self.assertRegex(dedup_client.__version__, r"^\d+\.\d+\.\d+")
        self.assertIn("__version__", dedup_client.__all__)
        meta = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
        self.assertNotIn("version", meta["project"])  # no second copy
        self.assertIn("version", meta["project"]["dynamic"])
        self.assertEqual(meta["tool"]["setuptools"]["dynamic"]["version"],
                         {"attr": "dedup_client.__version__"})
        # setuptools reads the version statically: a plain assignment.
        init = (PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8")
        self.assertRegex(init, re.compile(r'^__version__ = "[^"]+"$', re.M))

    def test_py_typed_is_shipped(self) -> None:
        self.assertTrue((PACKAGE_DIR / "py.typed").is_file())
        meta = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
        self.assertIn("py.typed", meta["tool"]["setuptools"]["package-data"]["dedup_client"])


if __name__ == "__main__":
    unittest.main()
