"""Progress of long work: a bar with ETA on a terminal (tqdm), plain lines otherwise.

One object per long job (a suite, a finalization, an evolution). `line(text)` prints a
message above the bar on a terminal and as a plain line in a log; `advance(n)` moves the
bar. Without a terminal nothing but the lines is written, so logs and CI output stay
readable and the bar's carriage returns never end up in a file.
"""
from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """A counted job of `total` steps; a bar with ETA only when `stream` is a terminal."""

    def __init__(self, total: int | None, desc: str, *, stream: TextIO | None = None, unit: str = "run",
                 enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self.total = total
        self.bar = None
        if enabled and _isatty(self.stream):
            import shutil
            from tqdm import tqdm
            # a terminal that reports no size (a fresh pty: 0x0) would make tqdm draw nothing at all
            size = shutil.get_terminal_size()
            self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, ncols=min(size.columns or 80, 120),
                            nrows=size.lines if size.lines > 0 else 24, leave=False,
                            bar_format="{desc}: {n_fmt}/{total_fmt} {unit}s |{bar}| {elapsed}<{remaining}")

    def line(self, text: str) -> None:
        """One message: above the bar on a terminal, a plain line otherwise."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def set(self, n: int) -> None:
        """The job is `n` steps done (an absolute position, e.g. episodes charged so far)."""
        if n > self.done:
            self.advance(n - self.done)

    def advance(self, n: int = 1) -> None:
        """`n` more steps done (the bar may exceed an upper-bound total: it then grows it)."""
        self.done += n
        if self.bar is not None:
            if self.bar.total is not None and self.done > self.bar.total:
                self.bar.total = self.done
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams (pytest capture)
        return False


class RunWatcher:
    """Follows a run directory's `events.jsonl` and reports submits and finalization.

    The events are the host's own record, so the watcher needs no hook in the host: one
    line per submit (verdict, mean return, episodes used) and per finalization step, and
    on a terminal a bar over the episode budget. It reads only the trusted event log
    (hidden means in it are the host's, never seeds), and prints to stderr.
    """

    POLL_S = 0.25

    def __init__(self, run_dir, budget: int, *, stream: TextIO | None = None, enabled: bool = True) -> None:
        import threading
        from pathlib import Path
        self.path = Path(run_dir) / "events.jsonl"
        self.budget = budget
        self.used = 0
        self.progress = Progress(budget, "episodes", stream=stream, unit="episode", enabled=enabled)
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="run-watcher", daemon=True)

    def line(self, text: str) -> None:
        self.progress.line(text)

    def start(self) -> "RunWatcher":
        if self.progress.enabled:
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=5)
        self._drain()
        self.progress.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.POLL_S):
            self._drain()

    def _drain(self) -> None:
        import json
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self._offset += end
        for raw in chunk[:end].splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            text = self._describe(event)
            if text:
                self.progress.line(text)

    def _describe(self, e: dict) -> str | None:
        kind = e.get("event")
        if kind == "submit.charge":
            self.used += int(e.get("cost", 0))
            self.progress.advance(int(e.get("cost", 0)))
            return None
        if kind == "submit.finish":
            mean = e.get("mean_return")
            shown = "" if mean is None else f", mean return {mean:.4g}"
            return f"submit {e.get('submit')}: {e.get('status')}{shown} ({self.used}/{self.budget} episodes used)"
        if kind == "submit.reject":
            return f"submit {e.get('submit')}: {e.get('status')} (refused, not charged)"
        if kind == "run.close.start":
            return f"finalizing ({e.get('reason')}): hidden validation, then held-out"
        if kind == "finalize.progress":
            return f"  {e.get('message')}"
        if kind == "eval.record" and e.get("kind") == "final":
            return f"  held-out mean return {e.get('mean_return'):.4g} (submit {e.get('snap')})"
        if kind == "run.close":
            return f"run closed: {e.get('status')}"
        return None
