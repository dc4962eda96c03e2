"""`ole bundle validate|register|show|diff|list|export|import`.

`show` prints valid YAML (its header lines are comments), `export` writes a bundle with its
lineage named by content hash for `import` into another registry (`ole.exchange`).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ole.cli.common import Output, inline, leaf, next_command, noun, open_registry, table
from ole.errors import Conflict, OleError, ValidationError

if TYPE_CHECKING:
    from ole.bundle import Bundle
    from ole.registry import Event, RegisteredBundle, Registry


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole bundle ...`."""
    from ole.bundle import EDGES
    verbs = noun(subparsers, "bundle", "validate, register and inspect bundles")
    p = leaf(verbs, "validate", validate, "check bundle YAML files strictly (writes nothing)")
    p.add_argument("files", nargs="+", metavar="FILE")
    p = leaf(verbs, "register", register_file, "register a bundle file as the next version of its name")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--parent", action="append", default=[], metavar="VERSION",
                   help="parent version of the same name (`2` or `coder@2`); twice for a recombination; required "
                        "once the name has versions (or --no-parent)")
    p.add_argument("--no-parent", action="store_true",
                   help="start a new lineage root under a name that already has versions (no parent on purpose)")
    p.add_argument("--edge", choices=EDGES,
                   help="how it was derived (default: manual, or recombination with two parents); "
                        "specialization: its applicability is strictly narrower than the parent's")
    p.add_argument("--evidence", action="append", default=[], metavar="ID", help="supporting evidence id")
    p.add_argument("--note", default="", help="why it was registered (recorded in the event)")
    p.add_argument("--expect-hash", metavar="SHA256",
                   help="fail unless the content hash is this, or starts with it (e.g. the 12 digits `list` prints)")
    p = leaf(verbs, "show", show, "show one version: status, provenance, events (as YAML comments), then its YAML")
    p.add_argument("ref", metavar="NAME[@VERSION]")
    p = leaf(verbs, "diff", diff, "per-component differences between two versions, or a version and a draft file")
    p.add_argument("a", metavar="NAME@VERSION|FILE", help="a registered version, or a bundle YAML file (a draft)")
    p.add_argument("b", metavar="NAME@VERSION|FILE", help="a registered version, or a bundle YAML file (a draft)")
    p = leaf(verbs, "list", list_bundles, "list registered versions")
    p.add_argument("name", nargs="?", metavar="NAME")
    p = leaf(verbs, "export", export, "write a version as YAML for another registry (lineage by content hash)")
    p.add_argument("ref", metavar="NAME[@VERSION]")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: print it)")
    p = leaf(verbs, "import", import_file, "register an exported bundle here (hash checked, lineage kept)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--expect-hash", metavar="SHA256", help="fail unless the content hash is this, or starts with it")


def _parent_version(text: str, name: str) -> int:
    """`--parent 2` or `--parent coder@2` -> 2; the name, when given, must be the file's own."""
    from ole.bundle import format_ref, parse_ref
    if text.strip().isdigit() and int(text) >= 1:
        return int(text)
    try:
        given, version = parse_ref(text)
    except OleError:
        given, version = None, None
    if version is None:
        raise ValidationError(f"--parent {text!r} is not a version",
                              hint=f"give a number such as 2, or {name}@2 "
                                   "(parents are earlier versions of the same name)")
    if given != name:
        raise ValidationError(f"--parent {text} names bundle `{given}`, but the file is bundle `{name}`",
                              hint=f"parents are earlier versions of the same name, e.g. {format_ref(name, version)}")
    return version


def validate(args: argparse.Namespace) -> Output:
    """Validate each FILE and list every error; exit 2 if any is invalid. Nothing is written."""
    from ole.bundle import load_bundle_yaml
    results, lines = [], []
    for file in args.files:
        try:
            bundle = load_bundle_yaml(Path(file))
        except OleError as exc:
            errors = list(getattr(exc, "details", ()) or [exc.message])
            results.append({"file": file, "ok": False, "error": str(exc), "errors": errors})
            lines.append(f"invalid  {file}: {len(errors)} error{'s' if len(errors) > 1 else ''}"
                         + (f" (hint: {exc.hint})" if exc.hint else ""))
            lines += [f"  - {e}" for e in errors]
            continue
        results.append({"file": file, "ok": True, "name": bundle.name, "content_hash": bundle.content_hash})
        lines.append(f"ok       {file}  ({bundle.name}, content {bundle.content_hash[:12]})")
    failed = any(not r["ok"] for r in results)
    return Output(results, "\n".join(lines), 2 if failed else 0)


