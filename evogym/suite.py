"""`evogym suite run|smoke`: one benchmark run per env, in parallel, with a leaderboard.

`suite run` launches `evogym run --env E ... -- AGENT` for every env of the suite in a
process pool (each run has its own server, port and credential), shows one progress line
per finished run, and writes `leaderboard.md`, `leaderboard.json`, `curves.png` and
`results.json` (EvoPolicyGym main's `leaderboard-results/v1`) under `--out`. `suite smoke`
checks that every env builds, steps and reports through the host: one short episode each,
no finalization.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from evogym import envs, leaderboard, pools
from evogym.errors import ConfigError
from evogym.progress import Progress
from evogym.rollout import utc_stamp
from evogym.sandbox.isolation import DEFAULT_ISOLATION, ISOLATIONS

RESULTS_FILE = "results.json"
"""`suite run`'s leaderboard-results/v1 export (EvoPolicyGym main's leaderboard format)."""

SMOKE_STEPS = 20
SMOKE_POLICY = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.action = self._zero(action_space)
    def _zero(self, s):
        t = s["type"]
        if t == "Discrete":
            return s.get("start", 0)
        if t in ("Box", "Image"):
            import numpy as np
            return np.zeros(s["shape"]).tolist()
        if t in ("MultiDiscrete",):
            return [0] * len(s["nvec"])
        if t == "MultiBinary":
            return [0] * (s["n"] if isinstance(s["n"], int) else s["n"][0])
        if t == "Dict":
            return {k: self._zero(v) for k, v in s["spaces"].items()}
        if t == "Tuple":
            return [self._zero(v) for v in s["spaces"]]
        return 0
    def reset(self, episode_index):
        pass
    def act(self, obs):
        return self.action
"""


def suite_envs(name: str, only: list[str] | None) -> list[str]:
    if name != "core16":
        raise ConfigError(f"unknown suite {name!r}", hint="the built-in suite is core16; or pass --envs")
    return [envs.resolve(e).slug for e in only] if only else list(envs.CORE16)


def _smoke_one(slug: str, workdir: Path, isolation: str) -> dict:
    from evogym.host import Host, make_config
    t0 = time.monotonic()
    host = None
    try:
        # one submit per host: a sandbox started ahead for a next submit would only be killed
        host = Host(workdir / slug.replace("/", "_"),
                    make_config(slug, "quick", budget=2, max_steps=SMOKE_STEPS, isolation=isolation), prestart=False)
        (host.run.system / "policy.py").write_text(SMOKE_POLICY)
        status, body = host.judge.submit({"env_instances": [0]})
        s = body.get("summary", {})
        ok = status == 200 and body["status"] == "ok" and (s.get("episode_lengths") or [0])[0] > 0
        return {"env": slug, "ok": ok, "status": body.get("status"), "steps": (s.get("episode_lengths") or [0])[0],
                "seconds": round(time.monotonic() - t0, 2)}
    except Exception as exc:  # noqa: BLE001 - report every env, never stop at the first failure
        return {"env": slug, "ok": False, "status": f"{type(exc).__name__}: {exc}", "steps": 0,
                "seconds": round(time.monotonic() - t0, 2)}
    finally:
        if host is not None:
            host.close()


def cmd_smoke(args) -> int:
    slugs = suite_envs(args.suite, args.envs)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(_smoke_one, s, Path(tmp), args.isolation) for s in slugs]
        results = []
        for fut in as_completed(futures):
            r = fut.result()
            results.append(r)
            print(f"[{len(results):2d}/{len(slugs)}] {'ok  ' if r['ok'] else 'FAIL'} {r['env']:42s} "
                  f"{r['steps']:3d} steps {r['seconds']:6.2f}s  {r['status']}", flush=True)
    passed = sum(r["ok"] for r in results)
    print(f"smoke: {passed}/{len(slugs)} environments ok")
    return 0 if passed == len(slugs) else 1


def _run_one(slug: str, args, out: Path) -> dict:
    run_dir = out / "runs" / slug.replace("/", "_")
    cmd = [sys.executable, "-m", "evogym.cli", "run", "--env", slug, "--run-dir", str(run_dir),
           "--profile", args.profile, "--isolation", args.isolation, "--jobs", "1"]
    if args.budget:
        cmd += ["--budget", str(args.budget)]
    if args.pool_seed:
        cmd += ["--pool-seed", str(args.pool_seed)]
    if args.session:
        cmd.append("--session")
    cmd += ["--", *shlex.split(args.agent)]
    cmd.insert(cmd.index("--"), "--quiet")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    result = {"env": slug, "run_dir": str(run_dir), "seconds": round(time.monotonic() - t0, 1),
              "returncode": proc.returncode, "final_score": None, "status": "error", "agent_exit": None}
    if (run_dir / "run.json").exists():
        outcome = json.loads((run_dir / "run.json").read_text())["outcome"]
        result.update(status=outcome["status"], final_score=outcome["final_score"],
                      normalized_score=outcome.get("normalized_score"))
    else:
        result["error"] = (proc.stderr.strip().splitlines() or ["no run.json"])[-1]
    summary = _last_json(proc.stdout)
    result["agent_exit"] = summary.get("agent_exit")
    if result["agent_exit"]:  # why the agent failed, from its own output
        log = Path(summary.get("agent_log") or run_dir / "logs" / "agent.log")
        lines = [ln for ln in (log.read_text(errors="replace").splitlines() if log.is_file() else []) if ln.strip()]
        result["error"] = f"agent exited {result['agent_exit']}: {(lines or ['(no output)'])[-1][:300]} (log {log})"
    return result


