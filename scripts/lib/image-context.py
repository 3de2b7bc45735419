#!/usr/bin/env python3
"""Lays out what the image's build stage sees, without Docker: the files its COPY instructions
take from the build context, minus what the Dockerfile's .dockerignore drops, in a directory
that stands for the stage's WORKDIR. scripts/check-image-context.sh then runs cargo there,
which fails as `docker build` would when a workspace member or a file the build reads is
missing from the stage.

    image-context.py DOCKERFILE OUT_DIR

The context is the repository as a clean clone has it (`git ls-files`, plus untracked files git
does not ignore). The stage is the one whose RUN calls `cargo build`. Only COPY and ADD of local
sources are followed (not `--from=`, not URLs); the ignore patterns follow Docker's rules: Go's
filepath.Match per path segment plus `**`, `!` re-includes, the last matching pattern wins, and a
pattern that matches a directory matches everything below it.
"""

import os
import re
import shutil
import subprocess
import sys


def fail(message):
    sys.exit(f"image-context: {message}")


def instructions(dockerfile_text):
    """(keyword, arguments) per instruction, with `\\` continuations joined and comments dropped."""
    logical, current = [], ""
    for line in dockerfile_text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    if current:
        logical.append(current)
    return [(line.split(None, 1)[0].upper(), (line.split(None, 1) + [""])[1]) for line in logical]


def build_stage(parsed):
    """The instructions of the first stage that runs `cargo build`."""
    stages, stage = [], None
    for keyword, arguments in parsed:
        if keyword == "FROM":
            stage = []
            stages.append(stage)
        elif stage is not None:
            stage.append((keyword, arguments))
    for stage in stages:
        if any(k == "RUN" and "cargo build" in a for k, a in stage):
            return stage
    fail("no stage of the Dockerfile runs `cargo build`")


def segment_regex(segment):
    """Go's filepath.Match for one path segment, as a regex ('*' and '?' stop at '/')."""
    out, i = "", 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = segment.find("]", i + 1)
            if end < 0:
                fail(f"bad pattern segment {segment!r}")
            body = segment[i + 1:end]
            out += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
            i = end
        elif c == "\\" and i + 1 < len(segment):
            i += 1
            out += re.escape(segment[i])
        else:
            out += re.escape(c)
        i += 1
    return out


def ignore_rules(dockerignore_text):
    """(regex, excludes) per pattern line, in order."""
    rules = []
    for line in dockerignore_text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        excludes = not line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        parts = [".*" if part == "**" else segment_regex(part) for part in pattern.split("/")]
        regex = "/".join(parts).replace(".*/", "(?:.*/)?")
        rules.append((re.compile(regex + "$"), excludes))
    return rules


def ignored(path, rules):
    """Docker's MatchesOrParentMatches: a pattern counts if it matches the path or a parent."""
    segments = path.split("/")
    candidates = ["/".join(segments[:n]) for n in range(1, len(segments) + 1)]
    verdict = False
    for regex, excludes in rules:
        if any(regex.match(candidate) for candidate in candidates):
            verdict = excludes
    return verdict


def context_files(root, rules):
    listed = subprocess.run(
        ["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        check=True, capture_output=True).stdout.decode().split("\0")
    return sorted(path for path in listed
                  if path and os.path.isfile(os.path.join(root, path)) and not ignored(path, rules))


def copy_sources(stage, files):
    """(context path, destination relative to the WORKDIR) per file the stage copies."""
    placed, workdir = [], "/"
    for keyword, arguments in stage:
        if keyword == "WORKDIR":
            workdir = os.path.join(workdir, arguments.strip())
        if keyword not in ("COPY", "ADD"):
            continue
        words = arguments.split()
        if any(word.startswith("--from") for word in words):
            continue
        words = [word for word in words if not word.startswith("--")]
        *sources, destination = words
        destination = os.path.join(workdir, destination)
        for source in sources:
            matched = matches(source, files)
            if not matched:
                fail(f"`{keyword} {arguments}`: {source} is not in the build context "
                     "(missing, or dropped by the .dockerignore)")
            placed += [(path, target(source, path, destination, len(sources) > 1))
                       for path in matched]
    return workdir, placed


def matches(source, files):
    """The context files a COPY source names: a file, a directory's files, or a glob's."""
    source = os.path.normpath(source)
    if source == ".":
        return list(files)
    regex = re.compile("/".join(segment_regex(part) for part in source.split("/")) + "$")
    return [path for path in files
            if path == source or path.startswith(source + "/") or regex.match(path)]


def target(source, path, destination, several):
    source = os.path.normpath(source)
    if path.startswith(source + "/"):
        return os.path.join(destination, os.path.relpath(path, source))
    if destination.endswith("/") or several or any(c in source for c in "*?["):
        return os.path.join(destination, os.path.basename(path))
    return destination


def main():
    if len(sys.argv) != 3:
        fail("usage: image-context.py DOCKERFILE OUT_DIR")
    dockerfile, out = sys.argv[1:]
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                          capture_output=True, text=True).stdout.strip()
    ignore_file = dockerfile + ".dockerignore"
    if not os.path.exists(ignore_file):
        ignore_file = os.path.join(root, ".dockerignore")
    rules = ignore_rules(open(ignore_file).read()) if os.path.exists(ignore_file) else []
    stage = build_stage(instructions(open(dockerfile).read()))
    workdir, placed = copy_sources(stage, context_files(root, rules))
    shutil.rmtree(out, ignore_errors=True)
    for path, destination in placed:
        relative = os.path.relpath(destination, workdir)
        if relative.startswith(".."):
            continue  # outside the WORKDIR: not part of what cargo reads
        os.makedirs(os.path.dirname(os.path.join(out, relative)), exist_ok=True)
        shutil.copy2(os.path.join(root, path), os.path.join(out, relative))
    print(f"image-context: {len(placed)} files of the build stage in {out} (WORKDIR {workdir})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
