"""Package metadata and the README as a new user meets them (issue 20); the wheel itself is
tested in `tests/test_packaging.py` (slow)."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

CHECKOUT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
REPRODUCIBILITY_PINS = {"gymnasium": "1.4.0", "mujoco": "3.11.0", "box2d": "2.3.10", "minigrid": "3.2.0",
                        "highway-env": "1.12.1", "gymnasium-robotics": "1.4.2"}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (CHECKOUT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def _requirements() -> list[Requirement]:
    extras = [r for name, reqs in PROJECT["optional-dependencies"].items() for r in reqs]
    return [Requirement(r) for r in PROJECT["dependencies"] + extras]


def test_metadata_has_a_license_file_an_spdx_license_authors_classifiers_and_urls():
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    assert (CHECKOUT / "LICENSE").read_text().startswith("MIT License")
    assert PROJECT["authors"] and PROJECT["urls"] and len(PROJECT["classifiers"]) >= 5
    assert all(url.startswith("https://") for url in PROJECT["urls"].values())


def test_dependencies_are_ranges_and_the_constraints_pin_every_one_inside_its_range():
    pins = _pins()
    for req in _requirements():
        if req.name == "openloopevolve":
            continue
        assert not any(spec.operator == "==" for spec in req.specifier), f"{req} is pinned: use a range"
        assert req.specifier, f"{req} has no range"
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert Version(pins[name]) in req.specifier, f"constraints.txt pins {name}=={pins[name]}, outside {req}"
    for name, version in REPRODUCIBILITY_PINS.items():
        assert pins[name] == version, name


def test_the_dev_extra_references_the_other_extras_and_make_install_uses_the_constraints():
    dev = PROJECT["optional-dependencies"]["dev"]
    others = sorted(set(PROJECT["optional-dependencies"]) - {"dev"})
    own = [Requirement(d) for d in dev if Requirement(d).name == "openloopevolve"]
    assert len(own) == 1 and sorted(own[0].extras) == others
    assert not any(Requirement(d).name in {Requirement(r).name for e in others
                                           for r in PROJECT["optional-dependencies"][e]} for d in dev[1:])
    assert 'pip install -q -c constraints.txt -e ".[llm,dev]"' in (CHECKOUT / "Makefile").read_text()


def test_every_package_data_glob_matches_a_file():
    for package, globs in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        for pattern in globs:
            assert list((CHECKOUT / package).glob(pattern)), f"{package}: {pattern} matches nothing"


def test_the_readme_has_no_link_that_breaks_outside_the_repository():
    text = (CHECKOUT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)", text)
    assert all(t.startswith(("https://", "http://", "#")) for t in targets), targets


def test_help_code_and_readme_name_the_same_default_workload():
    from ole.evolve import DEFAULT_SUITE, Suite
    assert Suite().envs == DEFAULT_SUITE
    helptext = subprocess.run([sys.executable, "-m", "ole.cli", "evolve", "--help"], capture_output=True, text=True,
                              cwd=CHECKOUT, timeout=120).stdout
    assert " ".join(DEFAULT_SUITE) in re.sub(r"\s+", " ", helptext)
    readme = (CHECKOUT / "README.md").read_text()
    paragraph = readme[readme.index("`make evolve` runs the embedded default on"):][:400]
    for env in DEFAULT_SUITE:
        assert env.split("/")[-1] in paragraph, env


def test_the_readme_online_example_is_read_by_its_report_line():
    readme = (CHECKOUT / "README.md").read_text()
    workdirs = re.findall(r"ole agent work --online[^\"]*--workdir \$PWD/(\S+?)\"", readme)
    assert workdirs
    for workdir in workdirs:
        assert re.search(rf"ole report --workdir {re.escape(workdir)}\b", readme), workdir


def test_an_overwritten_evogym_is_refused_before_any_module_imports_it(tmp_path: Path) -> None:
    """`ole`'s own modules import `evogym` when they load; the script checks first, in one line."""
    fake = tmp_path / "evogym"
    fake.mkdir()
    (fake / "__init__.py").write_text('"""Evolution Gym: soft robots."""\nraise ImportError("not the host")\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{CHECKOUT}", "HOME": str(tmp_path)}
    # -S: no site-packages, so the fake shadows ours as an overwrite would (an editable install's
    # finder would otherwise win); the script's entry point is called as the console script calls it
    entry = "from ole.entry import ole_main; import sys; sys.argv = ['ole', 'bundle', 'list']; ole_main()"
    done = subprocess.run([sys.executable, "-S", "-c", entry], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("ole: error: the `evogym` package at") and "reinstall openloopevolve" in lines[0]
    unguarded = subprocess.run([sys.executable, "-S", "-c", "import ole.cli"], env=env, capture_output=True,
                               text=True, timeout=60, cwd=tmp_path)
    assert unguarded.returncode == 1 and "not the host" in unguarded.stderr  # what the check spares the user
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts == {"ole": "ole.entry:ole_main", "evogym": "ole.entry:evogym_main",
                       "evopolicygym-session": "ole.entry:session_main"}
