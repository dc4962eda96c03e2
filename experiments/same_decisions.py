"""Same decisions before and after a refactor: one small offline evolve from a fresh registry, run
by two source trees (two git commits, each checked out into its own worktree, so the checkout can
change while it runs), its registry events compared field by field.

Events are matched as a multiset, not by position: evaluations run on parallel workers finish
in either order, and a version number is the order of registration. So every `name@version`
is replaced by the content hash of the bundle registered under it, and `seq` and `version` are
left out; two runs agree when the same events, with the same content, are in both.

What must be identical: every event's kind, ref, channel, scope and verdict, and every statistic
the gate decided on (pairs, mean r, CI, p value, per-env cells, criteria pass/fail, the bound, the
transfer regions). What may differ and is listed apart: measured wall time (the cost criterion's
`wall_s` ratio and anything computed from it), timestamps, trace ids, content-free ids.

    python experiments/same_decisions.py --before 2ff37b6 [--after HEAD] [--out experiments/results/same_decisions.md]

With `--backends`, one tree (`--after`) runs the evolve twice: on the SQLite registry and store (files,
the default) and on PostgreSQL (`--storage URL`: a throw-away local server, `ole.storage.local_server`),
and the two runs' events are compared the same way ("same decisions on both backends"):

    python experiments/same_decisions.py --backends --out experiments/results/same_decisions_backends.md

With `--online` (and `--backends`) the run compared is not an evolve but the online-harness experiment:
`evogym suite run --jobs 1` over `ONLINE_ENVS` (`--batches` batches, fresh pool seeds each), every task's
agent `ole agent work --online` (rounds every `--every-k` tasks, gated on pools no stream task uses),
on files and on PostgreSQL. One job at a time, so both streams see their tasks in the same order:

    python experiments/same_decisions.py --backends --online --out experiments/results/same_decisions_online.md
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["evolve", "--mode", "offline", "--envs", "gym/halfcheetah5", "gym/pusher5", "--budget", "32",
        "--gate-budgets", "32", "--population", "4", "--generations", "1", "--search-pools", "1", "2",
        "--gate-pools", "201", "202", "203", "--transfer-envs", "gym/reacher5", "gymnasium/Pendulum-v1",
        "gymnasium/InvertedDoublePendulum-v5", "--transfer-pools", "221", "--workers", "2", "--json"]
SMALL = ["evolve", "--mode", "offline", "--envs", "gym/pusher5", "gym/continuouscar", "--budget", "16",
         "--gate-budgets", "16", "--population", "3", "--generations", "1", "--search-pools", "1", "2",
         "--gate-pools", "201", "202", "--transfer-envs", "gym/reacher5", "gymnasium/Pendulum-v1",
         "--transfer-pools", "221", "--workers", "2", "--json"]
"""`--small`: the same shape (search, scopes, gate, transfer) in a few minutes per run."""
VOLATILE = ("timestamp", "created_at", "ts", "trace_id", "trace_ids", "control_trace_id", "wall_s", "wall",
            "started", "ended", "key", "idempotency_key", "run_id", "digest", "fingerprint", "source")
"""Fields that name a moment, a measured duration or a run's own id: never part of a decision's content."""


ARGS_USED = ARGS

ONLINE_ENVS = ("gym/acrobot", "gym/pusher5", "gym/reacher5", "gymnasium/MiniGrid-FourRooms-v0")
ONLINE_AGENT = ["agent", "work", "--online", "--gate-on", "pools", "--gate-envs", "gym/acrobot", "gym/pusher5",
                "--gate-pools", "201", "202", "203", "--gate-budget", "8"]
"""The online-harness stream's agent (`--every-k` and `--workdir` added per run)."""


