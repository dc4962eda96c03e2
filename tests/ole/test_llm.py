"""ole.llm: request hashing, scripted/replay modes, caps, and litellm's real HTTP path to a loopback stub."""
from __future__ import annotations

import json

import pytest

from ole.llm import (Caps, LLMCapReached, LLMClient, LLMReplayMiss, LLMUnavailable, read_store,
                     request_hash)
from tests.ole.llm_stub import StubServer

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write a policy"}]


def test_request_hash_is_canonical_and_ignores_transport_params():
    a = request_hash("m", MSGS, {"temperature": 0.0, "api_key": "k1"})
    b = request_hash("m", [dict(reversed(list(m.items()))) for m in MSGS], {"temperature": 0.0, "api_key": "k2"})
    assert a == b and a.startswith("sha256:")
    assert request_hash("m2", MSGS, {"temperature": 0.0}) != a
    assert request_hash("m", MSGS, {"temperature": 0.5}) != a
    assert request_hash("m", MSGS[:1], {"temperature": 0.0}) != a


def test_scripted_answers_in_order_logs_and_stops_when_exhausted(tmp_path):
    log = tmp_path / "calls.jsonl"
    client = LLMClient("scripted", mode="scripted", script=["one", {"text": "two", "usd": 0.5}], log_path=log)
    assert [client.complete(MSGS).text for _ in range(2)] == ["one", "two"]
    assert client.usage.calls == 2 and client.usage.usd == pytest.approx(0.5)
    with pytest.raises(LLMUnavailable, match="exhausted after 2"):
        client.complete(MSGS)
    rows = read_store(log)
    assert [r["text"] for r in rows] == ["one", "two"]
    assert rows[0]["request"]["messages"] == MSGS


def test_replay_reproduces_a_log_and_fails_loudly_on_an_unseen_request(tmp_path):
    log = tmp_path / "calls.jsonl"
    first = LLMClient("scripted", mode="scripted", script=["a", "b", "c"], log_path=log)
    asked = [MSGS, MSGS, MSGS[:1] + [{"role": "user", "content": "other"}]]
    answers = [first.complete(m).text for m in asked]
    replay = LLMClient.from_model_string(f"replay:{log}", log_path=tmp_path / "again.jsonl")
    assert replay.mode == "replay" and replay.model == "scripted"
    again = [replay.complete(m) for m in asked]
    assert [c.text for c in again] == answers and all(c.cached for c in again)
    assert (tmp_path / "again.jsonl").read_text() == log.read_text()
    with pytest.raises(LLMReplayMiss) as err:
        replay.complete([{"role": "user", "content": "never asked " + "x" * 400}])
    assert "sha256:" in str(err.value) and "never asked" in str(err.value)
    assert len(str(err.value)) < 600


def test_replay_store_drops_a_torn_last_line_but_rejects_damage_elsewhere(tmp_path):
    log = tmp_path / "calls.jsonl"
    LLMClient("scripted", mode="scripted", script=["a"], log_path=log).complete(MSGS)
    with open(log, "a") as f:
        f.write('{"hash": "sha256:tor')
    assert len(read_store(log)) == 1
    log.write_text('garbage\n' + log.read_text())
    with pytest.raises(LLMUnavailable, match="not JSON"):
        read_store(log)


@pytest.mark.parametrize("caps, script, n_ok", [
    (Caps(calls=2), ["a", "b", "c"], 2),
    (Caps(tokens=25), [{"text": "a", "prompt_tokens": 10, "completion_tokens": 10}] * 3, 2),
    (Caps(usd=1.0), [{"text": "a", "usd": 0.6}] * 3, 2),
])
def test_caps_stop_before_sending(caps, script, n_ok):
    client = LLMClient("scripted", mode="scripted", script=script, caps=caps)
    for _ in range(n_ok):
        client.complete(MSGS)
    with pytest.raises(LLMCapReached, match="cap reached"):
        client.complete(MSGS)
    assert client.usage.calls == n_ok


def test_model_strings_select_modes(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["hello"]))
    assert LLMClient.from_model_string(f"scripted:{script}").complete(MSGS).text == "hello"
    assert LLMClient.from_model_string("openai/gpt-4o-mini").mode == "live"
    with pytest.raises(LLMUnavailable, match="no LLM call store"):
        LLMClient.from_model_string(f"replay:{tmp_path / 'missing.jsonl'}")
    with pytest.raises(LLMUnavailable, match="record mode needs store_path"):
        LLMClient("openai/x", mode="record")


