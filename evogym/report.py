"""`evogym report RUN_DIR`: a finished run as text, JSON, or one self-contained HTML page.

The HTML page (`--html`) shows the curve (each submit's train mean return, the
best-so-far hidden-validation score, the held-out score, the random and best-paper
anchors), the per-submit table, and the code-metric edits between checkpoints. It is
one file with inline SVG and CSS: it opens from disk with no server and no network.
Everything is read from the run directory the host wrote (`run.json`, the feedback
summaries, the checkpoints' metrics); nothing is recomputed from hidden data.
"""
from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

from evogym.durable import SUMMARY_MAX_BYTES, read_regular
from evogym.errors import ConfigError

METRIC_COLUMNS = ("source_lines", "functions", "branches", "loops", "cyclomatic_total", "max_ast_depth")
"""Code metrics shown per submit and diffed between consecutive checkpoints."""


def load_run(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"no run directory {run_dir}", hint="pass the --run-dir of `evogym run` or `evogym serve`")
    path = run_dir / "run.json"
    if not path.is_file():
        hint = ("the run is not finalized yet (see events.jsonl)" if (run_dir / "events.jsonl").is_file()
                else "this is not a run directory: it has no events.jsonl either")
        raise ConfigError(f"{run_dir} has no run.json", hint=hint)
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", hint="the run directory is damaged") from None


