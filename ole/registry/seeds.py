"""Seed bundles: the root's `*.yaml` files, registered as version 1 of their name on first use.

A root file is a seed when it loads, its `name` is its file stem, and it names no parents.
One bad file never stops the registry: it is skipped and reported (the registry's `warnings`,
`ole fsck`). Once a name is registered the registry never re-reads its seed file: an edit
made afterwards is reported, not registered.
"""
from __future__ import annotations

from pathlib import Path

from ole.bundle import Bundle, load_bundle_yaml
from ole.errors import OleError

DEFAULT_BUNDLE = "coder"
"""Seed registered first, hence the champion of every channel until a release activates."""


def seed_files(root: Path) -> tuple[list[tuple[Path, Bundle]], list[str]]:
    """Loadable seeds of `root` (`coder` first, then by file name) and one line per `*.yaml`
    that is not a seed."""
    files = sorted(root.glob("*.yaml"), key=lambda p: (p.stem != DEFAULT_BUNDLE, p.name))
    good, problems = [], []
    for path in files:
        try:
            bundle = load_bundle_yaml(path)
        except (OleError, OSError, UnicodeDecodeError) as exc:
            problems.append(f"seed {path.name} skipped: {exc}")
            continue
        if bundle.name != path.stem:
            problems.append(f"seed {path.name} skipped: it declares name `{bundle.name}` "
                            f"(hint: rename the file to {bundle.name}.yaml or fix its name)")
        elif bundle.provenance.parents:
            problems.append(f"seed {path.name} skipped: a seed has no parents, it names "
                            f"{list(bundle.provenance.parents)} (hint: register children with "
                            "`ole bundle register FILE --parent N`)")
        else:
            good.append((path, bundle))
    return good, problems


def edited_seed(path: Path, name: str) -> str:
    """The problem line of a seed file edited after `name` was registered from it."""
    return (f"seed {path.name} was edited after `{name}` was registered from it: the registry ignores the edit "
            f"(hint: register it as a new version with `ole bundle register {path} --parent 1`, or restore the file)")
