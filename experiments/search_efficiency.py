"""Search efficiency: the evidence-guided proposer vs random search vs Optuna TPE, at equal cost.

Each proposer drives the same offline engine — same envs, search instances, staged evaluation
(successive halving), population, generations and gate — for several proposer seeds. After
every generation, the search's best finished candidate so far (highest search mean r) is
judged by an **oracle gate** on gate instances no proposer sees: the same gate config and
adaptive sample `make evolve` uses. The oracle's own runs are not charged to the search:
the x-axis is the episodes the search itself spent (champion runs included once). Reported
per proposer and seed: episodes to the first gate-passing candidate, and best gate-passing
mean r against episodes spent (table + PNG).

All searches share one evaluation cache (runs are keyed by bundle hash, task and condition,
so a policy two proposers both find is run once; episode accounting still charges each
search for every run it asked for). The oracle's decisions never reach the proposers.

    nice -n 10 python experiments/search_efficiency.py --out experiments/results/search_efficiency.md
    python experiments/search_efficiency.py --smoke     # 1 env, budget 4, 1 seed (the test)
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.cost import CostCaps, CostMeter  # noqa: E402
from ole.evolve import Engine, EvolveConfig, Suite  # noqa: E402
from ole.evolve.offline import OfflineEvolution  # noqa: E402
from ole.evolve.store import EvaluationStore  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.gate import load_config  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.paired import PairedEvaluation, instance_key  # noqa: E402
from ole.proposers.baselines import RandomProposer, TPEProposer  # noqa: E402
from ole.proposers.builtin import BuiltinProposer  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import TraceArchive  # noqa: E402

PROPOSERS = {"evidence": lambda seed: BuiltinProposer(host="builtin"),
             "random": lambda seed: RandomProposer(host="builtin", seed=seed),
             "tpe": lambda seed: TPEProposer(host="builtin", seed=seed)}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/acrobot,gym/reacher5", help="comma-separated env slugs")
    p.add_argument("--budget", type=int, default=32, help="episode budget per run (quick profile)")
    p.add_argument("--search-pools", type=_ints, default=(101, 102), help="pools the proposers see")
    p.add_argument("--gate-pools", type=_ints, default=(201, 202, 203, 204), help="oracle gate, first look")
    p.add_argument("--gate-extra-pools", type=_ints, default=(205, 206), help="oracle gate, added looks")
    p.add_argument("--population", type=int, default=6, help="candidates per generation")
    p.add_argument("--generations", type=int, default=4, help="generations per search")
    p.add_argument("--eta", type=int, default=3, help="successive-halving rate")
    p.add_argument("--proposers", default="evidence,random,tpe", help="which proposers")
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="proposer seeds")
    p.add_argument("--gate-config", default=None, help="gate YAML (default: ole/gate.yaml)")
    p.add_argument("--workers", type=int, default=2, help="parallel runs")
    p.add_argument("--workdir", default="experiments/out/search_efficiency", help="registries, cache, runs")
    p.add_argument("--fresh", action="store_true", help="delete --workdir first (default: resume)")
    p.add_argument("--out", default=None, help="Markdown report path (PNG and JSON beside it)")
    p.add_argument("--smoke", action="store_true", help="tiny run for the test")
    args = p.parse_args()
    if args.smoke:
        args.envs, args.budget, args.search_pools, args.gate_pools = "gym/acrobot", 4, (101,), (201, 202)
        args.gate_extra_pools, args.population, args.generations, args.seeds = (), 2, 1, (0,)
    return args


def one_search(args, name: str, seed: int, executor, shared: EvaluationStore, work: Path) -> dict:
    """One proposer and seed: the offline search, with the oracle gate after every generation."""
    run_dir = work / f"{name}-s{seed}"
    (run_dir / "bundles").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", run_dir / "bundles" / "coder.yaml")
    reg = Registry(run_dir / "bundles")
    cfg = EvolveConfig(suite=Suite(envs=tuple(args.envs.split(",")), budget=args.budget),
                       search_pools=args.search_pools, gate_pools=args.gate_pools,
                       gate_extra_pools=args.gate_extra_pools, population=args.population, generations=1,
                       eta=args.eta, seed=seed, workers=args.workers)
    gate = load_config(args.gate_config)
    charged: dict[tuple[str, str], int] = {}
    meter = CostMeter(CostCaps(), budget=args.budget, workers=args.workers)
    paired = PairedEvaluation(executor, shared, run_job, traces_root=str(work / "traces"),
                              runs_root=str(work / "runs"))
    engine = Engine(reg, EvaluationStore(run_dir / "steps.sqlite3"), TraceArchive(work / "traces"), paired,
                    PROPOSERS[name](seed), gate, meter, progress=lambda line: None)
    champ = reg.champion()
    evo = OfflineEvolution(engine, cfg, champ.ref, champ.bundle)
    traces = evo.bootstrap()
    for inst in evo.search:
        charged[(champ.bundle.content_hash, instance_key(*inst))] = args.budget
    evidence = engine.evidence(traces, quiet=True)
    retained, points, first_pass = [], [], None
    best_pass = None
    for g in range(1, args.generations + 1):
        new = evo._next_generation(g, retained, evidence)
        finished = evo.cascade(new, g) if new else []
        for c in new:
            for p in c.pairs:
                charged[(c.bundle.content_hash, instance_key(p.task, p.condition))] = p.challenger.episodes
        from ole.evolve.offline import nondominated
        retained = nondominated([*retained, *finished])
        spent = sum(charged.values())
        best = max(retained, key=lambda c: c.stats.mean_r, default=None)
        verdict, gate_r = None, None
        if best is not None:
            d = engine.decide_gate(evo.champ, _fresh(best), evo.gate_looks, evo.seen_keys(traces), stage=f"oracle-g{g}")
            verdict, gate_r = d.verdict, d.stats.mean_r
            if verdict == "release":
                first_pass = first_pass or spent
                best_pass = gate_r if best_pass is None else max(best_pass, gate_r)
        points.append({"generation": g, "episodes": spent, "best": best.ref if best else None,
                       "search_mean_r": best.stats.mean_r if best else None,
                       "oracle_verdict": verdict, "oracle_mean_r": gate_r, "best_passing_mean_r": best_pass})
        print(f"{name} seed {seed} gen {g}: {spent} episodes, best {best.ref if best else '-'} "
              f"-> oracle {verdict} (mean r {gate_r if gate_r is None else round(gate_r, 3)})", flush=True)
    return {"proposer": name, "seed": seed, "points": points, "first_pass_episodes": first_pass}


def _fresh(candidate):
    """The candidate with its search pairs set aside (the oracle gate pairs it on its own instances)."""
    from ole.evolve import Candidate
    return Candidate(candidate.chosen, candidate.proposal)


def write(args, results: list[dict], wall: float) -> str:
    lines = ["# Search efficiency: evidence-guided vs random vs TPE proposers (same engine, same cost)", "",
             "Command: `python experiments/search_efficiency.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Envs {args.envs}; budget {args.budget}; search pools {args.search_pools}; population "
             f"{args.population}, eta {args.eta}, {args.generations} generations; oracle gate pools "
             f"{args.gate_pools} + {args.gate_extra_pools} (default gate config). Wall {wall / 60:.0f} min.", "",
             "| proposer | seed | episodes to first gate-passing candidate | best gate-passing mean r at the end |",
             "|---|---|---|---|"]
    by: dict[str, list] = {}
    for res in results:
        last = res["points"][-1]["best_passing_mean_r"] if res["points"] else None
        lines.append(f"| {res['proposer']} | {res['seed']} | {res['first_pass_episodes'] or 'never'} | "
                     f"{'-' if last is None else f'{last:+.3f}'} |")
        by.setdefault(res["proposer"], []).append(res["first_pass_episodes"])
    lines += ["", "| proposer | median episodes to first gate-passing candidate (never = inf) | searches passing |",
              "|---|---|---|"]
    for name, vals in by.items():
        finite = [v if v is not None else float("inf") for v in vals]
        med = statistics.median(finite)
        lines.append(f"| {name} | {'never' if med == float('inf') else f'{med:.0f}'} | "
                     f"{sum(v is not None for v in vals)}/{len(vals)} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"evidence": "tab:green", "random": "tab:gray", "tpe": "tab:blue"}
    fig, ax = plt.subplots(figsize=(7, 4))
    for res in results:
        xs = [p["episodes"] for p in res["points"]]
        ys = [p["best_passing_mean_r"] if p["best_passing_mean_r"] is not None else 0.0 for p in res["points"]]
        ax.step(xs, ys, where="post", color=colors.get(res["proposer"], "k"), alpha=0.8,
                label=res["proposer"] if res["seed"] == results[0]["seed"] else None)
    ax.set_xlabel("episodes spent by the search")
    ax.set_ylabel("best gate-passing mean r (0 = none yet)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    args = parse()
    work = Path(args.workdir)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    shared = EvaluationStore(work / "evaluations.sqlite3")
    t0, results = time.time(), []
    with LocalExecutor(args.workers) as ex:
        for name in args.proposers.split(","):
            for seed in args.seeds:
                results.append(one_search(args, name, seed, ex, shared, work))
    text = write(args, results, time.time() - t0)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(results, indent=1))
        plot(results, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