def register_file(args: argparse.Namespace) -> Output:
    """Register FILE (stamping --parent/--edge/--evidence); identical content dedupes.

    Once a name has versions, a new one needs its parent (`--parent N`), or `--no-parent` to start a
    second lineage root on purpose: without either, a forgotten --parent silently split the lineage.
    The first version of an empty registry becomes its champion without a gate, and says so."""
    from ole.bundle import check_hash, load_bundle_yaml
    bundle = load_bundle_yaml(Path(args.file))
    if args.expect_hash is not None:
        check_hash(args.expect_hash, bundle.content_hash, what="--expect-hash")
    args.parent = [_parent_version(p, bundle.name) for p in args.parent]
    if args.no_parent and (args.parent or bundle.provenance.parents):
        raise ValidationError("--no-parent contradicts the parents given", hint="drop --no-parent or the parents")
    with open_registry(args) as registry:
        existing = registry.find_content(bundle.name, bundle.content_hash)
        if existing is not None:
            _same_provenance(existing, args, bundle)
        else:
            _needs_parent(registry, bundle, args)
        first = not registry.names()
        entry = existing or registry.register(bundle, parents=args.parent, edge=args.edge,
                                              evidence_ids=args.evidence, note=args.note)
    data = {"ref": entry.ref, "status": entry.status, "content_hash": entry.content_hash,
            "deduplicated": existing is not None, "first_version": first}
    if existing:
        text = f"identical content is already registered as {entry.ref} ({entry.status}); nothing recorded"
    else:
        text = (f"registered {entry.ref} ({entry.status}, content {entry.content_hash[:12]})\n"
                + (first_champion(entry.ref) if first else
                   f"next: {next_command(args, 'gate', entry.ref)} (then `ole release` it, bounded by that evidence)"))
    return Output(data, text)


def first_champion(ref: str) -> str:
    """The line that says an empty registry's first version became its champion without a gate."""
    return (f"note: {ref} is the first version of this registry, so it is the champion of channel `default` for "
            "every task without any gate (register or import your seed first to gate this one against it)")


def _needs_parent(registry: Registry, bundle: Bundle, args: argparse.Namespace) -> None:
    """A name with versions takes a new one only with its parent, or with --no-parent."""
    if args.parent or bundle.provenance.parents or args.no_parent or bundle.name not in registry.names():
        return
    latest = registry.get(bundle.name).version
    raise ValidationError(f"`{bundle.name}` already has versions 1–{latest}, and no parent was given: this would start "
                          "a second lineage root", hint=f"pass --parent {latest} (or the version you edited), or "
                          "--no-parent to start a new root on purpose")


def _same_provenance(existing: RegisteredBundle, args: argparse.Namespace, bundle: Bundle | None = None) -> None:
    """Identical content dedupes to the existing version, but never against flags, or parents the
    file itself names, that contradict it (a file claiming parents [99] was "already registered")."""
    prov = existing.bundle.provenance
    claimed = bundle.provenance.parents if bundle is not None else ()
    if claimed and tuple(claimed) != prov.parents:
        raise Conflict(f"identical content is already registered as {existing.ref} with parents "
                       f"{list(prov.parents)}, but the file names parents {list(claimed)}",
                       hint=f"the file is {existing.ref}: drop its provenance.parents, or register other content")
    if args.parent and tuple(args.parent) != prov.parents:
        raise Conflict(f"identical content is already registered as {existing.ref} with parents "
                       f"{list(prov.parents)}, not --parent {args.parent}",
                       hint=f"drop --parent: the file is {existing.ref}")
    if args.edge and args.edge != prov.edge:
        raise Conflict(f"identical content is already registered as {existing.ref} with edge {prov.edge!r}, "
                       f"not --edge {args.edge}", hint=f"drop --edge: the file is {existing.ref}")


