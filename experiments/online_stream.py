"""Does a live stream get better because of OLE? The built-in agent through `evogym suite run` with
`ole agent work --online`, from the seed bundle in a fresh registry, beside the same stream with
the seed fixed.

1. **Online stream.** `--batches` suite runs, each over every env of `--envs` (workload envs and
   envs never used offline) at one budget of `--budgets` (alternating) on a fresh pool seed
   (`--pool-base` + batch), `--jobs` tasks at a time, every task worked by
   `ole agent work --online` (built-in agent): each task takes the channel's champion (or, in a
   canary's scope, the canary or its control) at its boundary; every `--every-k` finished tasks
   a challenger is gated on `--gate-envs` x `--gate-pools` at `--gate-budgets`; releases are
   staged and judged by the anytime-valid monitor (`ole/gate.yaml`, `analysis`).
2. **Fixed stream.** The identical tasks (env, profile, budget, pool seed, agent seed) worked by
   the seed bundle. A task the online stream also gave to the seed is the same run (same
   bundle, task and agent seed: deterministic), so it is taken from the online stream; every
   other task is run; `--check-identical N` reruns N of the reused ones to show they are equal.
3. **Paired comparison** per task: r of the online stream's score against the fixed stream's;
   mean r with a 90 % percentile-bootstrap interval (two-sided, labelled), per family and env.
   Also: releases, stages (canary, promotions, rollbacks), and episodes spent on the stream's
   own tasks vs on evaluation (gate runs and control reruns).
4. **Injected harm** (`--harm`): a second fresh stream where, after `--inject-after` batches, a
   harmful child of the champion (`budget.wall_time_s` 0.001: the agent stops before its first
   submit) is released by hand, staged on every task, and the stream goes on for
   `--harm-batches` batches in all (default: one batch after the injection); reported: tasks
   until rollback, tasks harmed.

    nice -n 10 python experiments/online_stream.py --out experiments/results/online_stream.md
    python experiments/online_stream.py --smoke --workdir /tmp/os --out /tmp/os.md      # the test
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from intervals import ci90  # noqa: E402  (experiments/, the script's own folder)

from ole.chosen import ChosenVersion  # noqa: E402
from ole.evolve.store import EvaluationStore  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.paired import PairedEvaluation, RunResult, env_family, eval_key, make_pair  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import RunCondition, TaskSpec  # noqa: E402

HARM_WALL_S = 0.001
EXTERNAL_MAX_PER_SUBMIT = 3
"""Harm streams on external tasks run the suite with this per-submit cap (off the quick profile's), so
`ole agent work --online` records their tasks as `external`: OLE cannot rerun them."""
"""The injected release's budget.wall_time_s: the agent stops before its first submit."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/halfcheetah5,gym/pusher5,gym/continuouscar,gym/acrobot,gym/reacher5,"
                   "gymnasium/MiniGrid-FourRooms-v0", help="stream envs (workload and never used offline)")
    p.add_argument("--budgets", default="32,128", help="episode budgets, alternating over the batches")
    p.add_argument("--batches", type=int, default=4, help="suite runs; the stream has batches x envs tasks")
    p.add_argument("--pool-base", type=int, default=1100, help="batch b uses pool seed pool-base + b (fresh)")
    p.add_argument("--jobs", type=int, default=2, help="suite tasks in parallel")
    p.add_argument("--every-k", type=int, default=6, help="a proposal round every k finished stream tasks")
    p.add_argument("--gate-envs", default="gym/halfcheetah5,gym/pusher5,gym/continuouscar", help="gate envs")
    p.add_argument("--gate-pools", default="201,202", help="gate pool seeds (never a stream pool)")
    p.add_argument("--gate-budgets", default="32,128", help="budgets of every gate instance")
    p.add_argument("--gate-on", default="stream", choices=("stream", "pools"),
                   help="where a round's challenger is gated: the stream's next tasks (its own runs the champion "
                        "side) or the gate pools (`ole agent work --gate-on`)")
    p.add_argument("--gate-config", default=None, help="gate YAML (default ole/gate.yaml, incl. its analysis)")
    p.add_argument("--harm", action="store_true", help="also run the injected-harm stream")
    p.add_argument("--inject-after", type=int, default=1, help="batches before the harmful release")
    p.add_argument("--harm-batches", type=int, default=None,
                   help="batches of the harm stream (default: --inject-after + 1, one batch under the harmful "
                        "canary: what is measured is the tasks until its rollback)")
    p.add_argument("--harm-variants", default="staged,unstaged,staged-external,unstaged-external",
                   help="harm streams: staged|unstaged, each optionally -external (tasks OLE cannot rerun)")
    p.add_argument("--harm-envs", default=None, help="envs of the harm streams (default: --envs)")
    p.add_argument("--harm-only", action="store_true", help="only the harm streams (report: --out)")
    p.add_argument("--check-identical", type=int, default=2, help="reused fixed-stream tasks rerun as a check")
    p.add_argument("--workers", type=int, default=2, help="parallel runs of the fixed stream")
    p.add_argument("--isolation", default="bwrap", choices=("bwrap", "none"))
    p.add_argument("--workdir", default="experiments/out/online_stream", help="registries, streams, runs")
    p.add_argument("--fresh", action="store_true", help="delete --workdir first (default: resume finished phases)")
    p.add_argument("--out", default=None, help="Markdown report path (JSON beside it)")
    p.add_argument("--start-root", default=None,
                   help="start the online stream from a copy of this registry root (e.g. the one a fresh `make evolve` "
                        "left: offline then online) instead of a fresh seed registry; the fixed stream stays the seed")
    p.add_argument("--smoke", action="store_true", help="tiny run for the test")
    args = p.parse_args()
    if args.smoke:
        args.envs, args.budgets, args.batches, args.every_k = "gym/acrobot,gym/reacher5", "2,4", 2, 2
        args.gate_envs, args.gate_pools, args.gate_budgets, args.jobs = "gym/acrobot", "201,202", "2,4", 1
        args.check_identical, args.workers = 1, 1
        args.harm_variants = "staged,unstaged"  # external tasks need budgets above the per-submit cap
    return args


