"""How far execution changes alone can take `make evolve`: a lower bound from a measured profile.

Reads the JSON `experiments/evolve_profile.py` wrote (one row per evolve) and bounds, for each
row, the wall time the same work would take if (a) every fixed second of every run were gone
(process and host start, sandbox starts, finalize bookkeeping, storage: the profile's "fixed
cost") and (b) every episode stepped at the speed of the raw in-process loop, with no sandbox
(which the project's isolation rule forbids: this is a bound, not a plan). (b) divides the
stepping time by the measured ours/raw ratio of `experiments/bench_host_overhead.py`; that
ratio is measured on Acrobot, the lightest env, where the per-step hand-off weighs most, so the
true bound for heavier envs is higher than the one printed. Agent compute stays as measured.

    python experiments/evolve_floor.py experiments/results/evolve_same_decision.json --raw-ratio 1.50 --baseline baseline --out experiments/results/evolve_floor.md

The evolve's wall scales with the summed run wall (the profile's worker utilization is 0.99),
so the bound on the evolve is its wall times the bound on the summed run wall.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path, help="a JSON written by experiments/evolve_profile.py")
    p.add_argument("--raw-ratio", type=float, required=True,
                   help="sandboxed stepping over raw in-process stepping (host_overhead_*.md, 'ours / raw')")
    p.add_argument("--baseline", default=None, help="label of the row the others are compared with (the old execution)")
    p.add_argument("--out", type=Path, default=None, help="Markdown report (also printed)")
    return p.parse_args(argv)


def bound(row: dict, raw_ratio: float) -> dict:
    runs = row["runs"]
    wall = sum(r["wall"] for r in runs)
    fixed = sum(r["fixed"] for r in runs)
    agent = sum(r["agent_compute"] for r in runs)
    stepping = wall - fixed - agent
    floor = stepping / raw_ratio + agent
    episodes = int(row["record"]["summary"]["spent"]["episodes"]) if row["record"].get("summary") else None
    evolve_wall = float(row["record"]["wall_s"])
    frac = floor / wall
    return {"label": row["record"]["label"], "runs": len(runs), "episodes": episodes, "evolve_wall": evolve_wall,
            "run_wall": wall, "fixed": fixed, "agent": agent, "stepping": stepping, "floor_run_wall": floor,
            "frac": frac, "floor_evolve": evolve_wall * frac,
            "per_episode": evolve_wall / episodes if episodes else None,
            "floor_per_episode": evolve_wall * frac / episodes if episodes else None}


def render(rows: list[dict], raw_ratio: float, baseline: str | None, command: str) -> str:
    lines = ["# The floor of `make evolve` under execution changes alone", "", "Command:", "", f"    {command}", "",
             f"Stepping divided by the measured ours/raw ratio {raw_ratio:.2f}, every fixed second removed, agent "
             "compute kept (see the script's docstring: a lower bound, not a plan).", "",
             "| row | runs | charged episodes | evolve wall s | Σ run wall s | fixed s | agent compute s | stepping s | "
             "bound Σ run wall s | bound / measured | bound evolve wall s | s per episode | bound s per episode |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b in rows:
        lines.append(f"| {b['label']} | {b['runs']} | {b['episodes']} | {b['evolve_wall']:.1f} | {b['run_wall']:.0f} | "
                     f"{b['fixed']:.0f} | {b['agent']:.0f} | {b['stepping']:.0f} | {b['floor_run_wall']:.0f} | "
                     f"{b['frac']:.3f} | {b['floor_evolve']:.0f} | {_num(b['per_episode'])} | "
                     f"{_num(b['floor_per_episode'])} |")
    base = next((b for b in rows if b["label"] == baseline), None)
    if base is not None and base["per_episode"]:
        lines.append("")
        for b in rows:
            if b is base or not b["floor_per_episode"]:
                continue
            lines.append(f"- **{b['label']} at its bound vs {base['label']} as measured, per charged episode: "
                         f"{b['floor_per_episode'] / base['per_episode']:.3f}** "
                         f"({b['floor_per_episode']:.3f} s vs {base['per_episode']:.3f} s); as measured: "
                         f"{b['per_episode'] / base['per_episode']:.3f}.")
    return "\n".join(lines) + "\n"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    data = json.loads(args.profile.read_text())
    rows = [bound(row, args.raw_ratio) for row in data]
    command = "python experiments/evolve_floor.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(rows, args.raw_ratio, args.baseline, command)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