def _stub_client(stub: StubServer, tmp_path, **kw) -> LLMClient:
    waits: list[float] = []
    client = LLMClient("openai/stub", mode="record", store_path=tmp_path / "rec.jsonl",
                       params={"api_base": stub.api_base, "api_key": "x", "temperature": 0.0},
                       sleep=waits.append, **kw)
    client.waits = waits  # type: ignore[attr-defined]
    return client


@pytest.mark.heavy
@pytest.mark.llm
def test_litellm_http_path_retries_a_500_and_a_slow_answer(tmp_path):
    script = [("error", 500), ("slow", 3.0, "too late"), ("ok", "```python\nclass Policy: pass\n```")]
    with StubServer(script) as stub:
        client = _stub_client(stub, tmp_path, timeout_s=1.0, retries=2, backoff_s=0.25)
        comp = client.complete(MSGS)
    assert comp.text.startswith("```python") and not comp.cached
    assert (comp.prompt_tokens, comp.completion_tokens) == (11, 7) and comp.usd == 0.0
    assert len(stub.requests) == 3 and stub.requests[0]["messages"] == MSGS
    assert client.usage.failed_attempts == 2 and client.waits == [0.25, 0.5]
    replay = LLMClient.from_model_string(f"replay:{tmp_path / 'rec.jsonl'}")
    assert replay.model == "openai/stub"
    assert replay.complete(MSGS, temperature=0.0).text == comp.text


@pytest.mark.llm
def test_litellm_http_path_gives_up_cleanly(tmp_path):
    with StubServer([("error", 500)] * 3) as stub:
        client = _stub_client(stub, tmp_path, timeout_s=2.0, retries=1, backoff_s=0.01)
        with pytest.raises(LLMUnavailable, match="after 2 attempt"):
            client.complete(MSGS)
    assert client.usage.calls == 0 and len(stub.requests) == 2
    with StubServer([("error", 401)]) as stub:
        client = _stub_client(stub, tmp_path, timeout_s=2.0, retries=3, backoff_s=0.01)
        with pytest.raises(LLMUnavailable, match="after 1 attempt"):
            client.complete(MSGS)
    assert len(stub.requests) == 1


@pytest.mark.llm
def test_an_answer_without_choices_is_a_failed_attempt_and_nonsense_usage_is_estimated(tmp_path):
    """`choices: []` crashed the run (IndexError); a missing usage counted 0 tokens and a negative
    one was summed as given (-4,000,000 tokens): either way `max_tokens` could never bind."""
    text = "```python\nclass Policy: pass\n```"
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "stub",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
    script = [("raw", {**body, "choices": []}),
              ("raw", {**body, "usage": {"prompt_tokens": -999995, "completion_tokens": -999995, "total_tokens": 0}}),
              ("raw", body)]
    with StubServer(script) as stub:
        client = _stub_client(stub, tmp_path, timeout_s=5.0, retries=1, backoff_s=0.01)
        first = client.complete(MSGS)  # the empty answer was retried
        second = client.complete(MSGS + [{"role": "user", "content": "again"}])
    assert client.usage.failed_attempts == 1 and len(stub.requests) == 3
    assert first.completion_tokens == len(text) // 4 > 0 and first.prompt_tokens > 0
    assert second.completion_tokens == len(text) // 4 and second.prompt_tokens > 0
    assert client.usage.tokens > 0 and client.usage.usd >= 0.0


@pytest.mark.llm
def test_a_deadline_bounds_a_call_in_total(tmp_path):
    """The agent's wall-clock cap was checked only between calls, and the 120 s timeout is
    litellm's per read: a hung or trickling server held a run with a 6 s cap for minutes."""
    import time

    from ole.llm import LLMDeadline, _litellm
    _litellm()  # imported before the clock starts: its first import takes seconds on a loaded machine
    with StubServer([("slow", 8.0, "late"), ("slow", 8.0, "late")]) as stub:
        client = _stub_client(stub, tmp_path, timeout_s=60.0, retries=3, backoff_s=0.01)
        client.deadline = time.monotonic() + 1.0
        t0 = time.monotonic()
        with pytest.raises(LLMDeadline, match="wall-clock cap"):
            client.complete(MSGS)
        assert time.monotonic() - t0 < 5.0  # not the 8 s answer, nor 60 s
    assert client.usage.calls == 0 and client.usage.failed_attempts == 1
