#!/usr/bin/env python3
"""A small Dockerfile checker for deploy/docker/Dockerfile (hadolint is not a
Debian package): the rules that matter for this image.

- multi-stage: a build stage and a runtime stage, every COPY --from naming
  an earlier stage;
- pinned bases: every external FROM names a version (a tag with a digit,
  never `latest` or a bare codename, which move) or a digest, and is
  Debian 12 (bookworm);
- no ADD of URLs and no curl/wget: nothing is downloaded but Debian
  packages;
- apt-get install with --no-install-recommends, and the lists removed in
  the same RUN;
- the runtime stage installs no compiler or -dev package;
- USER in the final stage, numeric and not root (Kubernetes' runAsNonRoot
  can only verify a number), before ENTRYPOINT, and the uid the StatefulSet
  runs as;
- ENTRYPOINT and CMD in exec form (JSON arrays: signals reach dedupd, not
  a shell);
- every COPY source exists in the build context (the repository root);
- the image name and tag the header documents are the ones deploy/k8s
  references.

Usage: dockerfile_lint.py DOCKERFILE CONTEXT_DIR [K8S_DIR]
Prints one problem a line; exits 1 when there is any.
"""
import json
import pathlib
import re
import sys


def instructions(text):
    """(line number, INSTRUCTION, arguments) with continuations joined."""
    out = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((start, keyword.upper(), args.strip()))
    return out


def stages(parsed):
    """Lists of instructions per stage, each beginning with its FROM."""
    result = []
    for item in parsed:
        if item[1] == "FROM":
            result.append([item])
        elif result:
            result[-1].append(item)
    return result


def stage_name(from_args):
    found = re.search(r"\s+AS\s+(\S+)\s*$", from_args, re.IGNORECASE)
    return found.group(1) if found else None


def base_image(from_args):
    words = [w for w in from_args.split() if not w.startswith("--")]
    return words[0] if words else ""


def pinned_problem(image):
    if "@sha256:" in image:
        if not re.search(r"@sha256:[0-9a-f]{64}$", image):
            return f"base {image}: malformed digest"
        return None
    repo, _, tag = image.rpartition(":")
    if not repo or "/" in tag:
        return f"base {image} has no tag: pin a version or a digest"
    if tag == "latest" or not re.search(r"\d", tag):
        return f"base {image} is not pinned (tag '{tag}' moves): pin a version or a digest"
    return None


def debian_bookworm(image):
    name = image.split("@")[0]
    return re.match(r"^(docker\.io/)?(library/)?debian:(12(\.\d+)?|bookworm)[-\w.]*$", name)


def json_array(args):
    try:
        value = json.loads(args)
    except ValueError:
        return False
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def run_problems(number, args, runtime):
    problems = []
    if re.search(r"\b(curl|wget)\b", args):
        problems.append(f"line {number}: RUN downloads with curl/wget: only Debian packages")
    for install in re.finditer(r"apt-get\s+install\b([^&;|]*)", args):
        flags = install.group(1)
        if "--no-install-recommends" not in flags:
            problems.append(f"line {number}: apt-get install without --no-install-recommends")
        if runtime:
            for package in flags.split():
                if re.search(r"(-dev$|^g\+\+|^gcc|^clang|^build-essential$|^cmake$)", package):
                    problems.append(f"line {number}: the runtime stage installs {package}")
    if re.search(r"apt-get\s+update", args) and "rm -rf /var/lib/apt/lists" not in args:
        problems.append(f"line {number}: apt-get update without removing /var/lib/apt/lists in the same RUN")
    return problems


def copy_problems(number, args, names, context):
    problems = []
    words = args.split()
    from_stage = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
    paths = [w for w in words if not w.startswith("--")]
    if json_array(args):
        paths = json.loads(args)
    sources = paths[:-1]
    if from_stage is not None:
        if from_stage not in names:
            problems.append(f"line {number}: COPY --from={from_stage}: no earlier stage of that name")
        return problems
    for source in sources:
        if re.match(r"^[a-z]+://", source):
            problems.append(f"line {number}: COPY of a URL")
        elif not (context / source).exists() and not any(context.glob(source)):
            problems.append(f"line {number}: COPY source {source} is not in the build context")
    return problems


