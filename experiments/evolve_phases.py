"""Where an evolve's wall time went, phase by phase, read from its progress log.

`ole evolve` prints one line per finished run, ending in `[spent N episodes, M min]` (the evolve's own
clock), and a header line when a phase starts (`generation 1/2`, `gate: coder@30 …`, `transfer: …`).
This prints the evolve clock at every phase start and the minutes and runs of each phase, as Markdown:

    ole evolve --mode offline 2>&1 | tee evolve.log
    python experiments/evolve_phases.py evolve.log [--total-s SECONDS]

`--total-s`: the evolve's measured wall time (e.g. from `date` around it), for the last phase's end;
without it the last phase ends at its last run's clock.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

CLOCK = re.compile(r"\[spent (\d+) episodes, ([\d.]+) min\]")
PHASES = (
    (re.compile(r"^archive is empty for (\S+): bootstrapping"), "bootstrap ({0} on the search instances)"),
    (re.compile(r"^generation (\d+)/(\d+): proposing"), "search generation {0} of {1}"),
    (re.compile(r"^  registered \S+ \(offline_mutation of \S+\): ablation of (\S+):"), "ablation of {0}"),
    (re.compile(r"^gate: (\S+) \(([^)]*)\) vs (\S+)"), "gate {0} ({1}) vs {2}"),
    (re.compile(r"^  transfer: (\S+) vs (\S+) on (.*)"), "transfer sample of {0} ({2})"),
)


def phases(lines: list[str]) -> list[tuple[str, float, int]]:
    """(phase, minute it started on the evolve clock, runs finished in it), in log order."""
    out: list[tuple[str, float, int]] = []
    clock, runs = 0.0, 0
    for line in lines:
        m = CLOCK.search(line)
        if m:
            clock = float(m.group(2))
            runs += 1
            continue
        for pattern, name in PHASES:
            h = pattern.search(line)
            if h:
                label = name.format(*h.groups())
                if not out or out[-1][0] != label:
                    out.append((label, clock, runs))
                break
    out.append(("end", clock, runs))
    return out


def table(found: list[tuple[str, float, int]], total_min: float | None) -> str:
    rows = ["| phase | starts at min | min | runs |", "|---|---|---|---|"]
    if total_min is not None:
        found = [*found[:-1], ("end", total_min, found[-1][2])]
    for (name, start, runs), (_, end, runs_end) in zip(found, found[1:]):
        rows.append(f"| {name} | {start:.1f} | {end - start:.1f} | {runs_end - runs} |")
    rows.append(f"| total | | {found[-1][1]:.1f} | {found[-1][2]} |")
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", type=Path, help="the evolve's progress log")
    p.add_argument("--total-s", type=float, default=None, help="the evolve's measured wall time in seconds")
    args = p.parse_args()
    lines = args.log.read_text(errors="replace").splitlines()
    print(table(phases(lines), None if args.total_s is None else args.total_s / 60.0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
