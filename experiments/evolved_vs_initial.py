"""Evolved vs initial: offline evolution, then the result paired against the seed bundle on unseen tasks.

1. Offline evolution (built-in agent and proposer) on the search pools, final gate on the
   gate pools — exactly `ole evolve --mode offline` with the flags below.
2. The released champion (or, if the gate released nothing, the gate's candidate, and the
   report says so) is paired with the initial bundle `coder@1` on evaluation pools used
   neither in search nor in the gate: mean r with its bootstrap interval (the gate's alpha
   percentiles, labelled with their two-sided level: 80% at alpha 0.1), per-env table.
3. The lineage picture and every gate record are written next to the report.

    nice -n 10 python experiments/evolved_vs_initial.py --out experiments/results/evolved_vs_initial.md

Run names (trace ids) encode env, bundle, seed and time; everything lives under --workdir.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.evolve import EvolveConfig, Suite, open_engine  # noqa: E402
from ole.evolve.offline import OfflineEvolution  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.gate import GateConfig, ci_text, compute_stats, load_config  # noqa: E402
from ole.lineage import Lineage  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.proposers.builtin import BuiltinProposer  # noqa: E402
from ole.registry import Registry  # noqa: E402


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/acrobot,gym/pusher5,gymnasium/MiniGrid-FourRooms-v0", help="env slugs")
    p.add_argument("--budget", type=int, default=32, help="episode budget per run")
    p.add_argument("--search-pools", type=_ints, default=(101, 102), help="pools the proposer sees")
    p.add_argument("--gate-pools", type=_ints, default=(201, 202, 203), help="pools of the final gate")
    p.add_argument("--eval-pools", type=_ints, default=(301, 302, 303, 304), help="pools of this comparison")
    p.add_argument("--population", type=int, default=4, help="candidates per generation")
    p.add_argument("--generations", type=int, default=2, help="generations")
    p.add_argument("--seed", type=int, default=0, help="proposer seed")
    p.add_argument("--workers", type=int, default=2, help="parallel runs")
    p.add_argument("--workdir", default="experiments/out/evolved_vs_initial", help="registry, store, runs, traces")
    p.add_argument("--fresh", action="store_true", help="delete --workdir first (default: resume)")
    p.add_argument("--out", default=None, help="Markdown report path (lineage PNG written beside it)")
    return p.parse_args()


def setup(args) -> tuple[Registry, EvolveConfig, Path]:
    work = Path(args.workdir)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    (work / "bundles").mkdir(parents=True, exist_ok=True)
    if not (work / "bundles" / "coder.yaml").exists():
        shutil.copy(ROOT / "bundles" / "coder.yaml", work / "bundles" / "coder.yaml")
    cfg = EvolveConfig(suite=Suite(envs=tuple(args.envs.split(",")), budget=args.budget),
                       search_pools=args.search_pools, gate_pools=args.gate_pools, population=args.population,
                       generations=args.generations, seed=args.seed, workers=args.workers)
    overlap = set(args.eval_pools) & (set(args.search_pools) | set(args.gate_pools))
    if overlap:
        raise SystemExit(f"--eval-pools {sorted(overlap)} were used in search or gate; pick unused pools")
    return Registry(work / "bundles"), cfg, work


def main() -> None:
    args = parse()
    reg, cfg, work = setup(args)
    t0 = time.time()
    with LocalExecutor(cfg.workers) as ex:
        engine = open_engine(registry=reg, workdir=work, traces_root=work / "traces", cfg=cfg, evaluate=run_job,
                             proposer=BuiltinProposer(), gate=load_config(), executor=ex,
                             progress=lambda line: print(line, flush=True))
        initial = reg.get("coder@1")
        report = OfflineEvolution(engine, cfg, initial.ref, initial.bundle).run()
        if report.decision is not None and report.decision.verdict == "release":
            reg.activate_pending(cfg.channel)
        evolved_ref = reg.champion().ref if reg.champion().ref != initial.ref else report.final
        evolved = reg.get(evolved_ref) if evolved_ref else None
        pairs = []
        if evolved is not None:
            instances = cfg.suite.instances(args.eval_pools, cfg.agent_seeds)
            print(f"comparison: {evolved.ref} vs {initial.ref} on {len(instances)} unseen instances", flush=True)
            pairs = engine.paired.pairs((initial.ref, initial.bundle), [(evolved.ref, evolved.bundle)],
                                        instances)[evolved.ref]
    write(args, reg, report, evolved, pairs, time.time() - t0)


def write(args, reg, report, evolved, pairs, wall) -> None:
    lines = ["# Evolved vs initial bundle (offline mode, built-in agent and proposer)", "",
             "Command: `python experiments/evolved_vs_initial.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Envs {args.envs}; budget {args.budget} episodes per run; search pools {args.search_pools}, "
             f"gate pools {args.gate_pools}, comparison pools {args.eval_pools} (disjoint). "
             f"Wall time {wall / 60:.1f} min.", ""]
    d = report.decision
    lines.append(f"Offline run: {len(report.candidates)} candidates registered, retained "
                 f"{', '.join(report.retained) or 'none'}; final gate on `{report.final}`: "
                 f"**{d.verdict if d else 'not reached'}**" + (f" ({'; '.join(d.reasons)})" if d else ""))
    lines.append("")
    if evolved is None:
        lines.append("No candidate reached the gate, so there is nothing to compare.")
    else:
        released = reg.champion().ref == evolved.ref
        s = compute_stats(pairs, GateConfig(bootstrap_resamples=4000))
        lines += [f"Compared: `{evolved.ref}` ({'released champion' if released else 'NOT released; the gate candidate'})"
                  f" vs initial `coder@1` on {s.n_pairs} unseen pairs.", "",
                  f"**mean r = {s.mean_r:+.4f}, bootstrap {ci_text(s, 4)}, "
                  f"win rate {s.win_rate:.2f}, worst r {s.worst_r:+.4f}.**", "",
                  "| env | pairs | q initial (mean) | q evolved (mean) | mean r |", "|---|---|---|---|---|"]
        for env in args.envs.split(","):
            ps = [p for p in pairs if p.task.env == env]
            qi = [p.champion.q for p in ps if p.champion.q is not None]
            qe = [p.challenger.q for p in ps if p.challenger.q is not None]
            lines.append(f"| {env} | {len(ps)} | {_mean(qi)} | {_mean(qe)} | {sum(p.r for p in ps) / len(ps):+.4f} |")
        diff = [f"`{c.component}.{c.field}`: {c.old!r} -> {c.new!r}"
                for c in Lineage.from_registry(reg).diff("coder@1", evolved.ref)]
        lines += ["", "Changes from coder@1: " + ("; ".join(diff) or "none"), ""]
    lines += ["Gate records (registry `gate_decision` events):", ""]
    for e in reg.events(kind="gate_decision"):
        st = e.payload["stats"]
        lines.append(f"- #{e.seq} `{e.ref}` vs `{e.payload['champion']}`: {e.payload['verdict']} — {st['n_pairs']} pairs, "
                     f"mean r {st['mean_r']:+.4f}, p {st['p_value']:.3f}; {'; '.join(e.payload['reasons'])}")
    if args.out:
        png = Path(args.out).with_suffix(".lineage.png")
        Lineage.from_registry(reg).write_png(png)
        lines += ["", f"Lineage: `{png.name}` (next to this file).", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def _mean(values) -> str:
    return f"{sum(values) / len(values):.2f}" if values else "-"


if __name__ == "__main__":
    main()
