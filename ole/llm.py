"""The only module that talks to language models.

`LLMClient.complete(messages)` returns a `Completion` and accounts calls, tokens and
dollars against hard `Caps`. Four modes share one call path:

- `live`: litellm (imported lazily: the import alone takes 6-7 s) with our own
  timeout, retries and exponential backoff; litellm's retries are off so the retry
  count is ours and testable.
- `record`: `live`, and `store_path` is required; every call is appended to it.
- `replay`: answers from a store written by `record` (or by any mode's `log_path`),
  keyed by the request hash; an unseen request raises `LLMReplayMiss`, never a guess.
- `scripted`: answers from a list of canned responses in order (tests, demos).

Every mode appends one JSON line per answered call to `log_path` when given, so any
run -- live, scripted or replayed -- can itself be replayed bit-for-bit offline.
Model strings `scripted:<file>` and `replay:<file>` select those modes from the CLI
(`LLMClient.from_model_string`).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from ole.errors import OleError

Mode = Literal["live", "record", "replay", "scripted"]
Message = dict[str, str]

HASHED_PARAMS = ("temperature", "top_p", "max_tokens", "seed", "stop", "n")
"""Request parameters that change the answer and therefore enter the request hash; all others
(api_base, api_key, ...) are transport and never do, so a new key or endpoint still replays."""
DEFAULT_TIMEOUT_S = 120.0
"""Per-attempt wall-clock limit of one live request."""
DEFAULT_RETRIES = 3
"""Retries after a retryable failure (timeout, connection error, 408/409/429/5xx)."""
DEFAULT_BACKOFF_S = 2.0
"""First retry waits this long; each later retry waits twice as long as the one before."""
SCRIPTED_MODEL = "scripted"
"""Model name hashed and logged for scripted responses (portable: no file path in it)."""
PROMPT_EXCERPT_CHARS = 200
"""How much of the last user message a replay miss quotes."""


class LLMError(OleError):
    """Base of model-call failures; an agent turns every one into a clean stop."""

    exit_code = 1


class LLMCapReached(LLMError):
    """A hard cap (calls, tokens or dollars) is spent; no request was sent."""


class LLMUnavailable(LLMError):
    """The model could not answer (retries exhausted, auth, bad request, script exhausted)."""


class LLMDeadline(LLMError):
    """The caller's deadline (`LLMClient.deadline`) passed before the model answered."""


class LLMReplayMiss(LLMUnavailable):
    """Replay met a request that the store never saw: the run diverged from the recording."""


@dataclass(frozen=True)
class Caps:
    """Hard limits for one client; None = unlimited. Checked before every request."""

    calls: int | None = None
    tokens: int | None = None
    usd: float | None = None


@dataclass(frozen=True)
class Completion:
    """One model answer with its cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    usd: float
    request_hash: str
    cached: bool
    """True when the answer came from a store or a script, not from the network."""
    finish_reason: str = "stop"
    """`stop`, or `length` when the answer was truncated by max_tokens."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Usage:
    """Running totals of one client. Only answered calls count, so a replay spends exactly what the recording did."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    failed_attempts: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def request_hash(model: str, messages: Sequence[Message], params: dict[str, Any]) -> str:
    """sha256 over canonical JSON of the model, the messages and the answer-changing params."""
    hashed = {k: params[k] for k in HASHED_PARAMS if params.get(k) is not None}
    body = {"model": model, "messages": [dict(m) for m in messages], "params": hashed}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _last_user_text(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content", ""))[:PROMPT_EXCERPT_CHARS]
    return ""


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one line and fsync: a crash loses at most the line being written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_store(path: Path) -> list[dict[str, Any]]:
    """Rows of a call store; a torn last line (crash mid-write) is dropped, any other bad line is an error."""
    if not path.is_file():
        raise LLMUnavailable(f"no LLM call store at {path}", hint="pass the llm_calls.jsonl of a recorded run")
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise LLMUnavailable(f"{path}:{i + 1} is not JSON", hint="the store is damaged; re-record the run")
    return rows


def load_script(path: Path) -> list[dict[str, Any]]:
    """A script is a JSON list of responses: strings, or objects with `text` and optional token/usd counts."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LLMUnavailable(f"cannot read LLM script {path}: {exc}",
                             hint="a script is a JSON list of response strings") from exc
    if not isinstance(data, list):
        raise LLMUnavailable(f"LLM script {path} holds {type(data).__name__}, expected a JSON list",
                             hint='write e.g. ["```python\\nclass Policy: ...\\n```"]')
    return normalize_script(data)