def show(args: argparse.Namespace) -> Output:
    """Show one version (latest when VERSION is omitted) with its events."""
    from ole.bundle import dump_bundle_yaml, format_ref
    with open_registry(args) as registry:
        entry = registry.get(args.ref)
        events = [e for e in registry.events(name=entry.name)  # incl. rollbacks/activations away from it
                  if e.version == entry.version or e.payload.get("from") == entry.ref]
    prov = entry.bundle.provenance
    data = entry.model_dump(mode="json")
    data["events"] = [e.model_dump(mode="json") for e in events]
    parents = ", ".join([format_ref(entry.name, p) for p in prov.parents]
                        + [f"external {h[:12]}" for h in prov.external_parents]) or "none (seed)"
    header = [f"{entry.ref}  [{entry.status}]  content {entry.content_hash[:12]}",
              f"registered {entry.registered_at:%Y-%m-%d %H:%M:%S}Z  parents {parents}  edge {prov.edge or '-'}"
              f"  mode {prov.mode}  proposer {prov.proposer}",
              f"scope {entry.bundle.applicability.scope_key}  evidence {', '.join(prov.evidence_ids) or '-'}",
              "events:", *(f"  #{e.seq} {e.ts:%Y-%m-%d %H:%M:%S} {e.kind}"
                           f"{' ' + e.ref if e.version != entry.version else ''}"
                           f"{' on ' + e.channel if e.channel else ''}"
                           f"{_scope_note(e)}"
                           f"{': ' + inline(e.payload['reason']) if e.payload.get('reason') else ''}" for e in events),
              f"parents are version numbers of this registry; to share it: ole bundle export {entry.ref}"]
    # the header is YAML comments, so the whole output loads as the bundle (`> file.yaml` works)
    lines = ["# " + line for line in header] + ["---", dump_bundle_yaml(entry.bundle).rstrip()]
    return Output(data, "\n".join(lines))


def _scope_note(event: Event) -> str:
    from ole.bundle import GENERAL_SCOPE
    scope = event.payload.get("scope") if event.kind != "registration" else None
    return f" scope {scope}" if scope and scope != GENERAL_SCOPE else ""


def diff(args: argparse.Namespace) -> Output:
    """Per-component field changes from A to B (provenance excluded); A or B may be a bundle YAML file
    not registered yet (a draft: compare it with the version it was edited from before registering it)."""
    from ole.bundle import diff_bundles
    with open_registry(args) as registry:
        (a_ref, a), (b_ref, b) = _side(registry, args.a), _side(registry, args.b)
    changes = diff_bundles(a, b)
    data = {"a": a_ref, "b": b_ref, "changes": [c.model_dump(mode="json") for c in changes]}
    if not changes:
        return Output(data, f"{a_ref} and {b_ref} have the same loop policy and applicability")
    rows = [["component", "field", a_ref, b_ref]] + [[c.component, c.field, repr(c.old), repr(c.new)] for c in changes]
    return Output(data, table(rows))


def _side(registry: Registry, text: str) -> tuple[str, Bundle]:
    """(label, bundle) of one side of a diff: an existing file is a draft bundle, anything else a version."""
    from ole.bundle import load_bundle_yaml
    path = Path(text)
    if os.path.lexists(path) or text.endswith((".yaml", ".yml")):
        return str(path), load_bundle_yaml(path)
    entry = registry.get(text)
    return entry.ref, entry.bundle