def fresh_registry(base: Path, start: str | None = None) -> Path:
    """The stream's registry: the seed alone, or (first call) a copy of the registry root `start`."""
    root = base / "bundles"
    if start is not None and not root.exists():
        shutil.copytree(Path(start).resolve(), root)
    root.mkdir(parents=True, exist_ok=True)
    if start is None:
        shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    Registry(root).close()
    return root


def start_lines(args, rows: list[dict]) -> list[str]:
    """What the starting registry (`--start-root`) would have served each stream task without online
    evolution: its releases, and the tasks it routes to something other than the seed (offline only)."""
    if args.start_root is None:
        return []
    from ole.registry.scopes import context_for
    with Registry(Path(args.start_root).resolve()) as reg:
        scopes = [(c.scope, c.active) for c in reg.scope_champions() if c.active]
        routed = [reg.select("default", context_for(TaskSpec.model_validate(r["task"]),
                                                    RunCondition.model_validate(r["condition"])), activate=False).ref
                  for r in rows]
    moved = sum(ref != "coder@1" for ref in routed)
    return [f"Starting registry: a copy of `{args.start_root}` (offline evolution first), serving "
            + "; ".join(f"`{s}` {a}" for s, a in scopes) + f". Offline only (that registry routing each stream task "
            f"at its boundary, no online evolution): {moved} of {len(rows)} tasks get a bundle other than the seed "
            f"({', '.join(sorted(set(routed)))}).", ""]


def agent(args, root: Path, work: Path) -> str:
    gate = ["--gate-config", str(Path(args.gate_config).resolve())] if args.gate_config else []
    return " ".join([sys.executable, "-m", "ole.cli", "--root", str(root), "agent", "work", "--online",
                     "--every-k", str(args.every_k), "--workdir", str(work), "--gate-envs", args.gate_envs,
                     "--gate-pools", args.gate_pools, "--gate-budgets", args.gate_budgets,
                     "--gate-on", args.gate_on, "--isolation", args.isolation, *gate])