def normalize_script(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Script entries as dicts: a bare string is `{"text": string}`."""
    return [{"text": d} if isinstance(d, str) else dict(d) for d in items]


@dataclass
class LLMClient:
    """A model endpoint with caps, retries and a call log; see the module docstring for modes."""

    model: str
    mode: Mode = "live"
    store_path: Path | None = None
    """record: written; replay: read; scripted: the JSON script (unless `script` is given)."""
    caps: Caps = field(default_factory=Caps)
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    log_path: Path | None = None
    """Every answered call is appended here (any mode); this file replays the run."""
    script: list[dict[str, Any]] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """Default request params (temperature, max_tokens, api_base, ...); per-call params override."""
    sleep: Any = time.sleep
    usage: Usage = field(default_factory=Usage)
    deadline: float | None = None
    """`time.monotonic()` past which no request is sent or waited for (the agent's wall-clock cap):
    each attempt gets at most what is left, in total (`timeout_s` is litellm's per-read timeout, which
    a server sending a byte every few seconds never trips), and `LLMDeadline` is raised when it is spent."""

    def __post_init__(self) -> None:
        self.store_path = Path(self.store_path) if self.store_path is not None else None
        self.log_path = Path(self.log_path) if self.log_path is not None else None
        self._replay: dict[str, list[dict[str, Any]]] = {}
        self._script_pos = 0
        if self.mode == "record" and self.store_path is None:
            raise LLMUnavailable("record mode needs store_path", hint="pass store_path=<file>.jsonl")
        if self.mode == "replay":
            self._load_replay()
        if self.mode == "scripted":
            self._load_script()

    @classmethod
    def from_model_string(cls, spec: str, **kwargs: Any) -> "LLMClient":
        """`scripted:<file>` and `replay:<file>` select offline modes; anything else is a litellm model."""
        for prefix in ("scripted:", "replay:"):
            if spec.startswith(prefix):
                path = Path(spec[len(prefix):]).expanduser()
                return cls(model=spec, mode=prefix[:-1], store_path=path, **kwargs)  # type: ignore[arg-type]
        from ole.extras import check
        check("llm", f"the live model `{spec}`")  # refused here, before a run starts, not at its first call
        return cls(model=spec, mode="live", **kwargs)

    # ---- loading -------------------------------------------------------------------------
    def _load_replay(self) -> None:
        assert self.store_path is not None
        rows = read_store(self.store_path)
        for row in rows:
            self._replay.setdefault(row["hash"], []).append(row)
        if rows and self.model.startswith("replay:"):
            self.model = rows[0]["model"]

    def _load_script(self) -> None:
        if self.script is None:
            if self.store_path is None:
                raise LLMUnavailable("scripted mode needs a script", hint="pass script=[...] or a scripted:<file>")
            self.script = load_script(self.store_path)
        self.script = normalize_script(self.script)
        self.model = SCRIPTED_MODEL

    # ---- the call path -------------------------------------------------------------------
    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        """Answer `messages`; raises LLMCapReached before sending when a cap is spent."""
        merged = {**self.params, **params}
        self._check_caps()
        key = request_hash(self.model, messages, merged)
        if self.mode == "replay":
            comp, row = self._from_replay(key, messages)
        elif self.mode == "scripted":
            comp, row = self._from_script(key)
        else:
            comp, row = self._from_live(key, messages, merged)
        self._account(comp)
        if self.mode == "record":
            assert self.store_path is not None
            _append_jsonl(self.store_path, {**row, "request": self._request(messages, merged)})
        if self.log_path is not None and self.log_path != self.store_path:
            _append_jsonl(self.log_path, {**row, "request": self._request(messages, merged)})
        return comp

    def _left(self, at_most: float) -> float:
        """Seconds an attempt may take: `at_most`, or less when the deadline is nearer."""
        return at_most if self.deadline is None else min(at_most, self.deadline - time.monotonic())

    def remaining(self) -> dict[str, float | None]:
        """What is left under each cap (None = uncapped)."""
        c = self.caps
        return {"calls": None if c.calls is None else c.calls - self.usage.calls,
                "tokens": None if c.tokens is None else c.tokens - self.usage.tokens,
                "usd": None if c.usd is None else c.usd - self.usage.usd}

    def _check_caps(self) -> None:
        c, u = self.caps, self.usage
        for name, cap, used in (("calls", c.calls, u.calls), ("tokens", c.tokens, u.tokens), ("usd", c.usd, u.usd)):
            if cap is not None and used >= cap:
                field = "max_llm_calls" if name == "calls" else f"max_{name}"
                raise LLMCapReached(f"LLM {name} cap reached: used {used:g} of {cap:g}",
                                    hint=f"raise budget.{field} in the loop policy")

    def _account(self, comp: Completion) -> None:
        self.usage.calls += 1
        self.usage.prompt_tokens += comp.prompt_tokens
        self.usage.completion_tokens += comp.completion_tokens
        self.usage.usd += comp.usd

    def _request(self, messages: Sequence[Message], params: dict[str, Any]) -> dict[str, Any]:
        hashed = {k: params[k] for k in HASHED_PARAMS if params.get(k) is not None}
        return {"messages": [dict(m) for m in messages], "params": hashed}

    def _row(self, key: str, comp: Completion) -> dict[str, Any]:
        return {"hash": key, "model": self.model, "text": comp.text, "finish_reason": comp.finish_reason,
                "usage": {"prompt_tokens": comp.prompt_tokens, "completion_tokens": comp.completion_tokens},
                "usd": comp.usd}

    def _from_replay(self, key: str, messages: Sequence[Message]) -> tuple[Completion, dict[str, Any]]:
        queue = self._replay.get(key)
        if not queue:
            raise LLMReplayMiss(
                f"replay has no recorded answer for request {key} (last user message: "
                f"{_last_user_text(messages)!r})",
                hint="the run diverged from the recording; record it again with a live model")
        row = queue.pop(0)
        usage = row.get("usage", {})
        comp = Completion(text=row["text"], prompt_tokens=int(usage.get("prompt_tokens", 0)),
                          completion_tokens=int(usage.get("completion_tokens", 0)), usd=float(row.get("usd", 0.0)),
                          request_hash=key, cached=True, finish_reason=row.get("finish_reason", "stop"))
        return comp, self._row(key, comp)

    def _from_script(self, key: str) -> tuple[Completion, dict[str, Any]]:
        assert self.script is not None
        if self._script_pos >= len(self.script):
            raise LLMUnavailable(f"LLM script exhausted after {len(self.script)} responses",
                                 hint="add responses to the script or lower budget.max_llm_calls")
        item = self.script[self._script_pos]
        self._script_pos += 1
        text = str(item.get("text", ""))
        comp = Completion(text=text, prompt_tokens=int(item.get("prompt_tokens", 0)),
                          completion_tokens=int(item.get("completion_tokens", len(text) // 4)),
                          usd=float(item.get("usd", 0.0)), request_hash=key, cached=True,
                          finish_reason=str(item.get("finish_reason", "stop")))
        return comp, self._row(key, comp)

    def _from_live(self, key: str, messages: Sequence[Message], params: dict[str, Any]
                   ) -> tuple[Completion, dict[str, Any]]:
        litellm = _litellm()
        last: Exception | None = None
        attempts = 0
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(max(0.0, self._left(self.backoff_s * 2 ** (attempt - 1))))
            limit = self._left(self.timeout_s)
            if limit <= 0:
                raise LLMDeadline(f"the wall-clock cap was reached while waiting for model {self.model!r}",
                                  hint="raise budget.wall_time_s, or use a faster model")
            try:
                response = _within(limit, lambda: litellm.completion(
                    model=self.model, messages=list(messages), timeout=limit, num_retries=0, max_retries=0, **params))
            except Exception as exc:  # noqa: BLE001 - litellm maps every provider error onto openai's tree
                attempts += 1
                self.usage.failed_attempts += 1
                last = exc
                if not _retryable(exc):
                    break
                continue
            try:
                comp = _completion_from(litellm, response, key, messages)
            except _NoChoice as exc:  # an answer with nothing in it: a failed attempt like a 5xx
                attempts += 1
                self.usage.failed_attempts += 1
                last = exc
                continue
            return comp, self._row(key, comp)
        raise LLMUnavailable(f"model {self.model!r} failed after {attempts} attempt(s): "
                             f"{type(last).__name__}: {str(last)[:300]}",
                             hint="check the model string, the API key variable and the network")


class _CallTimeout(Exception):
    """An attempt that had not answered within its total time (a slow or trickling server)."""


def _within(limit: float, call: Any) -> Any:
    """`call()` on a worker thread, waited for at most `limit` seconds in total; past it the
    attempt counts as a timeout and its thread is left to finish on its own (daemon: it never
    holds the process)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="llm-call", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise _CallTimeout(f"no complete answer within {limit:.1f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _retryable(exc: Exception) -> bool:
    """Timeouts, connection errors, 408/409/429 and 5xx are transient; auth and bad requests are not."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in (408, 409, 429) or status >= 500
    name = type(exc).__name__
    return name in ("Timeout", "APITimeoutError", "APIConnectionError", "ServiceUnavailableError", "_CallTimeout")


class _NoChoice(Exception):
    """A 200 answer with no choice in it (`choices: []`)."""


def _tokens(usage: Any, field: str) -> int | None:
    """A token count the server reported, or None when it reported none or nonsense (negative, not a number)."""
    value = getattr(usage, field, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return None
    return int(value)


def _completion_from(litellm: Any, response: Any, key: str, messages: Sequence[Message] = ()) -> Completion:
    """The answer's text and usage. Token counts the server did not report (litellm shows them as 0)
    or reported negative (-4,000,000 defeated the cap) are estimated at 4 characters a token, so
    `max_tokens` always binds."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise _NoChoice("the model's answer holds no choice (choices: [])")
    choice = choices[0]
    text = choice.message.content or ""
    usage = getattr(response, "usage", None)
    prompt = _tokens(usage, "prompt_tokens") or 0
    sent = sum(len(str(m.get("content") or "")) for m in messages)
    if not prompt and sent:  # litellm fills a missing usage with zeros: no real prompt is 0 tokens
        prompt = max(1, sent // 4)
    completion = _tokens(usage, "completion_tokens") or 0
    if not completion and text:
        completion = max(1, len(text) // 4)
    return Completion(text=text, prompt_tokens=prompt, completion_tokens=completion, usd=_cost(litellm, response),
                      request_hash=key, cached=False, finish_reason=str(choice.finish_reason or "stop"))


def _cost(litellm: Any, response: Any) -> float:
    """litellm's own cost figure; 0.0 for models it has no price for (local or stub servers)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is None:
        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception:  # noqa: BLE001 - unknown model price: litellm raises rather than returning 0
            cost = 0.0
    return max(0.0, float(cost or 0.0))  # a price from nonsense usage never lowers the spend


def _litellm() -> Any:
    """Import litellm on first live use, offline-safe: local price map, no telemetry, no callbacks."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    try:
        import litellm
    except ImportError as exc:
        from ole.extras import install_hint
        raise LLMUnavailable("litellm is not installed", hint=install_hint("llm")) from exc
    litellm.telemetry = False
    litellm.success_callback = []
    litellm.failure_callback = []
    litellm.callbacks = []
    litellm.num_retries = 0
    litellm.drop_params = True  # `seed` etc. are dropped for providers without them, not an error
    litellm.suppress_debug_info = True
    return litellm