def list_bundles(args: argparse.Namespace) -> Output:
    """All registered versions (of NAME, or of every name)."""
    from ole.bundle import parse_ref
    with open_registry(args) as registry:
        names = [args.name] if args.name else registry.names()
        entries = [e for name in names for e in registry.versions(name, skip_damaged=True)]
        damaged = {ref: why for ref, why in registry.damaged().items() if parse_ref(ref)[0] in names}
    data = [{"ref": e.ref, "status": e.status, "parents": list(e.bundle.provenance.parents),
             "external_parents": list(e.bundle.provenance.external_parents),
             "edge": e.bundle.provenance.edge, "scope": e.bundle.applicability.scope_key,
             "content_hash": e.content_hash, "registered_at": e.registered_at.isoformat()} for e in entries]
    data += [{"ref": ref, "status": "damaged", "damage": why} for ref, why in damaged.items()]
    rows = [["version", "status", "edge", "parents", "scope", "registered (UTC)", "content"]]
    rows += [[e.ref, e.status, e.bundle.provenance.edge or "seed",
              ",".join([*map(str, e.bundle.provenance.parents),
                        *(f"ext:{h[:8]}" for h in e.bundle.provenance.external_parents)]) or "-",
              e.bundle.applicability.scope_key,
              f"{e.registered_at:%Y-%m-%d %H:%M:%S}", e.content_hash[:12]] for e in entries]
    rows += [[ref, "DAMAGED", why, "-", "-", "-", "see `ole fsck`"] for ref, why in damaged.items()]
    if len(rows) == 1:
        return Output(data, f"no bundle is registered in {registry.root} "
                            "(hint: `ole bundle register FILE` or `ole bundle import FILE`)")
    return Output(data, table(rows))


def export(args: argparse.Namespace) -> Output:
    """Write the version as an export document: plain YAML, parents named by content hash."""
    from ole.exchange import export_document
    with open_registry(args) as registry:
        doc, text = export_document(registry, args.ref)
    data = {"ref": doc.exported_from, "content_hash": doc.content_hash,
            "parents": list(doc.bundle.provenance.external_parents), "file": args.output}
    if args.output is None:
        return Output({**data, "yaml": text}, text.rstrip())
    out = Path(args.output)
    if out.is_dir():
        raise ValidationError(f"-o {out} is a directory", hint=f"name a file, e.g. {out / (doc.bundle.name + '.yaml')}")
    if os.path.lexists(out) and (out.is_symlink() or not out.is_file()):
        # the file is replaced by a rename: a link, a device or a pipe there would be replaced, not written
        raise ValidationError(f"-o {out} exists and is not a regular file", hint="name a new or a regular file")
    try:
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        raise ValidationError(f"cannot write {out}: {exc.strerror or exc}", hint="choose a writable path") from None
    return Output(data, f"exported {doc.exported_from} (content {doc.content_hash[:12]}) to {out}\n"
                        f"next: ole --root OTHER bundle import {out}")


def import_file(args: argparse.Namespace) -> Output:
    """Register an export here: hash verified, parents matched by content hash, absent ones kept external.

    Says when the import is the first version of an empty registry (it becomes the champion without a
    gate) and which versions imported before it name its content as their external parent."""
    from ole.bundle import format_ref
    from ole.exchange import external_children, import_document, read_document
    doc = read_document(Path(args.file))
    with open_registry(args) as registry:
        first = not registry.names()
        entry, existed, external = import_document(registry, doc, source=args.file, expect_hash=args.expect_hash)
        children = [] if existed else external_children(registry, entry)
    prov = entry.bundle.provenance
    data = {"ref": entry.ref, "status": entry.status, "content_hash": entry.content_hash, "deduplicated": existed,
            "parents": list(prov.parents), "external_parents": list(external), "first_version": first and not existed,
            "children": [c.ref for c in children]}
    if existed:
        return Output(data, f"identical content is already registered as {entry.ref} ({entry.status}); "
                            "nothing recorded")
    lineage = ", ".join([format_ref(entry.name, p) for p in prov.parents] + [f"external {h[:12]}" for h in external])
    lines = [f"imported {entry.ref} (content {entry.content_hash[:12]}, verified; parents {lineage or 'none'})"]
    lines += [f"{c.ref}, imported before it, names it as a parent (external {entry.content_hash[:12]})"
              for c in children]
    lines.append(first_champion(entry.ref) if first else
                 f"next: {next_command(args, 'gate', entry.ref)} (then `ole release` it, bounded by that evidence)")
    return Output(data, "\n".join(lines))