class _EnvList(argparse.Action):
    """List flags as `ole` takes them: space- or comma-separated, and repeatable (one list)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        items = [v.strip() for value in values for v in value.split(",") if v.strip()]
        if not items:
            parser.error(f"{option_string} needs at least one env id")
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), *items])


def _last_json(stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {}


def cmd_run(args) -> int:
    slugs = suite_envs(args.suite, args.envs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool, \
            Progress(len(slugs), "suite", stream=sys.stderr) as bar:
        futures = {pool.submit(_run_one, s, args, out): s for s in slugs}
        for fut in as_completed(futures):
            r = fut.result()
            results[r["env"]] = r
            score = "–" if r["final_score"] is None else f"{r['final_score']:.4g}"
            bar.line(f"[{len(results):2d}/{len(slugs)}] {r['env']:42s} {r['status']:12s} score {score:>10s} "
                     f"{r['seconds']:7.1f}s" + (f"\n        {r['error']}" if r.get("error") else ""))
            bar.advance()
    ordered = {s: results[s]["final_score"] if results[s]["status"] == "completed" else None for s in slugs}
    board = leaderboard.build(ordered, name=args.name)
    (out / "leaderboard.json").write_text(json.dumps({"board": board, "runs": results}, indent=2, sort_keys=True))
    (out / "leaderboard.md").write_text(leaderboard.markdown(board))
    docs = {s: json.loads((Path(results[s]["run_dir"]) / "run.json").read_text()) for s in slugs
            if (Path(results[s]["run_dir"]) / "run.json").is_file()}
    entry = {"id": args.name, "display": args.name, "harness": args.harness, "kind": "agent",
             "thinking_effort": args.thinking_effort}
    (out / RESULTS_FILE).write_text(json.dumps(leaderboard.results_v1(
        docs, config_id=f"{args.profile}-{args.budget or pools.profile(args.profile).budget}", entry=entry,
        generated_at=utc_stamp()), indent=2, sort_keys=True) + "\n")
    curves = {s: leaderboard.validation_curve(Path(results[s]["run_dir"])) for s in slugs
              if results[s]["status"] == "completed"}
    if curves:
        leaderboard.plot_curves(curves, out / "curves.png")
    print(leaderboard.markdown(board))
    print(f"wrote {out / 'leaderboard.md'}" + (f", {out / 'curves.png'}" if curves else ""))
    scored = [r for r in results.values() if r["status"] == "completed"]
    if not scored:  # every run failed: the leaderboard is all dashes, so say why and fail
        failed = [r for r in results.values() if r.get("error")]
        print(f"evogym suite: no run was scored ({len(failed)} of {len(results)} with an error, e.g. "
              f"{failed[0]['error'] if failed else 'no ok submit'})", file=sys.stderr)
        return 1
    return 0 if all(r["status"] != "error" for r in results.values()) else 1


def register(sub) -> None:
    """Add the `suite` subcommands to the evogym parser."""
    p = sub.add_parser("suite", help="many runs across environments")
    p.set_defaults(func=None, help_parser=p)  # `evogym suite` alone prints its help
    ssub = p.add_subparsers(dest="suite_verb", metavar="VERB")
    for name, func, helptext in (("run", cmd_run, "one benchmark run per env with an agent command, + leaderboard"),
                                 ("smoke", cmd_smoke, "one short episode per env through the host")):
        q = ssub.add_parser(name, help=helptext)
        q.add_argument("--suite", default="core16", help="suite name (core16)")
        q.add_argument("--envs", "--env", nargs="+", action=_EnvList, metavar="ENV",
                       help="restrict to these env ids: `--envs a b`, `--envs a,b` or `--envs a --envs b`")
        q.add_argument("--jobs", type=int, default=2, help="runs in parallel")
        q.add_argument("--isolation", default=DEFAULT_ISOLATION, choices=ISOLATIONS)
        q.set_defaults(func=func)
        if name == "run":
            q.add_argument("--agent", required=True, help="agent command line (quoted), run in each workspace")
            q.add_argument("--profile", default="bench", help="paper | bench | quick")
            q.add_argument("--budget", type=int, help="episode budget override")
            q.add_argument("--pool-seed", type=int, default=0, help="case-pool seed of every run (0 = the paper's pools)")
            q.add_argument("--name", default="ours", help="row name in the leaderboard (and the results.json entry)")
            q.add_argument("--harness", default="command", help="harness of the results.json entry (e.g. codex)")
            q.add_argument("--thinking-effort", help="thinking effort of the results.json entry (e.g. high)")
            q.add_argument("--session", action="store_true", help="serve each run's agent-session/v3 socket too")
            q.add_argument("--out", default="runs/suite", help="output folder")