def fresh(tree: Path, work: Path, storage: str | None) -> tuple[Path, dict[str, str], list[str]]:
    """A fresh `work` folder with a registry root holding the seed bundle; the environment that runs the
    source `tree` on it, and the `--storage` flags (files when `storage` is None)."""
    if work.exists():
        shutil.rmtree(work)
    root = work / "root"
    root.mkdir(parents=True)
    shutil.copy(REPO / "bundles" / "coder.yaml", root / "coder.yaml")
    env = {**os.environ, "PYTHONPATH": str(tree), "OLE_ROOT": str(root)}
    env.pop("OLE_STORAGE", None)
    return root, env, (["--storage", storage] if storage else [])


def events_of(root: Path, on: list[str], work: Path, env: dict[str, str]) -> list[dict]:
    """Every registry event of `root` (on the storage `on` names), as `ole events --json` gives them."""
    events = subprocess.run([sys.executable, "-m", "ole.cli", "--root", str(root), *on, "--json", "events"], cwd=work,
                            env=env, capture_output=True, text=True, check=True)
    return json.loads(events.stdout)


def run_online(tree: Path, work: Path, storage: str | None, batches: int, every_k: int,
               gate: list[str] = ()) -> tuple[list[dict], float]:
    """The online-harness stream by the source `tree` in `work` (fresh registry holding the seed bundle, on
    `storage` when given, else files): `batches` `evogym suite run --jobs 1` batches; its events."""
    root, env, on = fresh(tree, work, storage)
    agent = " ".join([sys.executable, "-m", "ole.cli", "--root", str(root), *on, *ONLINE_AGENT, *gate,
                      "--every-k", str(every_k), "--workdir", str(work / "stream")])
    started = time.monotonic()
    for batch in range(batches):
        done = subprocess.run([sys.executable, "-m", "evogym.cli", "suite", "run", "--envs", *ONLINE_ENVS,
                               "--jobs", "1", "--profile", "quick", "--budget", "8", "--pool-seed", str(1400 + batch),
                               "--out", str(work / f"suite{batch}"), "--agent", agent],
                              cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"suite batch {batch} by {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    took = time.monotonic() - started
    return events_of(root, on, work, env), took


def run(tree: Path, work: Path, storage: str | None = None, gate: list[str] = ()) -> tuple[list[dict], float]:
    """The evolve by the source `tree` in `work` (fresh registry holding the seed bundle, on `storage`
    when given, else files); its events."""
    root, env, on = fresh(tree, work, storage)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ole.cli", "--root", str(root), *on, *ARGS_USED, *gate, "--workdir", str(work / "wd"),
                           "--traces", str(work / "traces")], cwd=work, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"evolve by {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return events_of(root, on, work, env), took


EVIDENCE_ID = re.compile(r"^(ev-[a-z_]+)-[0-9a-f]+$")
"""An evidence id is its detector and a hash over the traces it read (whose ids hold their start time)."""


def unbounded_wall(tree: Path, work: Path) -> list[str]:
    """`--gate-config` of the tree's packaged gate with no bound on measured wall time (`cost_kappa` without
    `wall_s`): the one input two runs of the same inputs never share (`same_decisions_control.md`), so with
    it unbounded every decision reads only seeded, stored quantities: what a storage backend could change."""
    import yaml
    config = yaml.safe_load((tree / "ole" / "gate.yaml").read_text())
    config["cost_kappa"].pop("wall_s", None)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "gate-no-wall-bound.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return ["--gate-config", str(path)]


def strip(value, path: str = ""):
    """`value` without the volatile fields; wall-dependent gate numbers are kept aside by `walls`.
    Evidence ids keep their detector (their hash covers trace ids); a registration's `blob_hash` (its
    stored YAML names those evidence ids) is left out: its `content_hash` (the bundle) is compared."""
    if isinstance(value, dict):
        measured_wall = "wall" in str(value.get("what", ""))  # a cost check of a wall ratio: its number is measured
        return {k: strip(v, f"{path}.{k}") for k, v in sorted(value.items()) if k not in VOLATILE
                and k != "blob_hash" and not k.startswith("wall") and not k.endswith("_at")
                and not (measured_wall and k == "measured")}
    if isinstance(value, list):
        return [strip(v, path) for v in value]
    if isinstance(value, str) and (m := EVIDENCE_ID.match(value)):
        return m.group(1)
    if isinstance(value, str) and "wall" in value:
        return WALL_NUMBER.sub("#", value)  # a reason quoting a measured wall ratio: its words stay compared
    return value


