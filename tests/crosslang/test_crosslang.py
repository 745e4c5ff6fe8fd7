"""One result convention across languages (issue 16): an outcome one
language's idempotency helper records replays through the other two.

One real dedupd (temp data dir, free port). Each peer - C++ RunOnce
(crosslang_peer), TypeScript withIdempotency (peer.mjs, the built
client/typescript/dist) and Python with_idempotency (peer.py) - stores a
nested JSON success and an error under its own keys, all with the same args
(so the three args hashes must agree, or the replays answer CONFLICT); then
each replays the other two's keys and checks the value (by its RFC 8785
form), the error's name and message (and code), and that its function did
not run. Every peer prints one "ok <check>" line per check; the test
requires exactly the expected set.

Environment (tests/crosslang/CMakeLists.txt sets it): DEDUPD, CROSSLANG_CPP_PEER,
NODE, NPM, DEDUP_TS_DIR (client/typescript), PYTHONPATH for dedup_client.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "integration"))
from dedupd_process import Dedupd  # noqa: E402  (the Python suite's launcher)

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases.json"
ORIGINS = ("cpp", "python", "typescript")
PEER_TIMEOUT_S = 30


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"set {name} (tests/crosslang/CMakeLists.txt does)")
    return value


def _newest_mtime(paths: list[Path]) -> float:
    newest = 0.0
    for path in paths:
        files = path.rglob("*") if path.is_dir() else [path]
        for file in files:
            newest = max(newest, file.stat().st_mtime)
    return newest


def ensure_ts_dist(ts_dir: Path, npm: str) -> Path:
    """client/typescript/dist/src/index.js, built (`npm run build`) when it
    is missing or older than its sources. CTest runs this test under the
    TypeScript tests' RESOURCE_LOCK, so no other test writes dist meanwhile."""
    index = ts_dir / "dist" / "src" / "index.js"
    sources = [ts_dir / "src", ts_dir / "package.json", ts_dir / "tsconfig.json",
               HERE.parent.parent / "proto" / "dedup" / "v1" / "dedup.proto"]
    if not index.exists() or index.stat().st_mtime < _newest_mtime(sources):
        build = subprocess.run([npm, "run", "build"], cwd=ts_dir, capture_output=True,
                               text=True, timeout=120,
                               env={**os.environ, "npm_config_update_notifier": "false"})
        if build.returncode != 0:
            raise RuntimeError(f"npm run build failed:\n{build.stdout}\n{build.stderr}")
    return index


class CrossLanguageReplayTest(unittest.TestCase):
    def test_each_language_replays_the_others(self) -> None:
        ts_index = ensure_ts_dist(Path(_env("DEDUP_TS_DIR")), _env("NPM"))
        _env("DEDUPD")  # read by Dedupd
        server = Dedupd()
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0, "dedupd exit code"))
        peers = {
            "cpp": [_env("CROSSLANG_CPP_PEER")],
            "python": [sys.executable, str(HERE / "peer.py")],
            "typescript": [_env("NODE"), str(HERE / "peer.mjs")],
        }
        env = {**os.environ, "DEDUP_TS_CLIENT": str(ts_index)}

        def run(origin: str, mode: str, expected: set[str]) -> None:
            with self.subTest(peer=origin, mode=mode):
                done = subprocess.run([*peers[origin], server.target, str(CASES), mode],
                                      capture_output=True, text=True, env=env,
                                      timeout=PEER_TIMEOUT_S)
                report = f"{origin} {mode} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
                passed = {line[3:] for line in done.stdout.splitlines() if line.startswith("ok ")}
                self.assertEqual(done.returncode, 0, report)
                self.assertEqual(passed, expected, report)

        # Every store first: a replay of a key nobody stored would run fn.
        for origin in ORIGINS:
            run(origin, "store", {f"{origin}:success stored", f"{origin}:error stored"})
        for origin in ORIGINS:
            expected = {f"{other}:{kind} replayed" for other in ORIGINS if other != origin
                        for kind in ("success", "error")}
            if origin == "cpp":  # PermanentErrorJson writes TypeScript's exact bytes.
                expected.add("typescript:error bytes")
            run(origin, "replay", expected)


if __name__ == "__main__":
    unittest.main()
