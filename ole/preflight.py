"""Checks made before anything runs or is written: env names and profiles, model and proposer
strings, folders a command will write into.

A mistake found here is a one-line `ValidationError` (exit 2) before a host starts, a run folder
exists or an estimate is printed; `ole evolve --estimate-only` fails on exactly what the real run
would. The CLI and the Python API (`ole.api`) call the same checks.
"""
from __future__ import annotations

import os
from pathlib import Path

from ole.errors import ValidationError


def check_task_names(envs, profile: str | None = None) -> None:
    """Resolve env slugs (and a host profile) before anything runs or is written.

    evogym's own errors carry the did-you-mean; they become `ValidationError`s (exit 2).
    """
    from evogym.pools import profile as lookup_profile
    from evogym.envs import resolve
    from evogym.errors import EvogymError
    try:
        for env in envs:
            resolve(env)
        if profile is not None:
            lookup_profile(profile)
    except EvogymError as exc:
        raise ValidationError(exc.message, hint=exc.hint or "see `evogym envs`") from None


def check_llm_file(flag: str, spec: str | None) -> None:
    """A `scripted:FILE` / `replay:FILE` model string must name an existing file."""
    for prefix in ("scripted:", "replay:"):
        if spec and spec.startswith(prefix) and not Path(spec[len(prefix):]).expanduser().is_file():
            raise ValidationError(f"{flag} {spec}: no file {spec[len(prefix):]}",
                                  hint=f"{prefix.rstrip(':')} mode reads an existing file")


def check_model(flag: str, spec: str | None) -> None:
    """An LLM model string is usable here: a `scripted:`/`replay:` file exists, or (a live litellm
    model) the `llm` extra is installed. Checked before any run starts, so a missing extra is a
    one-line error, not a task that runs without its agent and reports the starting policy's score."""
    if not spec:
        return
    check_llm_file(flag, spec)
    if not spec.startswith(("scripted:", "replay:")):
        from ole.extras import check
        check("llm", f"{flag} {spec} (a live LLM)")


def check_proposer(flag: str, spec: str) -> None:
    """`builtin`, `random`, `tpe` (the `baselines` extra), `scripted:FILE`, `replay:FILE` or a live
    litellm model written as PROVIDER/MODEL. Anything else is refused with the closest name: a typo
    such as `ranom` must not be sent to litellm as a model, fail every proposal, and look like a
    run that found nothing."""
    import difflib
    from evogym.errors import did_you_mean
    from ole.evolves import BUILTIN_PROPOSERS
    from ole.extras import check
    if spec in BUILTIN_PROPOSERS:
        if spec == "tpe":
            check("baselines", f"{flag} tpe")
        return
    if spec.startswith(("scripted:", "replay:")) or "/" in spec.strip("/"):
        check_model(flag, spec)
        return
    close = difflib.get_close_matches(spec, BUILTIN_PROPOSERS, n=1, cutoff=0.6)
    raise ValidationError(f"unknown {flag} `{spec}`",
                          hint=did_you_mean(close) if close else
                          f"one of {', '.join(BUILTIN_PROPOSERS)}, scripted:FILE, replay:FILE, or a live model "
                          "as PROVIDER/MODEL, e.g. openai/gpt-4o-mini")


def check_writable(flag: str, path: str | Path) -> Path:
    """Create `path` (a folder the command will write into) and prove a file can be written there,
    before any task runs: an unwritable --traces-dir must not be found after the task's work is done."""
    import tempfile
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".ole-write-check-"):
            pass
    except OSError as exc:
        raise ValidationError(f"{flag} {folder} is not writable: {exc.strerror or exc}",
                              hint=f"choose a folder you can write, e.g. {flag} ./{folder.name or 'out'}") from None
    return folder


def check_could_write(flag: str, path: str | Path) -> None:
    """`check_writable` without writing anything (`--estimate-only`): the folder, or the nearest
    folder above it that exists, must be a writable folder."""
    folder = Path(path)
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        what = "is not a folder" if probe.exists() and not probe.is_dir() else "is not writable"
        raise ValidationError(f"{flag} {folder} is not writable: {probe} {what}",
                              hint=f"choose a folder you can write, e.g. {flag} ./{folder.name or 'out'}")
