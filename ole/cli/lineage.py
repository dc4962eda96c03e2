"""`ole lineage show`."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ole.cli.common import Output, leaf, noun, open_registry
from ole.errors import ValidationError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole lineage ...`."""
    from ole.registry.lineage import FORMATS
    verbs = noun(subparsers, "lineage", "the version graph of bundles")
    p = leaf(verbs, "show", show, "draw the lineage as a tree, JSON, Graphviz dot or Mermaid")
    p.add_argument("name", nargs="?", metavar="NAME", help="only this bundle name (default: all)")
    p.add_argument("--format", choices=FORMATS, default="tree")
    p.add_argument("--png", metavar="FILE", help="also draw it to a PNG file")


def show(args: argparse.Namespace) -> Output:
    """Render the lineage; --json is the same as --format json."""
    if args.png and not Path(args.png).resolve().parent.is_dir():
        raise ValidationError(f"cannot write {args.png}: folder {Path(args.png).parent} does not exist",
                              hint="create the folder first, or pass another --png path")
    from ole.registry.lineage import Lineage
    with open_registry(args) as registry:
        lineage = Lineage.from_registry(registry)
    text = lineage.render("json" if args.json else args.format, args.name)
    if args.png:
        lineage.write_png(args.png, args.name)
    data = json.loads(lineage.render("json", args.name))
    if args.png:
        text += f"\nwrote {args.png}"
    return Output(data, text)