def batch(args, b: int) -> tuple[int, int]:
    budgets = [int(x) for x in args.budgets.split(",")]
    return budgets[b % len(budgets)], args.pool_base + b


def run_stream(args, base: Path, inject_after: int | None = None, batches: int | None = None,
               variant: str = "staged", envs: str | None = None) -> tuple[Path, Path, str | None, float]:
    """The online stream (resumable per batch); returns (registry root, stream workdir, injected ref, wall s).

    `variant` of an injected harm: `staged` (a canary at exposure 1) or `unstaged` (a plain release,
    watched), each optionally `-external`: the suite runs with `--max-per-submit` off the profile, so
    `ole agent work --online` records every task as `external` (OLE cannot rerun it)."""
    root, work = fresh_registry(base, None if inject_after is not None else args.start_root), base / "stream"
    done = base / "batches.json"
    state = json.loads(done.read_text()) if done.is_file() else {"batches": [], "injected": None, "wall": 0.0}
    for b in range(args.batches if batches is None else batches):
        if b in state["batches"]:
            continue
        if inject_after is not None and b == inject_after and state["injected"] is None:
            state["injected"] = inject(root, staged=variant.startswith("staged"))
        budget, pool = batch(args, b)
        t0 = time.monotonic()
        print(f"== batch {b}: budget {budget}, pool {pool}", flush=True)
        if variant.endswith("-external"):
            external_batch(args, (envs or args.envs).split(","), budget, pool, base / f"suite-{b}", agent(args, root, work))
        else:
            cmd = [sys.executable, "-m", "evogym.cli", "suite", "run", "--envs", *(envs or args.envs).split(","),
                   "--jobs", str(args.jobs), "--profile", "quick", "--budget", str(budget), "--pool-seed", str(pool),
                   "--isolation", args.isolation, "--out", str(base / f"suite-{b}"), "--agent", agent(args, root, work)]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            print(proc.stdout[-2000:], proc.stderr[-2000:], flush=True)
        state["wall"] += time.monotonic() - t0
        state["batches"].append(b)
        done.write_text(json.dumps(state))
    return root, work, state["injected"], state["wall"]


def external_batch(args, envs: list[str], budget: int, pool: int, out: Path, agent_cmd: str) -> None:
    """One batch of tasks OLE cannot rerun: `evogym run` per env (`--jobs` at a time) with a per-submit cap
    off the quick profile's (`evogym suite run` has no such flag), so the agent records them `external`."""
    import shlex
    from concurrent.futures import ThreadPoolExecutor

    def one(env: str) -> str:
        cmd = [sys.executable, "-m", "evogym.cli", "run", "--env", env, "--run-dir", str(out / env.replace("/", "_")),
               "--profile", "quick", "--budget", str(budget), "--pool-seed", str(pool),
               "--max-per-submit", str(EXTERNAL_MAX_PER_SUBMIT), "--isolation", args.isolation, "--quiet", "--",
               *shlex.split(agent_cmd)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        return f"{env}: rc {proc.returncode} {proc.stderr[-300:]}"
    with ThreadPoolExecutor(args.jobs) as pool_ex:
        for line in pool_ex.map(one, envs):
            print(line, flush=True)


def inject(root: Path, staged: bool = True) -> str:
    with Registry(root) as reg:
        champ = reg.champion()
        lp = champ.bundle.loop_policy
        bad = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
            "budget": lp.budget.model_copy(update={"wall_time_s": HARM_WALL_S})})}), parents=[champ.version],
            note="injected harmful release")
        reg.release(bad.ref, reason=f"injected harmful release (budget.wall_time_s {HARM_WALL_S})", force=True,
                    exposure=1.0 if staged else None)
        print(f"injected {bad.ref}, " + ("staged on every task" if staged else "released (not staged)"), flush=True)
        return bad.ref


