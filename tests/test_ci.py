"""CI installs what the lock names and runs what the README says: the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not a pin: {line!r}"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block, "the README opens with a bash block of its two commands"
    commands = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(commands) == 2, commands
    run = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert run[-1] == commands[1]
    assert "-c .ci/constraints.txt" in commands[1]


def test_the_lock_pins_every_requirement_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in .ci/constraints.txt (bash .ci/lock)"
        assert req.specifier.contains(pins[name], prereleases=True), (spec, pins[name])


def test_the_lock_keeps_clear_of_known_conflicts() -> None:
    pins = _pins()
    for line in (ROOT / ".ci" / "known-conflicts.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            assert req.specifier.contains(pins[canonicalize_name(req.name)]), line
