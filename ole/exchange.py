"""Moving a bundle between registries: `ole bundle export REF` and `ole bundle import FILE`.

Version numbers are local to a registry (`coder@3` here may be `coder@7` elsewhere), so an
export names the lineage by content hash and carries no version number. It is plain YAML:

    format: ole-bundle-export
    schema_version: '1'
    content_hash: 9f3c…       # sha256 of the bundle's loop policy + applicability
    exported_from: coder@3    # where it came from (informational; never used on import)
    bundle:                   # the bundle, its provenance's parents as content hashes:
      ...                     #   provenance.parents: [], provenance.external_parents: [<sha256>, ...]

Import checks the document and that the bundle hashes to `content_hash` (a file edited after
export is refused), then registers it under its name: each parent hash that names a version
of that name in the target registry becomes a local parent, and a parent that is absent
stays an external parent, so the lineage survives the move and a later export carries it on.
Identical content already registered under the name dedupes to that version.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from ole.bundle import Bundle, check_hash, format_ref, validate_data
from ole.errors import IntegrityError, ValidationError
from ole.yamlio import dump_yaml, read_yaml_file

FORMAT: Final = "ole-bundle-export"
SCHEMA_VERSION: Final = "1"


class ExportedBundle(BaseModel):
    """One bundle as it travels between registries: lineage by content hash, no version numbers."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    format: Literal["ole-bundle-export"] = FORMAT
    """What this document is; a bundle YAML is registered with `ole bundle register` instead."""
    schema_version: Literal["1"] = SCHEMA_VERSION
    """Version of this export format; another value is refused."""
    content_hash: str
    """sha256 of the bundle's loop policy + applicability; import refuses a bundle that hashes otherwise."""
    exported_from: str = ""
    """`NAME@VERSION` in the exporting registry (informational: version numbers are local)."""
    bundle: Bundle
    """The bundle; `provenance.parents` is empty and `provenance.external_parents` names every parent by hash."""


def export_document(registry, ref: str) -> tuple[ExportedBundle, str]:
    """The export of `ref` (`NAME[@VERSION]`) and its YAML text, with a comment header."""
    entry = registry.get(ref)
    prov = entry.bundle.provenance
    hashes = [registry.get(format_ref(entry.name, p)).content_hash for p in prov.parents]
    hashes += [h for h in prov.external_parents if h not in hashes]
    portable = prov.model_copy(update={"parents": (), "external_parents": tuple(hashes)})
    doc = ExportedBundle(content_hash=entry.content_hash, exported_from=entry.ref,
                         bundle=entry.bundle.model_copy(update={"provenance": portable}))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = (f"# {entry.ref} exported by `ole bundle export` at {stamp}.\n"
              "# Version numbers are local to a registry: the lineage is named by content hash.\n"
              "# Register it elsewhere with `ole bundle import FILE` (the content hash is checked).\n")
    return doc, header + dump_yaml(doc.model_dump(mode="json"))


def read_document(path: Path) -> ExportedBundle:
    """Load an export strictly; a plain bundle file gets a hint to `bundle register` it instead."""
    if Path(path).is_dir():  # read as a file it was an internal error (IsADirectoryError)
        raise ValidationError(f"{path} is a folder, not an export file",
                              hint="name the YAML file `ole bundle export` wrote")
    data = read_yaml_file(Path(path))
    if isinstance(data, dict) and "format" not in data and "loop_policy" in data:
        raise ValidationError(f"{path} is a bundle file, not an export",
                              hint="register it with `ole bundle register FILE`")
    doc = validate_data(ExportedBundle, data, source=str(path))
    if doc.bundle.provenance.parents:
        raise ValidationError(f"{path}: provenance.parents {list(doc.bundle.provenance.parents)} are local "
                              "version numbers, which mean nothing in another registry",
                              hint="export with `ole bundle export`, which names parents by content hash")
    if doc.bundle.content_hash != doc.content_hash:
        raise IntegrityError(f"{path}: the bundle hashes to {doc.bundle.content_hash}, but the export says "
                             f"{doc.content_hash}: it was changed after export",
                             hint="export it again from the source registry")
    _refuse_self_parent(doc, str(path))
    return doc


def _refuse_self_parent(doc: ExportedBundle, where: str) -> None:
    """An export naming its own content hash as a parent (a circle in the lineage) is refused."""
    own = {doc.content_hash, doc.bundle.content_hash} & set(doc.bundle.provenance.external_parents)
    if own:
        raise ValidationError(f"{where}: the bundle names its own content hash {own.pop()} as a parent; "
                              "no version is its own ancestor", hint="export it again from the source registry")


def import_document(registry, doc: ExportedBundle, *, source: str, expect_hash: str | None = None):
    """Register an export; returns (the registered version, whether it was already there, the parent
    hashes that stayed external)."""
    if expect_hash is not None:
        check_hash(expect_hash, doc.content_hash)
    _refuse_self_parent(doc, source)
    bundle = doc.bundle
    existing = registry.find_content(bundle.name, bundle.content_hash)
    if existing is not None:
        return existing, True, ()
    local, external = [], []
    for parent in bundle.provenance.external_parents:
        found = registry.find_content(bundle.name, parent)
        if found is not None:
            local.append(found.version)
        else:
            external.append(parent)
    prov = bundle.provenance.model_copy(update={"parents": tuple(local), "external_parents": tuple(external)})
    staged = validate_data(Bundle, bundle.model_copy(update={"provenance": prov}).model_dump(mode="json"),
                           source=source)
    note = f"imported from {Path(source).name} (exported from {doc.exported_from or 'another registry'})"
    return registry.register(staged, note=note), False, tuple(external)



def external_children(registry, entry) -> list:
    """Versions of `entry`'s name that name its content hash as an external parent: exported from a
    registry where `entry` was their parent and imported here before it (importing a child first
    keeps its parent external; the parent arriving later is that parent)."""
    return [v for v in registry.versions(entry.name, skip_damaged=True)
            if entry.content_hash in v.bundle.provenance.external_parents and v.ref != entry.ref]
