"""A CLI that starts at once: what each command imports (issue "A library people use", item 4).

Timings belong to `experiments/bench_cli_latency.py` (a quiet machine); these tests pin what makes
them: the modules a command loads. Each runs the real entry point in a fresh interpreter and reads
`sys.modules` after it, so a heavy top-level import added anywhere on a command's path fails here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ole.cli import COMMANDS, LIGHT_VERBS, build_parser

PROJECT = Path(__file__).resolve().parents[2]
HEAVY = ("scipy", "networkx", "ole.evolve", "ole.gate", "numpy", "matplotlib", "ole.paired", "evogym.sandbox")
"""Modules the engine needs and `ole --version`/`--help` must never load (the whole engine cost +0.88 s)."""


def loaded_after(argv: list[str], cwd: Path, before: str = "") -> dict:
    """Run `ole ARGV` through `ole.entry` in a fresh interpreter; the modules loaded and the exit status."""
    script = (f"import sys, json\n{before}\nsys.argv = ['ole', *{argv!r}]\nfrom ole.entry import ole_main\n"
              "try:\n    ole_main()\nexcept SystemExit as exc:\n    code = exc.code\n"
              "print(json.dumps({'code': code, 'modules': sorted(sys.modules)}), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["bundle", "--help"], []])
def test_version_and_help_load_none_of_the_engine(argv, tmp_path):
    found = loaded_after(argv, tmp_path)
    assert found["code"] == 0
    heavy = [m for m in found["modules"] if m.split(".")[0] in ("scipy", "networkx", "numpy", "matplotlib")
             or m in HEAVY]
    assert heavy == [], heavy
    if argv[:1] != ["bundle"]:  # the top level reads nothing: not even the records' library
        assert "pydantic" not in found["modules"]


def test_import_ole_loads_no_submodule_until_a_name_is_used(tmp_path):
    script = ("import sys, ole; before = sorted(m for m in sys.modules if m.startswith('ole.'));\n"
              "ole.EvolveSettings; after = sorted(m for m in sys.modules if m.startswith('ole.'));\n"
              "print(before, 'scipy' in sys.modules, 'ole.evolves' in after)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.stdout.strip() == "[] False True", done.stdout + done.stderr


def test_evolve_ls_and_bundle_list_load_no_engine(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    (root / "coder.yaml").write_bytes((PROJECT / "bundles" / "coder.yaml").read_bytes())
    for argv in (["evolve", "ls"], ["bundle", "list"], ["--root", str(root), "evolve", "ls"]):
        found = loaded_after(argv, tmp_path)
        assert found["code"] == 0, argv
        engine = [m for m in found["modules"] if m in ("ole.evolve", "ole.gate", "ole.paired", "scipy")]
        assert engine == [], (argv, engine)


def test_champion_show_loads_no_engine(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    (root / "coder.yaml").write_bytes((PROJECT / "bundles" / "coder.yaml").read_bytes())
    found = loaded_after(["--root", str(root), "champion", "show"], tmp_path)
    assert found["code"] == 0
    assert [m for m in found["modules"] if m in HEAVY or m.split(".")[0] == "scipy"
            if m.split(".")[0] != "networkx"] == []


def test_champion_show_loads_no_graph_library(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    (root / "coder.yaml").write_bytes((PROJECT / "bundles" / "coder.yaml").read_bytes())
    found = loaded_after(["--root", str(root), "champion", "show"], tmp_path)
    assert found["code"] == 0 and "networkx" not in found["modules"]


def test_the_command_table_lists_every_command_with_its_module_and_help():
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)  # the help order is the table's
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert helps == {name: help for name, (_, help) in COMMANDS.items()}
    for name, (module, _) in COMMANDS.items():
        handler = sub.choices[name].get_default("handler")
        parsers = sub.choices[name]._subparsers
        owner = handler.__module__ if handler else parsers._group_actions[0].choices[
            next(iter(parsers._group_actions[0].choices))].get_default("handler").__module__
        assert owner == f"ole.cli.{module}", name
    for (command, verb), function in LIGHT_VERBS.items():
        light = build_parser([command, verb])
        args = light.parse_args([command, verb])
        assert args.handler.__module__ == f"ole.cli.{COMMANDS[command][0]}" and callable(args.handler)


def test_a_lazily_built_parser_parses_as_the_full_one():
    argv = ["--root", "x", "evolve", "--mode", "offline", "--envs", "gym/acrobot,gym/pusher5", "--gate-pools", "201"]
    lazy, full = build_parser(argv).parse_args(argv), build_parser().parse_args(argv)
    assert {k: v for k, v in vars(lazy).items() if k != "help_parser"} == \
        {k: v for k, v in vars(full).items() if k != "help_parser"}
    assert build_parser(["run", "--env", "gym/acrobot"]).parse_args(["run", "--env", "gym/acrobot"]).env == \
        ("gym/acrobot",)


@pytest.mark.heavy
def test_help_texts_name_every_profile_the_root_search_and_no_internal_reference(tmp_path):
    from evogym.pools import PROFILES
    texts = {argv[0] if argv else "ole": subprocess.run(
        [sys.executable, "-m", "ole.cli", *argv, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(PROJECT)}).stdout for argv in
        ([], ["run"], ["evolve"], ["gate"], ["bundle", "register"])}
    flat = {k: " ".join(v.split()) for k, v in texts.items()}
    for command in ("run", "evolve", "gate"):
        assert all(p in flat[command] for p in PROFILES), (command, flat[command])
    assert "per-user root" in flat["ole"] and "OLE_ROOT" in flat["ole"]
    for text in flat.values():
        assert "issue " not in text and "shared/" not in text, text


def test_the_latency_benchmark_runs_with_a_tiny_repeat(tmp_path):
    """experiments/bench_cli_latency.py, smoke-tested (the real numbers come from a quiet machine)."""
    out = tmp_path / "cli_latency.md"
    done = subprocess.run([sys.executable, str(PROJECT / "experiments" / "bench_cli_latency.py"), "--repeats", "1",
                           "--warmup", "0", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == 0, done.stderr[-2000:]
    table = out.read_text()
    for command in ("python -c pass", "ole --version", "ole --help", "ole champion show"):
        assert f"| `{command}` |" in table
    raw = json.loads(out.with_suffix(".json").read_text())
    assert [len(v) for v in raw["walls"].values()] == [1, 1, 1, 1]
