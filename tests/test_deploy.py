"""The deployment recipes (Containerfile, deploy/kubernetes, deploy/systemd) and constraints.txt agree with the code
they deploy: every firstfault command they run parses with the real CLI, every probe path is a route the app serves,
every Blueprint config loads and builds its connectors, and the pinned versions satisfy pyproject's ranges. No image
is built here (no container engine is installable on the test machine); these checks are what can be tested."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from firstfault.blueprint.config import load_toml
from firstfault.blueprint.connectors import build_plan
from firstfault.cli import build_parser, main
from firstfault.samples import samples_root

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))


def _documents() -> Iterator[dict[str, Any]]:
    for path in MANIFESTS:
        yield from (d for d in yaml.safe_load_all(path.read_text()) if d)


def _containers() -> Iterator[dict[str, Any]]:
    for doc in _documents():
        if doc["kind"] in ("Deployment", "CronJob"):
            spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else \
                doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            yield from spec["containers"]


def _commands() -> list[list[str]]:
    """Every firstfault command line: container args (the image's entrypoint is firstfault), units' ExecStart,
    and the Containerfile's default CMD."""
    found = [c["args"] for c in _containers()]
    for unit in UNITS:
        start = re.search(r"^ExecStart=(.*)$", unit.read_text(), re.M)
        assert start, f"{unit.name} has no ExecStart"
        argv = shlex.split(start.group(1))
        assert argv[0].endswith("/firstfault"), unit.name
        found.append(argv[1:])
    cmd = re.search(r"^CMD (\[.*\])$", (ROOT / "Containerfile").read_text(), re.M)
    assert cmd
    found.append(json.loads(cmd.group(1)))
    return found


@pytest.mark.parametrize("argv", _commands(), ids=lambda argv: " ".join(argv[:2]))
def test_every_deployed_command_parses_with_the_cli(argv: list[str]) -> None:
    args = build_parser(argv).parse_args(argv)   # argparse exits (SystemExit) on an unknown option
    assert args.command == argv[0]


def test_probes_point_at_routes_the_apps_serve(tmp_path: Path) -> None:
    """Each probe, with the Host header it sends, gets an answer from the app it probes (healthz 200, readyz 200 or
    503) - not a 404, and not the 400 the trusted-hosts check gives a Host that is not allowed."""
    from fastapi.testclient import TestClient

    from firstfault.dashboard.app import create_app as dashboard_app
    from firstfault.service.app import create_app as service_app
    from firstfault.service.settings import Settings

    results = tmp_path / "results.db"
    assert main(["blueprint", "--configs", str(samples_root()), "--quiet", "--no-progress",
                 "--connector", "output", "db", "sqlite", "path", str(results)]) == 0
    apps = {"service": service_app(Settings(host="0.0.0.0", allowed_hosts="localhost")),
            "dashboard": dashboard_app(results, allowed_hosts=["localhost"])}
    probed = 0
    for container in _containers():
        for probe in ("readinessProbe", "livenessProbe"):
            if probe in container:
                get = container[probe]["httpGet"]
                host = next(h["value"] for h in get.get("httpHeaders", []) if h["name"] == "Host")
                with TestClient(apps[container["name"]], base_url=f"http://{host}") as client:
                    answer = client.get(get["path"])
                assert answer.status_code in (200, 503), (container["name"], probe, answer.status_code)
                probed += 1
    assert probed >= 3


def test_the_blueprint_configs_load_and_build_their_connectors(tmp_path: Path) -> None:
    configmap = next(d for d in _documents() if d["kind"] == "ConfigMap" and "blueprint.toml" in d["data"])
    configs = {"configmap": configmap["data"]["blueprint.toml"],
               "systemd": (ROOT / "deploy" / "systemd" / "blueprint.toml").read_text()}
    for name, text in configs.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text.replace("/var/lib/firstfault", str(tmp_path)))
        config, _ = load_toml(path)
        plan = build_plan(config)
        try:
            assert plan.contexts and plan.collectors and plan.outputs, name
            # a template of job output paths needs roots, or nothing is read (issue 14: paths from job accounting)
            for collector in plan.collectors:
                for _, template in getattr(collector, "templates", []):
                    assert collector.roots[template], (name, template)
        finally:
            plan.close()


def test_constraints_pin_every_dependency_inside_pyprojects_ranges() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    for spec in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        req = Requirement(spec)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"constraints.txt does not pin {req.name}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {spec}"
    assert "-c constraints.txt" in (ROOT / "Containerfile").read_text()
    assert "-c constraints.txt" in (ROOT / "scripts" / "lib.sh").read_text()