WALL_NUMBER = re.compile(r"[-+]?\d+\.\d+")
"""A decimal in a text that speaks of wall time (a cost reason quoting the measured ratio and its bound)."""


REF = re.compile(r"^([A-Za-z0-9_.-]+)@(\d+)$")


def canonical(events: list[dict]) -> list[str]:
    """Each event as text: `strip`ped, without `seq`/`version`, refs named by their bundle's content hash."""
    hashes = {(e["name"], e["version"]): (e.get("payload") or {}).get("content_hash", "?")[:16]
              for e in events if e.get("kind") == "registration"}

    def by_content(value):
        if isinstance(value, dict):
            return {k: by_content(v) for k, v in value.items()}
        if isinstance(value, list):
            return [by_content(v) for v in value]
        if isinstance(value, str) and (m := REF.match(value)):
            return f"{m.group(1)}#{hashes.get((m.group(1), int(m.group(2))), m.group(2))}"
        return value

    out = []
    for e in events:
        body = {k: v for k, v in strip(e).items() if k not in ("seq", "version")}
        body["bundle"] = hashes.get((e.get("name"), e.get("version")), str(e.get("version")))
        out.append(json.dumps(by_content(body), sort_keys=True))
    return out


def walls(value, path: str = "") -> dict[str, object]:
    """Every wall-time field under `value`, by its path (measured, so allowed to differ)."""
    out: dict[str, object] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            if k.startswith("wall"):
                out[f"{path}.{k}"] = v
            else:
                out.update(walls(v, f"{path}.{k}"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(walls(v, f"{path}[{i}]"))
    return out


def wall_facts(events: list[dict]) -> list[str]:
    """What measured wall time decided in a run: each search evaluation's wall ratio (the search holds
    it against the gate's bound) and each gate decision's wall check."""
    out = []
    for e in events:
        p = e.get("payload") or {}
        ref = f"{e.get('name')}@{e.get('version')}"
        if e.get("kind") == "evaluation" and "wall_s" in (p.get("cost_ratio") or {}):
            out.append(f"{ref} {p.get('stage')}: wall ratio {p['cost_ratio']['wall_s']:.3f}")
        for crit in p.get("criteria") or []:
            for check in crit.get("checks") or [] if isinstance(crit, dict) else []:
                if "wall" in str(check.get("what")):
                    out.append(f"{ref} gate: {check.get('what')} {check.get('measured')} (bound {check.get('required')}, "
                               f"{'passed' if check.get('passed') else 'FAILED'}) -> verdict {p.get('verdict')}")
    return out


def leaves(value, path: str = "") -> dict[str, object]:
    """Every leaf of a JSON value by its path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{path}[{i}]").items()}
    return {path: value}


def leaf_differences(differing: list[tuple[str, dict]]) -> list[str]:
    """For each event only in one run, paired with the other run's unmatched event of the same kind and
    bundle: the leaves that differ (what to read first)."""
    before = [b for side, b in differing if side == "only before"]
    out = []
    for side, body in differing:
        if side != "only after":
            continue
        twin = next((b for b in before if b.get("kind") == body.get("kind") and b.get("bundle") == body.get("bundle")),
                    None)
        if twin is None:
            continue
        lb, la = leaves(twin), leaves(body)
        diffs = [f"- `{k}`: before {json.dumps(lb.get(k))[:120]}, after {json.dumps(la.get(k))[:120]}"
                 for k in sorted(set(lb) | set(la)) if lb.get(k) != la.get(k)]
        out += [f"Where the {body.get('kind')} event of bundle {body.get('bundle')} differs ({len(diffs)} leaves):", "",
                *diffs[:40], ""]
    return out


def cost_reasons(event: dict) -> list[str]:
    crit = (event.get("payload") or {}).get("criteria") or []
    return [r for c in crit if isinstance(c, dict) and c.get("name") == "cost" for r in c.get("reasons") or []]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default=None, help="the commit to compare against (checked out into a worktree)")
    p.add_argument("--backends", action="store_true", help="compare SQLite with PostgreSQL storage for the --after "
                   "tree instead of two trees")
    p.add_argument("--after", default="HEAD", help="the commit compared (checked out into a worktree too)")
    p.add_argument("--workdir", default="experiments/out/same_decisions")
    p.add_argument("--out", default="experiments/results/same_decisions.md")
    p.add_argument("--small", action="store_true", help="a smaller evolve (`SMALL`) than the default `ARGS`")
    p.add_argument("--online", action="store_true", help="with --backends: the online-harness stream, not an evolve")
    p.add_argument("--batches", type=int, default=2, help="--online: suite batches (4 tasks each)")
    p.add_argument("--every-k", type=int, default=2, help="--online: a proposal round every k finished tasks")
    p.add_argument("--no-wall-bound", action="store_true", help="both runs gate with no bound on measured wall time "
                   "(`unbounded_wall`): decisions then read nothing the two runs measure apart")
    args = p.parse_args()
    global ARGS_USED
    ARGS_USED = SMALL if args.small else ARGS
    if (args.before is None) != args.backends:
        p.error("give --before COMMIT (two trees) or --backends (one tree, two storages)")
    if args.online and not args.backends:
        p.error("--online compares the two backends: give --backends")
    work = (REPO / args.workdir).resolve()
    if args.backends:
        args.before = args.after
    trees = {side: work / f"{side}-tree" for side in (("after",) if args.backends else ("before", "after"))}
    work.mkdir(parents=True, exist_ok=True)
    commits = {}
    for side, tree in trees.items():
        if tree.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
        rev = getattr(args, side)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=REPO, check=True, capture_output=True)
        commits[side] = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True,
                                       check=True).stdout.strip()
    server = None
    try:
        if args.backends:
            sys.path.insert(0, str(trees["after"]))
            from ole.storage.local_server import LocalServer
            server = LocalServer().start()  # in the system temp folder: the server's user must reach it
            url = server.create_database("same_decisions")
            gate = unbounded_wall(trees["after"], work) if args.no_wall_bound else []
            if args.online:
                before, t_before = run_online(trees["after"], work / "before", None, args.batches, args.every_k, gate)
                after, t_after = run_online(trees["after"], work / "after", url, args.batches, args.every_k, gate)
            else:
                before, t_before = run(trees["after"], work / "before", gate=gate)
                after, t_after = run(trees["after"], work / "after", storage=url, gate=gate)
            commits["before"] = commits["after"]
        else:
            before, t_before = run(trees["before"], work / "before")
            after, t_after = run(trees["after"], work / "after")
    finally:
        if server is not None:
            server.stop()
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    for side, events in (("before", before), ("after", after)):
        (work / f"{side}.events.json").write_text(json.dumps(events, indent=1))
    cb, ca = canonical(before), canonical(after)
    only_before = collections.Counter(cb) - collections.Counter(ca)
    only_after = collections.Counter(ca) - collections.Counter(cb)
    rows, same, differing = [], 0, []
    for i, (event, text) in enumerate(zip(after, ca)):
        equal = text not in only_after
        same += equal
        verdict = (event.get("payload") or {}).get("verdict", "")
        rows.append(f"| {i + 1} | {event.get('kind')} | {event.get('name')}@{event.get('version')} | {verdict} | "
                    f"{'in both' if equal else 'DIFFERS'} |")
    for text in only_before:
        differing.append(("only before", json.loads(text)))
    for text in only_after:
        differing.append(("only after", json.loads(text)))
    wall_notes = []
    for b, a in zip(before, after):
        if b.get("kind") == "gate_decision" and cost_reasons(b) != cost_reasons(a):
            wall_notes.append(f"- event {b.get('seq')}: cost reasons before {cost_reasons(b)} / after {cost_reasons(a)}")
    command = "python experiments/same_decisions.py " + " ".join(sys.argv[1:])
    head = (["# Same decisions on both storage backends, online harness (before = SQLite files, after = PostgreSQL)",
             "", f"`{command}` (tree {commits['after']}); the online-harness stream from a fresh registry holding the "
             f"seed bundle: {args.batches} batch(es) of `evogym suite run --jobs 1 --profile quick --budget 8 --envs "
             f"{' '.join(ONLINE_ENVS)}` (pool seeds 1400 + batch), each task's agent:", "",
             "    ole [--storage URL] " + " ".join(ONLINE_AGENT) + f" --every-k {args.every_k} --workdir STREAM", "",
             "run twice by that tree: on files (SQLite registry, store and stream), then with `--storage "
             "postgresql://...` (a throw-away local server)."]
            + (["", "Both runs gate with **no bound on measured wall time** (`--no-wall-bound`: the packaged gate "
                "without `cost_kappa.wall_s`): at budget 8 a run takes about a second and the wall ratio of one pair "
                "swings past the 1.5 bound between any two runs, on either backend; with it unbounded every "
                "decision reads only seeded, stored quantities."] if args.no_wall_bound else [])
            if args.online else
            ["# Same decisions on both storage backends (before = SQLite files, after = PostgreSQL)", "",
             f"`{command}` (tree {commits['after']}); one "
             "offline", "evolve from a fresh registry holding the seed bundle, run twice by that tree: on files "
             "(SQLite registry and store), then with `--storage postgresql://...` (a throw-away local server)"
             + (", both gating with no bound on measured wall time (`--no-wall-bound`):" if args.no_wall_bound else ":")]
            if args.backends else
            ["# Same decisions before and after", "",
             f"`python experiments/same_decisions.py --before {args.before} --after {args.after}` (before = "
             f"{commits['before']}, after = {commits['after']}); one offline",
             "evolve from a fresh registry holding the seed bundle, run by each source tree:"])
    text = [
        *head,
        "",
        *([] if args.online else ["    ole " + " ".join(ARGS_USED), ""]),
        f"Events: {len(before)} before, {len(after)} after; **{same} of {len(after)} after-events also in the "
        f"before run**, {sum(only_before.values())} before-events not in the after run, matched as a multiset "
        "(refs by bundle content) once",
        "timestamps, trace ids, idempotency keys, evidence-id hashes (over trace ids) and measured wall time are left "
        "out (fields: "
        + ", ".join(f"`{v}`" for v in VOLATILE) + ", every `*_at` moment and every `wall*` field).",
        f"Wall time of the two evolves: before {t_before / 60:.1f} min, after {t_after / 60:.1f} min (same machine,",
        "one after the other).",
        "",
        "| # | kind | ref | verdict | content |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    if wall_notes:
        text += ["Cost-criterion reasons (read measured wall time) that differ:", "", *wall_notes, ""]
    for side, events in (("before", before), ("after", after)):
        text += [f"What measured wall time decided in the {side} run:", "",
                 *[f"- {line}" for line in wall_facts(events)], ""]
    for line in leaf_differences(differing):
        text.append(line)
    for side, body in differing[:6]:
        text += [f"## An event {side}", "", "```json", json.dumps(body, indent=1, sort_keys=True)[:4000], "```", ""]
    out = REPO / args.out
    out.write_text("\n".join(text))
    print("\n".join(text[:12 + len(rows)]))
    return 0 if not differing else 1


if __name__ == "__main__":
    raise SystemExit(main())
