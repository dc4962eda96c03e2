"""`ole trace ls|show`: the archive of verified runs."""
from __future__ import annotations

import argparse

from ole.cli.common import Output, leaf, noun, table


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole trace ...`."""
    verbs = noun(subparsers, "trace", "verified run traces (task, bundle, history, outcome)")
    p = leaf(verbs, "ls", ls, "list archived traces")
    p.add_argument("--env", help="only this env")
    p.add_argument("--traces-dir", default="traces", help="trace archive (default traces/)")
    p = leaf(verbs, "show", show, "one trace: task, bundle, outcome and the iteration history")
    p.add_argument("trace_id", metavar="TRACE_ID")
    p.add_argument("--traces-dir", default="traces", help="trace archive (default traces/)")


def ls(args: argparse.Namespace) -> Output:
    """One line per trace: id, env, bundle, final and normalized score, submits.

    A damaged file degrades only itself: it is listed as DAMAGED with the reason, and the
    readable traces are listed as usual (`ole fsck` quarantines damaged ones).
    """
    from ole.storage.traces import open_archive
    with open_archive(args.traces_dir) as archive:  # files, or the database --storage names
        traces = archive.select(env=args.env)
        where = archive.where
    rows = [["trace", "env", "bundle", "final", "normalized", "submits", "episodes"]]
    for t in traces:
        o = t.outcome
        rows.append([t.trace_id, t.task.env, f"{t.bundle_name}@{t.bundle_version}", _num(o.final_score),
                     _num(o.normalized_score), str(o.n_submits), str(o.episodes_used)])
    rows += [[path.stem, "DAMAGED", why, "-", "-", "-", "see `ole fsck`"] for path, why in archive.skipped]
    data = [{"trace_id": t.trace_id, "env": t.task.env, "bundle": f"{t.bundle_name}@{t.bundle_version}",
             "final_score": t.outcome.final_score, "normalized_score": t.outcome.normalized_score} for t in traces]
    data += [{"trace_id": path.stem, "file": str(path), "status": "damaged", "damage": why}
             for path, why in archive.skipped]
    text = table(rows) if len(rows) > 1 else f"no traces in {where} (hint: `ole run --env gym/acrobot`)"
    return Output(data, text)


def show(args: argparse.Namespace) -> Output:
    """The whole trace as JSON (--json) or a readable summary with the history table."""
    from ole.storage.traces import open_archive
    with open_archive(args.traces_dir) as archive:
        t = archive.get(args.trace_id)
    o = t.outcome
    head = [f"trace {t.trace_id}", f"task {t.task.env} profile {t.task.profile} pool-seed {t.task.pool_seed}",
            f"bundle {t.bundle_name}@{t.bundle_version} {t.bundle_hash}",
            f"condition host={t.condition.host} seed={t.condition.seed} model={t.condition.model}",
            f"outcome {o.status}: final {_num(o.final_score)} normalized {_num(o.normalized_score)} "
            f"best val {_num(o.best_val_score)} (submit {o.best_submit_index}); {o.episodes_used} episodes, "
            f"{o.n_submits} submits, {o.wall_s:.1f} s, finish: {o.finish_reason}"]
    rows = [["#", "phase", "edit", "mechanism", "diff", "submit", "verdict", "mean", "episodes"]]
    for it in t.history:
        rows.append([str(it.index), it.phase, it.edit_kind, it.mechanism or "-", str(it.diff_lines),
                     "-" if it.submit_id is None else str(it.submit_id), it.verdict or "-",
                     _num(it.mean_return), ",".join(map(str, it.submitted_indices))])
    return Output(t.model_dump(mode="json"), "\n".join(head) + "\n\n" + table(rows))


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