def _num(value, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def report(run_dir: Path, as_json: bool = False) -> str:
    doc = load_run(run_dir)
    out = doc["outcome"]
    aux = out.get("auxiliary") or {}
    if as_json:
        keep = {k: out.get(k) for k in ("status", "final_score", "normalized_score", "best_submit_index",
                                         "val_scores", "heldout_mean_return", "heldout_std_return")}
        keep.update({k: aux.get(k) for k in ("episodes_used", "n_submits", "n_successful_submits", "auc_in_loop",
                                             "episodes_to_50pct", "episodes_to_80pct", "held_out_gap",
                                             "val_heldout_gap", "edit_kinds")})
        return json.dumps({"env": doc["env"], "profile": doc.get("profile"), **keep}, indent=2, sort_keys=True)
    kinds = list((aux.get("edit_kinds") or {}).values())
    lines = [f"run      {Path(run_dir)}", f"env      {doc['env']}  profile {doc.get('profile')}  "
             f"isolation {doc.get('isolation', {}).get('level')}", f"status   {out['status']}"]
    if out["status"] == "completed":
        norm = out.get("normalized_score")
        best = out.get("best_submit_index")
        lines += [f"score    {out['final_score']:.4g} (held-out mean over {len(out['heldout_returns'] or [])} episodes)"
                  + (f", normalized {norm:.1f}" if norm is not None else ""),
                  f"selected submit {best} (validation {_num((out.get('val_scores') or {}).get(str(best)))}; "
                  f"{len(out.get('val_scores') or {})} candidates)"]
    elif out.get("error"):
        lines.append(f"error    {out['error']['message']}")
    lines += [f"budget   {_num(aux.get('episodes_used'), 'd')} episodes in {_num(aux.get('n_charged_submits'), 'd')} "
              f"charged submits ({_num(aux.get('n_successful_submits'), 'd')} ok)",
              f"edits    {kinds.count('synthesis')} synthesis, {kinds.count('tuning')} tuning, "
              f"{kinds.count('none')} unchanged"]
    if aux.get("auc_in_loop") is not None:
        lines.append(f"curve    auc_in_loop {aux['auc_in_loop']:.1f}, episodes to 50% "
                     f"{_num(aux.get('episodes_to_50pct'), 'd')}, to 80% {_num(aux.get('episodes_to_80pct'), 'd')}")
    return "\n".join(lines)


# ----- HTML -------------------------------------------------------------------------------------

def submit_rows(run_dir: Path, doc: dict) -> list[dict]:
    """One row per recorded submit: verdict, episodes, train mean, validation score, edit, code metrics."""
    out = doc["outcome"]
    aux = out.get("auxiliary") or {}
    vals, kinds = out.get("val_scores") or {}, aux.get("edit_kinds") or {}
    metrics = aux.get("code_metrics_by_submit") or {}
    rows, used, previous = [], 0, None
    for folder in sorted((Path(run_dir) / "workspace" / "feedback").glob("submit_*")):
        s = _summary(folder / "summary.json")
        if s is None:
            continue
        index = s.get("submit_index")
        used += s["n_episodes"] or 0
        m = metrics.get(str(index)) or {}
        edits: dict[str, int] = {k: (m[k] - previous[k]) for k in METRIC_COLUMNS
                 if isinstance(m.get(k), int) and isinstance(previous.get(k), int)} if previous is not None else {}
        if m:
            previous = m
        rows.append({"submit": index, "status": s.get("status"), "episodes": s.get("n_episodes"), "used": used,
                     "mean_return": s.get("mean_return"), "validation": vals.get(str(index)),
                     "selected": index == out.get("best_submit_index"), "edit": kinds.get(str(index), "-"),
                     "metrics": {k: m.get(k) for k in METRIC_COLUMNS}, "edits": edits})
    return rows


SUMMARY_TYPES: dict[str, type | tuple[type, ...]] = {"submit_index": int, "n_episodes": int, "status": str,
                                                     "mean_return": (int, float)}
"""The summary fields a report row shows, with the types it draws them as."""


def _summary(path: Path) -> dict | None:
    """A feedback summary as a row reads it, or None when there is none to read. The agent can write
    its workspace, so a field of the wrong type (`n_episodes: "four"` crashed `--html`) reads as
    missing, and only a bounded regular file (never a FIFO, never a link) is opened."""
    try:
        data = json.loads(read_regular(path, SUMMARY_MAX_BYTES))
    except (OSError, ValueError, RecursionError):  # unreadable, no regular file, too large, no JSON
        return None
    if not isinstance(data, dict):
        return None
    return {key: value if isinstance(value, kind) and not isinstance(value, bool)
            and not (isinstance(value, float) and not math.isfinite(value)) else None
            for key, kind in SUMMARY_TYPES.items() for value in (data.get(key),)}


def curve_svg(doc: dict, rows: list[dict]) -> str | None:
    """Train means per submit, best-so-far validation, held-out score and the anchors, as inline SVG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from evogym.anchors import AGENTS, PAPER_ROWS, random_baseline
    points = [(r["used"], r["mean_return"]) for r in rows if r["mean_return"] is not None]
    if not points:
        return None
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False, "svg.hashsalt": "evogym-report"})
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    ax.scatter([x for x, _ in points], [y for _, y in points], s=18, color="#1e88e5", label="train mean return (each submit)", zorder=3)
    best, xs, ys = None, [], []
    for r in rows:
        if r["validation"] is not None:
            best = r["validation"] if best is None else max(best, r["validation"])
        if best is not None:
            xs.append(r["used"])
            ys.append(best)
    if xs:
        ax.step(xs, ys, where="post", color="#2e7d32", lw=1.6, label="best-so-far validation mean")
    final = doc["outcome"].get("final_score")
    if final is not None:
        ax.axhline(final, color="#6a1b9a", lw=1.0, label=f"held-out score {final:.4g}")
    slug = doc["env"]
    baseline = random_baseline(slug)
    if baseline is not None:
        ax.axhline(baseline, ls=":", color="#757575", lw=0.9, label="random (measured here)")
    paper = PAPER_ROWS.get(slug)
    if paper:
        agent = max(AGENTS, key=lambda a: paper[a])
        ax.axhline(paper[agent], ls="--", color="#424242", lw=0.9, label=f"paper best ({agent})")
    ax.set_xlabel("train episodes used")
    ax.set_ylabel("mean return")
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return svg_of(fig)


def svg_of(fig) -> str:
    """A matplotlib figure as inline SVG (closed after): it shrinks with the page but never grows past
    its drawn size (the viewBox is kept, the width becomes a max-width). `ole report` uses it too."""
    import matplotlib.pyplot as plt
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    return re.sub(r'<svg([^>]*?) width="([^"]*)" height="[^"]*"', r'<svg\1 class="chart" style="max-width: \2"',
                  text, count=1)


def render_html(run_dir: Path) -> str:
    """The HTML page of one run (see the module docstring)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    doc = load_run(run_dir)
    rows = submit_rows(run_dir, doc)
    env = Environment(loader=PackageLoader("evogym", "templates"), autoescape=select_autoescape(["j2", "html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(num=_num, metric_columns=METRIC_COLUMNS)
    return env.get_template("run_report.html.j2").render(doc=doc, out=doc["outcome"], rows=rows,
                                                         aux=doc["outcome"].get("auxiliary") or {},
                                                         run_dir=str(run_dir), chart=curve_svg(doc, rows))


def write_html(run_dir: Path, out: Path | None = None) -> str:
    """Write the page (default `RUN_DIR/report.html`); returns a line naming it."""
    text = render_html(run_dir)
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    if not target.parent.is_dir():
        raise ConfigError(f"cannot write {target}: folder {target.parent} does not exist", hint="create it first")
    target.write_text(text, encoding="utf-8")
    return f"wrote {target} (open {target.resolve().as_uri()})"