def stream_rows(work: Path) -> list[dict]:
    if not (work / "evaluations.sqlite3").is_file():
        return []  # no task reached the agent (the runs failed before it): reported as such
    with sqlite3.connect(work / "evaluations.sqlite3") as db:
        return [json.loads(p) for (p,) in db.execute("SELECT payload FROM stream ORDER BY n")]


def evaluation_episodes(work: Path) -> tuple[int, int]:
    """(runs, episodes) OLE spent on its own evaluation (gate runs and control reruns) in a stream."""
    with sqlite3.connect(work / "evaluations.sqlite3") as db:
        results = [RunResult.model_validate_json(r) for (r,) in db.execute("SELECT result FROM evaluations")]
    return len(results), sum(r.episodes for r in results)


def fixed_stream(args, base: Path, rows: list[dict], seed_bundle) -> tuple[list[dict], list[str]]:
    """The seed's result on every stream task: reused where the stream ran the seed, run elsewhere."""
    store = EvaluationStore(base / "fixed.sqlite3")
    tasks = [(TaskSpec.model_validate(r["task"]), RunCondition.model_validate(r["condition"])) for r in rows]
    need = [t for t, r in zip(tasks, rows) if r["bundle_ref"] != "coder@1"]
    reused = [i for i, r in enumerate(rows) if r["bundle_ref"] == "coder@1"]
    checks = [tasks[i] for i in reused[: args.check_identical]]
    notes = []
    with LocalExecutor(args.workers) as ex:
        paired = PairedEvaluation(ex, store, run_job, traces_root=str(base / "fixed-traces"),
                                  runs_root=str(base / "fixed-runs"), isolation=args.isolation)
        paired.run([ChosenVersion("coder@1", seed_bundle)], need + checks)
    out = []
    for i, ((task, cond), r) in enumerate(zip(tasks, rows)):
        online = RunResult.model_validate(r["result"])
        if r["bundle_ref"] == "coder@1":
            fixed = online
            hit = store.get(eval_key(seed_bundle.content_hash, task, cond))
            if hit is not None:
                same = hit[0].score == online.score
                notes.append(f"task {i + 1} ({task.env}, budget {task.budget}, pool {task.pool_seed}) rerun by the "
                             f"seed: held-out {hit[0].score} vs the stream's {online.score} -> "
                             + ("identical" if same else "DIFFERENT"))
        else:
            fixed = store.get(eval_key(seed_bundle.content_hash, task, cond))[0]
        pair = make_pair(task, cond, env_family(task.env), fixed, online)
        out.append({"n": i + 1, "env": task.env, "family": pair.family, "budget": task.budget, "pool": task.pool_seed,
                    "bundle": r["bundle_ref"], "canary": r.get("canary") is not None, "control": r.get("control"),
                    "q_fixed": fixed.q, "q_online": online.q, "r": pair.r, "episodes": online.episodes})
    return out, notes


def events_lines(root: Path) -> tuple[list[str], dict]:
    with Registry(root) as reg:
        events = reg.events()
        active = reg.champion().ref
        scopes = reg.scope_champions()
    lines, counts = [], defaultdict(int)
    for e in events:
        p = e.payload
        if e.kind == "gate_decision":
            s = p["stats"]
            counts["gate decisions"] += 1
            lines.append(f"- #{e.seq} gate `{e.ref}` vs `{p['champion']}`: **{p['verdict']}** on {s['n_pairs']} pairs, "
                         f"mean r {s['mean_r']:+.3f}, p {s['p_value']:.3f}; bound `{p.get('bound')}`")
        elif e.kind == "release":
            counts["releases"] += 1
            lines.append(f"- #{e.seq} release `{e.ref}` for `{p.get('scope')}`"
                         + (f", staged at exposure {p['exposure']}" if p.get("exposure") else "") + f": {p.get('reason')}")
        elif e.kind == "stage":
            counts[f"stage {p['stage']}"] += 1
            lines.append(f"- #{e.seq} stage `{e.ref}` → **{p['stage']}** ({p.get('scope')}): {p.get('reason', '')}")
        elif e.kind == "evaluation" and p.get("stage") == "monitor":
            counts["monitor pairs"] += 1
    lines.append(f"- active at the end: `{active}`; scopes: "
                 + "; ".join(f"`{c.scope}` {c.active or '-'}" + (f" (canary {c.canary})" if c.canary else "")
                             for c in scopes))
    return lines, dict(counts)


