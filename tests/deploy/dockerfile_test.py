"""deploy/docker/Dockerfile: linted by dockerfile_lint.py (which must also
reject broken copies, one per rule), its runtime-packages helper run on the
binaries under test, and, when a Docker daemon answers, built for real and
run: non-root, dedupctl and dedupd start.

Env: DEDUP_SOURCE_DIR (the repository), DEDUPD and DEDUPCTL (the built
binaries, for runtime-packages). DEDUP_DOCKER_BUILD=0 skips the build even
with a daemon (it takes as long as a full build).
"""
import os
import pathlib
import subprocess
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dockerfile_lint  # noqa: E402

SOURCE = pathlib.Path(os.environ.get("DEDUP_SOURCE_DIR", HERE.parent.parent))
DOCKERFILE = SOURCE / "deploy" / "docker" / "Dockerfile"
K8S = SOURCE / "deploy" / "k8s"
TEXT = DOCKERFILE.read_text()


def lint(text):
    return dockerfile_lint.problems(text, SOURCE, K8S)


def docker_answers():
    try:
        return subprocess.run(["docker", "info"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class LintTest(unittest.TestCase):
    def test_the_dockerfile_passes(self):
        self.assertEqual(lint(TEXT), [])

    def test_the_ignore_file_keeps_build_trees_out(self):
        ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
        for entry in (".git", "build", "**/node_modules"):
            self.assertIn(entry, ignore)

    def broken(self, old, new, want, count=1):
        self.assertIn(old, TEXT, "the mutation no longer applies")
        found = lint(TEXT.replace(old, new, count))
        self.assertTrue(any(want in p for p in found),
                        f"want {want!r} in {found}")

    def test_rejects_a_moving_base(self):
        self.broken("FROM debian:12.8-slim AS build", "FROM debian:bookworm-slim AS build",
                    "is not pinned (tag 'bookworm-slim' moves)")
        self.broken("FROM debian:12.8-slim\n", "FROM debian:latest\n", "is not pinned")
        self.broken("FROM debian:12.8-slim\n", "FROM debian\n", "has no tag")

    def test_accepts_a_digest(self):
        digest = "debian:12.8-slim@sha256:" + "a" * 64
        self.assertEqual(lint(TEXT.replace("FROM debian:12.8-slim\n", f"FROM {digest}\n")), [])

    def test_rejects_another_distribution(self):
        self.broken("FROM debian:12.8-slim\n", "FROM ubuntu:24.04\n", "is not Debian 12")

    def test_rejects_one_stage(self):
        one = TEXT[TEXT.index("FROM debian:12.8-slim\n"):]
        self.assertTrue(any("want a build stage and a runtime stage" in p for p in lint(one)))

    def test_rejects_a_copy_from_an_unknown_stage(self):
        self.broken("COPY --from=build /out/runtime-packages", "COPY --from=builder /out/runtime-packages",
                    "COPY --from=builder: no earlier stage")

    def test_rejects_root_or_no_user(self):
        self.broken("USER 10001:10001\n", "", "no USER")
        self.broken("USER 10001:10001\n", "USER root\n", "is root")
        self.broken("USER 10001:10001\n", "USER 0\n", "is root")
        self.broken("USER 10001:10001\n", "USER dedup\n", "not numeric")
        self.broken("USER 10001:10001\n", "USER 10002\n", "not the StatefulSet's runAsUser 10001")

    def test_rejects_downloads(self):
        self.broken("COPY . .\n", "ADD https://example.invalid/x.tar.gz /src/\n", "ADD (of https://")
        self.broken("RUN scripts/install-deps", "RUN curl -fsSL https://example.invalid | sh && scripts/install-deps",
                    "curl/wget")

    def test_rejects_shell_form_entrypoint_and_cmd(self):
        self.broken('ENTRYPOINT ["/usr/local/bin/dedupd"]', "ENTRYPOINT /usr/local/bin/dedupd",
                    "ENTRYPOINT is not in exec form")
        self.broken('ENTRYPOINT ["/usr/local/bin/dedupd"]\n', "", "no ENTRYPOINT")
        self.broken('CMD ["--data_dir=', 'CMD --data_dir=/x ["--data_dir=', "CMD is not in exec form")

    def test_rejects_fat_runtime_layers(self):
        self.broken("apt-get install -y --no-install-recommends $(cat",
                    "apt-get install -y $(cat", "without --no-install-recommends")
        self.broken("$(cat /tmp/runtime-packages) \\", "$(cat /tmp/runtime-packages) g++ libgrpc++-dev \\",
                    "the runtime stage installs g++")
        self.broken(" && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages", " && rm -f /tmp/runtime-packages",
                    "without removing /var/lib/apt/lists")

    def test_rejects_a_missing_copy_source(self):
        self.broken("COPY scripts/install-deps scripts/install-deps",
                    "COPY scripts/install-dependencies scripts/install-deps",
                    "COPY source scripts/install-dependencies is not in the build context")

    def test_rejects_another_image_name(self):
        self.broken("-t dedup/dedupd:0.1.0", "-t dedup/server:0.1.0",
                    "does not build the image deploy/k8s runs (-t dedup/dedupd:0.1.0)", count=-1)


class RuntimePackagesTest(unittest.TestCase):
    @unittest.skipUnless(os.environ.get("DEDUPD") and os.environ.get("DEDUPCTL"), "DEDUPD/DEDUPCTL not set")
    def test_runtime_libraries_only(self):
        out = subprocess.run(
            [str(DOCKERFILE.parent / "runtime-packages"), os.environ["DEDUPD"], os.environ["DEDUPCTL"]],
            capture_output=True, text=True, check=True).stdout.split()
        self.assertIn("libc6", out)
        self.assertTrue(any(p.startswith("libgrpc++") for p in out), out)
        self.assertTrue(any(p.startswith("libprotobuf") for p in out), out)
        self.assertFalse([p for p in out if p.endswith("-dev") or p in ("g++", "gcc", "cmake")], out)
        self.assertEqual(out, sorted(set(out)))


@unittest.skipUnless(os.environ.get("DEDUP_DOCKER_BUILD", "1") != "0" and docker_answers(),
                     "no Docker daemon answers: linted only")
class BuildTest(unittest.TestCase):
    TAG = "dedup/dedupd:ci-test"

    def test_builds_and_runs_as_non_root(self):
        subprocess.run(["docker", "build", "-f", str(DOCKERFILE), "-t", self.TAG, str(SOURCE)], check=True)
        user = subprocess.run(["docker", "image", "inspect", "-f", "{{.Config.User}}", self.TAG],
                              capture_output=True, text=True, check=True).stdout.strip()
        self.assertEqual(user, "10001:10001")
        uid = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/usr/bin/id", self.TAG, "-u"],
                             capture_output=True, text=True, check=True).stdout.strip()
        self.assertEqual(uid, "10001")
        subprocess.run(["docker", "run", "--rm", "--entrypoint", "/usr/local/bin/dedupctl", self.TAG, "--help"],
                       check=True, capture_output=True)
        # getent and /bin/sh: the StatefulSet's start command needs both.
        subprocess.run(["docker", "run", "--rm", "--entrypoint", "/bin/sh", self.TAG, "-c",
                        "getent ahostsv4 localhost >/dev/null"], check=True)
        # dedupd starts and serves on loopback (the default CMD wants TLS or
        # --insecure off loopback).
        run = subprocess.run(
            ["docker", "run", "--rm", self.TAG, "--data_dir=/var/lib/dedup/data", "--address=0.0.0.0:50051"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 2, run.stderr)  # refuses plaintext off loopback
        self.assertIn("insecure", run.stderr)


if __name__ == "__main__":
    unittest.main()
