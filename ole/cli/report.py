"""`ole report`: a static HTML report of the registry and the evolve workdirs.

    ole report                                  # registry + runs/evolve-* -> runs/report/index.html
    ole report --workdir runs/evolve-offline --out /tmp/r
    ole report --serve                          # also serve it on http://127.0.0.1:PORT

The pages open from disk (no server, no network). Paths are relative to the current
directory, like the `runs/` and `traces/` that `ole evolve` writes.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ole.cli.common import Output, leaf, open_registry
from ole.errors import ValidationError

DEFAULT_WORKDIRS = ("runs/evolve-offline", "runs/evolve-online")
"""What `ole evolve` writes by default (`--workdir` of each mode); those that exist are read."""
GATE_WORKDIRS = "runs/gate"
"""Where `ole gate` keeps one workdir per gate by default; each one found is read too."""
DEFAULT_OUT = "runs/report"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole report`."""
    p = leaf(subparsers, "report", report, "write a static HTML report: lineage, gate decisions, runs",
             description=__doc__)
    p.add_argument("--workdir", action="append", default=None, metavar="DIR",
                   help=f"evolve or gate workdir to read (repeatable; default: those of "
                        f"{', '.join(DEFAULT_WORKDIRS)} that exist, and every {GATE_WORKDIRS}/*)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--serve", action="store_true", help="then serve the folder on loopback until Ctrl-C")
    p.add_argument("--port", type=int, default=0, help="port for --serve (default: any free port)")


def _workdirs(given: list[str] | None) -> list[Path]:
    if given is None:
        gates = sorted(p for p in Path(GATE_WORKDIRS).glob("*") if (p / "evaluations.sqlite3").is_file())
        return [Path(d) for d in DEFAULT_WORKDIRS if Path(d).is_dir()] + gates
    for d in given:
        if not Path(d).is_dir():
            raise ValidationError(f"--workdir {d} is not a directory",
                                  hint="pass the --workdir that `ole evolve` used (default runs/evolve-offline)")
    return [Path(d) for d in given]


def _check_out(out: Path, port: int) -> None:
    """Before anything is read: the output folder must be one this user can write (a report asked for
    in a read-only folder was an internal PermissionError after the registry was read)."""
    from ole.cli.common import check_writable
    if out.exists() and not out.is_dir():
        raise ValidationError(f"--out {out} exists and is not a folder", hint="pass a folder path")
    if not 0 <= port <= 65535:
        raise ValidationError(f"--port {port} is out of range", hint="0 picks a free port")
    check_writable("--out", out)


def report(args: argparse.Namespace) -> Output:
    """Write the report; with --serve, keep serving it until interrupted."""
    from ole.report import build_report
    workdirs = _workdirs(args.workdir)
    out = Path(args.out)
    _check_out(out, args.port)
    with open_registry(args) as registry:
        data, pages = build_report(registry, workdirs, out, warnings=getattr(registry, "warnings", ()))
    index = pages[0].resolve()
    summary = {"index": str(index), "pages": len(pages), "versions": len(data.versions), "gates": len(data.gates),
               "runs": len(data.curves), "workdirs": [str(w) for w in workdirs]}
    text = (f"wrote {len(pages)} pages ({len(data.versions)} versions, {len(data.gates)} gate decisions, "
            f"{len(data.curves)} runs) to {out}/\nopen {index.as_uri()}")
    if not workdirs:
        text += ("\n(no evolve workdir found: run curves are empty; pass --workdir DIR. The runs of `ole run` are "
                 "not evolve runs: `ole trace ls` lists them)")
    if args.serve:
        _serve(out, args.port, text)
    return Output(summary, text)


def _serve(out: Path, port: int, text: str) -> None:
    from ole.report.serve import ReportServer
    try:
        server = ReportServer(out, port).start()
    except OSError as exc:
        raise ValidationError(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}",
                              hint="pick another --port, or 0 for a free one") from None
    print(f"{text}\nserving {server.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