def render(args, rows, notes, ev_lines, counts, episodes, wall, harm=None, rows_raw=None) -> list[str]:
    lines = ["# Online stream: does a live stream get better because of OLE?", "",
             "Command: `python experiments/online_stream.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Stream: {args.batches} `evogym suite run --jobs {args.jobs}` batches over {args.envs} (profile quick), "
             f"budgets {args.budgets} alternating, pool seeds {args.pool_base}+batch; built-in agent through "
             f"`ole agent work --online --every-k {args.every_k}`; gate {args.gate_envs} x pools {args.gate_pools} "
             f"at budgets {args.gate_budgets}. Fixed stream: the same tasks worked by the seed `coder@1`. "
             f"Wall time of the online stream {wall / 60:.0f} min (shared 2-core machine).", "",
             *start_lines(args, rows_raw or [])]
    m, lo, hi = ci90([x["r"] for x in rows])
    lines += [f"**Online vs fixed, {len(rows)} paired tasks: mean r {m:+.4f}, 90 % CI [{lo:+.4f}, {hi:+.4f}]** "
              "(percentile bootstrap over tasks, two-sided).", ""]
    for key in ("family", "budget", "env"):
        lines += [f"Per {key}:", "", f"| {key} | tasks | mean r [90 % CI] | online bundles |", "|---|---|---|---|"]
        by = defaultdict(list)
        for x in rows:
            by[x[key]].append(x)
        for name, xs in sorted(by.items(), key=lambda kv: str(kv[0])):
            mm, ll, hh = ci90([x["r"] for x in xs])
            lines.append(f"| {name} | {len(xs)} | {mm:+.4f} [{ll:+.4f}, {hh:+.4f}] | "
                         f"{', '.join(sorted({x['bundle'] for x in xs}))} |")
        lines.append("")
    stream_eps = sum(x["episodes"] for x in rows)
    lines += [f"Episodes: the stream's own tasks {stream_eps}; OLE's evaluation (gate runs, trial reruns and control "
              f"reruns) {episodes[1]} in {episodes[0]} runs (**{episodes[1] / max(1, stream_eps):.2f} x the stream's**).",
              "",
              "Per env, online vs fixed: " + ("no env below -0.02" if all(
                  sum(x["r"] for x in rows if x["env"] == e) / sum(1 for x in rows if x["env"] == e) >= -0.02
                  for e in {x["env"] for x in rows}) else "**an env below -0.02**") + ".", "",
              "Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), "",
              "## Per task (finish order)", "",
              "| n | env | budget | pool | online bundle | canary task | q fixed | q online | r |",
              "|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['n']} | {x['env']} | {x['budget']} | {x['pool']} | {x['bundle']} | "
                     f"{'yes (control ' + str(x['control']) + ')' if x['canary'] else '-'} | "
                     f"{_q(x['q_fixed'])} | {_q(x['q_online'])} | {x['r']:+.3f} |")
    lines += ["", "## Registry events", "", *ev_lines, "", "## Identity of reused fixed-stream tasks", "",
              *(f"- {n}" for n in notes), ""]
    if harm is not None:
        lines += harm
    return lines


def _q(v) -> str:
    return "failed" if v is None else f"{v:.1f}"