def user_problems(final, run_as_user):
    users = [(n, a) for n, k, a in final if k == "USER"]
    if not users:
        return ["the final stage has no USER: it would run as root"]
    number, user = users[-1]
    uid = user.split(":")[0]
    problems = []
    if uid in ("root", "0"):
        problems.append(f"line {number}: USER {user} is root")
    elif not uid.isdigit():
        problems.append(f"line {number}: USER {user} is not numeric (runAsNonRoot cannot verify a name)")
    elif run_as_user is not None and int(uid) != run_as_user:
        problems.append(f"line {number}: USER {uid} is not the StatefulSet's runAsUser {run_as_user}")
    entry = [n for n, k, _ in final if k == "ENTRYPOINT"]
    if entry and entry[-1] < number:
        problems.append(f"line {number}: USER comes after ENTRYPOINT")
    return problems


def k8s_expectations(k8s_dir):
    """(image name, tag, runAsUser) that deploy/k8s expects, from its text."""
    if k8s_dir is None:
        return None, None, None
    kustomization = (k8s_dir / "kustomization.yaml").read_text()
    name = re.search(r"-\s*name:\s*(\S+)", kustomization.split("images:", 1)[1]).group(1)
    tag = re.search(r"newTag:\s*\"?([^\"\s]+)", kustomization).group(1)
    statefulset = (k8s_dir / "statefulset.yaml").read_text()
    run_as = re.search(r"runAsUser:\s*(\d+)", statefulset)
    return name, tag, int(run_as.group(1)) if run_as else None


def problems(text, context, k8s_dir=None):
    parsed = instructions(text)
    result = []
    all_stages = stages(parsed)
    if len(all_stages) < 2:
        result.append(f"{len(all_stages)} stage(s): want a build stage and a runtime stage")
    image, tag, run_as_user = k8s_expectations(k8s_dir)
    names = []
    for index, stage in enumerate(all_stages):
        number, _, from_args = stage[0]
        base = base_image(from_args)
        runtime = index == len(all_stages) - 1
        if base not in names:
            if (p := pinned_problem(base)) is not None:
                result.append(f"line {number}: {p}")
            if not debian_bookworm(base):
                result.append(f"line {number}: base {base} is not Debian 12 (bookworm)")
        for n, keyword, args in stage[1:]:
            if keyword == "ADD":
                result.append(f"line {n}: ADD (of {args.split()[0] if args else ''}): use COPY, download nothing")
            elif keyword == "RUN":
                result.extend(run_problems(n, args, runtime))
            elif keyword == "COPY":
                result.extend(copy_problems(n, args, names, context))
        if (name := stage_name(from_args)) is not None:
            names.append(name)
    if not all_stages:
        return result + ["no FROM"]
    final = all_stages[-1]
    if stage_name(final[0][2]) is not None and stage_name(final[0][2]) in [
        stage_name(s[0][2]) for s in all_stages[:-1]
    ]:
        result.append("the final stage reuses a build stage's name")
    result.extend(user_problems(final, run_as_user))
    for keyword in ("ENTRYPOINT", "CMD"):
        found = [(n, a) for n, k, a in final if k == keyword]
        if keyword == "ENTRYPOINT" and not found:
            result.append("the final stage has no ENTRYPOINT")
        for n, args in found:
            if not json_array(args):
                result.append(f"line {n}: {keyword} is not in exec form (a JSON array)")
    if image is not None:
        want = f"-t {image}:{tag}"
        if want not in text:
            result.append(f"the header does not build the image deploy/k8s runs ({want})")
    return result


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    dockerfile = pathlib.Path(argv[0])
    context = pathlib.Path(argv[1])
    k8s_dir = pathlib.Path(argv[2]) if len(argv) == 3 else None
    found = problems(dockerfile.read_text(), context, k8s_dir)
    for p in found:
        print(f"{dockerfile}: {p}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
