"""Progress: a bar with ETA on a terminal, plain lines otherwise; the run watcher follows events.jsonl."""
from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys

from evogym.progress import Progress, RunWatcher


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_without_a_terminal():
    out = io.StringIO()
    with Progress(4, "suite", stream=out) as bar:
        bar.line("first")
        bar.advance(2)
        bar.line("second")
    assert out.getvalue() == "first\nsecond\n"


def test_a_bar_with_eta_on_a_terminal():
    out = Terminal()
    with Progress(4, "suite", stream=out) as bar:
        bar.advance()
        bar.line("one run done")
        bar.set(3)
    text = out.getvalue()
    assert "one run done" in text and "suite: 1/4 runs |" in text and "<" in text and "\r" in text


def test_the_bar_grows_when_the_estimate_was_an_upper_bound_too_low():
    out = Terminal()
    bar = Progress(2, "evolve", stream=out, unit="episode")
    bar.advance(5)
    assert bar.bar.total == 5
    bar.close()


def test_disabled_progress_prints_nothing():
    out = Terminal()
    bar = Progress(2, "x", stream=out, enabled=False)
    bar.line("hidden")
    bar.advance()
    bar.close()
    assert out.getvalue() == ""


def test_run_watcher_reports_submits_and_finalization(tmp_path):
    events = [{"event": "run.open"}, {"event": "submit.charge", "cost": 4, "submit": 0},
              {"event": "submit.finish", "submit": 0, "status": "ok", "mean_return": -167.0},
              {"event": "submit.reject", "submit": 1, "status": "budget_invalid"},
              {"event": "run.close.start", "reason": "budget"},
              {"event": "finalize.progress", "message": "validation: 1 ok checkpoints, 1 distinct programs"},
              {"event": "eval.record", "kind": "final", "snap": 0, "mean_return": -150.25},
              {"event": "run.close", "status": "completed"}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + '{"event": "torn')
    out = io.StringIO()
    watcher = RunWatcher(tmp_path, budget=8, stream=out)
    watcher.stop()  # drains what is there: the torn last line waits
    assert out.getvalue().splitlines() == [
        "submit 0: ok, mean return -167 (4/8 episodes used)", "submit 1: budget_invalid (refused, not charged)",
        "finalizing (budget): hidden validation, then held-out",
        "  validation: 1 ok checkpoints, 1 distinct programs", "  held-out mean return -150.2 (submit 0)",
        "run closed: completed"]


def test_a_real_terminal_gets_the_bar_and_the_lines(tmp_path):
    """A child process whose stderr is a pty (a terminal): the bar is drawn, the lines still appear."""
    code = ("import sys; from evogym.progress import Progress\n"
            "with Progress(2, 'suite') as bar:\n"
            "    bar.line('[1/2] ok'); bar.advance(); bar.line('[2/2] ok'); bar.advance()\n")
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=child, stdout=child, stderr=child,
                            env={**os.environ, "COLUMNS": "100"})
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main)
    text = b"".join(chunks).decode(errors="replace")
    assert "[1/2] ok" in text and "[2/2] ok" in text and "suite:" in text and "\r" in text