def harm_lines(args, base: Path) -> list[str]:
    n = args.inject_after + 1 if args.harm_batches is None else args.harm_batches
    out = ["## Injected harm", "",
           f"Fresh streams with the same flags over {args.harm_envs or args.envs}, {n} batches each; "
           + (f"after batch {args.inject_after - 1}" if args.inject_after else "before the first batch")
           + f" a child of the champion with `budget.wall_time_s: {HARM_WALL_S}` (every run ends without a scored "
           "submit) is released by hand with `--force`: staged on every task (exposure 1, a canary) or not staged "
           "(a plain release, watched), on tasks OLE can rerun or on external ones (each task an `evogym run` with "
           f"`--max-per-submit {EXTERNAL_MAX_PER_SUBMIT}`: tasks recorded as `external`, never rerun).", "",
           "`harmed when decided`: the harmful version's tasks the deciding look had seen; `worked`: every task "
           f"it worked, including tasks whose boundary came before the decision took effect ({args.jobs} tasks "
           "run at once).", "",
           "| variant | harmed when decided | worked (stream n) | decision | test | wall min |",
           "|---|---|---|---|---|---|"]
    reasons: list[str] = []
    for variant in args.harm_variants.split(","):
        root, work, bad, wall = run_stream(args, base / f"harm-{variant}", inject_after=args.inject_after, batches=n,
                                           variant=variant, envs=args.harm_envs)
        rows = stream_rows(work)
        worked = [k for k, r in enumerate(rows, 1) if r["bundle_ref"] == bad]
        with Registry(root) as reg:
            events = reg.events()
            ends = [(e.payload["stage"], e.payload.get("monitor") or {}, e.payload.get("reason", ""))
                    for e in reg.events(kind="stage") if e.ref == bad and e.payload["stage"] != "canary"]
            ends += [("rolled_back (watch)", e.payload.get("monitor") or {}, e.payload.get("reason", ""))
                     for e in reg.events(kind="rollback") if e.payload.get("from") == bad]
        stage, monitor, reason = ends[0] if ends else ("none", {}, "")
        test = monitor.get("test") or ("failures" if "failures test" in reason else
                                       "paired r (canary monitor)" if stage == "rolled_back" else "-")
        looks = [e for e in events if e.kind == "evaluation" and e.ref == bad
                 and e.payload.get("stage") in ("monitor-look", "watch-look")]
        decided_after = len(looks[-1].payload.get("r") or looks[-1].payload.get("trace_ids") or []) if looks else 0
        out.append(f"| {variant} | **{decided_after}** | {len(worked)} ({', '.join(map(str, worked)) or '-'}) | {stage} | "
                   f"{test} | {wall / 60:.0f} |")
        reasons.append(f"- {variant}: {reason}")
    return out + [""] + reasons + [""]


def main() -> None:
    args = parse()
    base = Path(args.workdir).resolve()
    if args.fresh and base.exists():
        shutil.rmtree(base)
    if args.harm_only:
        text = "\n".join(["# Online stream: injected harm", "",
                          "Command: `python experiments/online_stream.py " + " ".join(sys.argv[1:]) + "`", "",
                          *harm_lines(args, base)]) + "\n"
        print(text)
        if args.out:
            Path(args.out).write_text(text)
        return
    root, work, _, wall = run_stream(args, base / "online")
    rows = stream_rows(work)
    with Registry(root) as reg:
        seed = reg.get("coder@1").bundle
    raw = rows
    paired, notes = fixed_stream(args, base / "online", rows, seed)
    ev_lines, counts = events_lines(root)

    def write(harm) -> None:
        text = "\n".join(render(args, paired, notes, ev_lines, counts, evaluation_episodes(work), wall, harm,
                                 rows_raw=raw)) + "\n"
        print(text)
        if args.out:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            out.with_suffix(".json").write_text(json.dumps({"pairs": paired, "counts": counts}, indent=1))

    write(None)  # the stream's report stands on its own; the harm stream (long) adds its section after
    if args.harm:
        write(harm_lines(args, base))


if __name__ == "__main__":
    main()
