"""HTTP endpoints, status codes and request hygiene of the host (reference §1, reliability H1–H6)."""
import json
import socket
import threading
import time

import pytest

from conftest import ZERO_POLICY
from evogym.errors import ConfigError


def test_info_shape_and_task(live_host):
    live = live_host(budget=6, max_per_submit=4)
    status, info = live.get("/info")
    assert status == 200
    assert info["episode_budget"] == 6 and info["max_episodes_per_submit"] == 4
    assert info["min_episodes_per_submit"] == 1 and info["protocol_version"] == "protocol/v2.0-draft"
    assert info["state"] == {"is_finalized": False, "n_submits": 0, "remaining_budget": 6,
                             "finalization": "pending", "early_finish_allowed": True}
    meta = info["env_meta"]
    assert meta["action_space"] == {"n": 3, "type": "Discrete"} and meta["n_env_instances"] == 1024
    assert meta["max_episode_steps"] == 500 and meta["obs_storage"] == "external"  # observations.npy (issue 13)
    assert info["resource_limits"]["rollout_wall_s"] > 0 and info["isolation"] == "bwrap"
    status, task = live.get("/task")
    assert status == 200 and "## Policy Contract" in task and "## Submit Notes" in task


def test_unknown_and_finalize(live_host):
    live = live_host()
    assert live.request("GET", "/nope")[0] == 404
    status, body = live.request("POST", "/finalize", {})
    assert status == 405 and json.loads(body) == {"error": {"message": "finalize is server-owned"},
                                                  "status": "method_not_allowed"}
    status, body = live.request("PATCH", "/finalize", {})  # not "use DELETE or GET or POST or PUT"
    assert status == 405 and json.loads(body)["error"]["message"] == "finalize is server-owned"
    assert live.request("GET", "/info?x=1")[0] == 200  # query string ignored
    # a trailing slash is another path (404, as the reference), never a 307 to the Host the client named
    budget = live.get("/info")[1]["state"]["remaining_budget"]
    assert live.request("GET", "/info/")[0] == 404 and live.request("POST", "/submit/", {"env_instances": [0]})[0] == 404
    assert live.get("/info")[1]["state"]["remaining_budget"] == budget


def test_json_answers_name_their_charset_as_the_reference(live_host):
    import urllib.request
    live = live_host()
    req = urllib.request.Request(live.url + "/info", headers={"Authorization": f"Bearer {live.server.credential.token}"})
    with urllib.request.urlopen(req) as resp:
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"


@pytest.mark.parametrize("raw, status, why", [
    (b"not json", 400, "invalid JSON: Expecting value: line 1 column 1"), (b"[1,2]", 400, None),
    (b'{"x": 1}', 400, None), (b'{"env_instances": NaN}', 400, "NaN is not valid JSON"),
    (b"\xff\xfe", 400, "not UTF-8"),
    (b'{"x": ' + b"9" * 5000 + b', "env_instances": [0]}', 400, "a number with too many digits"),
    (b'{"x": ' + b"[" * 100000 + b"]" * 100000 + b', "env_instances": [0]}', 400, "nested too deep"),
])
def test_bad_bodies(live_host, raw, status, why):
    """Each refusal says what is wrong with the body (valid JSON with a 5000-digit number or deep
    nesting was answered "invalid JSON")."""
    live = live_host()
    code, body = live.request("POST", "/submit", raw=raw)
    answer = json.loads(body)
    assert code == status and answer["status"] == "bad_request"
    assert why is None or why in answer["error"]["message"], answer
    assert live.get("/info")[1]["state"]["remaining_budget"] == 32


def test_oversized_body_is_413(live_host):
    live = live_host()
    code, _ = live.request("POST", "/submit", raw=b'{"env_instances": [' + b"1," * 600000 + b"1]}")
    assert code == 413


def test_slow_body_gets_408_and_server_keeps_serving(live_host, monkeypatch):
    import evogym.server as srv
    monkeypatch.setattr(srv, "BODY_TIMEOUT_S", 0.5)
    live = live_host()
    port = live.server.port
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
              + f"Authorization: Bearer {live.server.credential.token}\r\n\r\n{{".encode())
    reply = s.recv(4096)
    s.close()
    assert b" 408 " in reply.split(b"\r\n")[0]
    assert live.get("/info")[0] == 200


def test_parse_error_consumes_index_and_is_free(live_host):
    live = live_host(budget=6, max_per_submit=4)
    live.write_policy(ZERO_POLICY)
    status, body = live.submit("4-2")
    assert status == 400 and body == {"submit_id": 0, "status": "budget_invalid",  # submit_id: issue 13
                                      "error": {"message": "bad range '4-2': HI < LO"}}
    status, body = live.submit([2000])
    assert status == 400 and body["status"] == "invalid_env_instance" and body["submit_id"] == 1
    assert body["summary"]["n_episodes"] == 0
    status, body = live.submit("0-4")  # 5 > max 4
    assert status == 400 and body["status"] == "budget_invalid" and body["summary"]["remaining_budget"] == 6
    status, body = live.submit("0-99999999999")
    assert status == 400 and body["status"] == "invalid_env_instance"
    info = live.get("/info")[1]
    assert info["state"]["n_submits"] == 4 and info["state"]["remaining_budget"] == 6
    # every recorded submit has a summary (contiguous numbering, unlike the reference's parse-error gap)
    names = sorted(p.name for p in (live.workspace / "feedback").iterdir())
    assert names == ["submit_000", "submit_001", "submit_002", "submit_003"]


def test_run_closed_after_budget(live_host):
    live = live_host(budget=2)
    live.write_policy(ZERO_POLICY)
    assert live.submit([0, 1])[0] == 200
    assert live.host.done.wait(120)
    status, body = live.submit([0])
    assert status == 409 and body["status"] == "run_closed"
    status, body = live.submit("4-2")  # a body that does not parse is still a 400 (reference)
    assert status == 400 and body["status"] == "budget_invalid"
    assert live.get("/info")[1]["state"]["is_finalized"] is True


def test_concurrent_submits_serialize_and_charge_once(live_host):
    live = live_host(budget=10)
    live.write_policy(ZERO_POLICY)
    results = []
    threads = [threading.Thread(target=lambda: results.append(live.submit([0]))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(b["submit_id"] for _, b in results) == list(range(6))
    assert live.get("/info")[1]["state"]["remaining_budget"] == 4


def test_idempotency_key_retry_charges_once(live_host):
    live = live_host(budget=10)
    live.write_policy(ZERO_POLICY)
    a = live.submit([0, 1], headers={"Idempotency-Key": "k1"})
    b = live.submit([0, 1], headers={"Idempotency-Key": "k1"})
    assert a == b and live.get("/info")[1]["state"]["remaining_budget"] == 8


def test_the_run_token_is_required_by_default(live_host):
    live = live_host()
    token = live.server.credential.token
    assert live.request("GET", "/info", auth=False)[0] == 401
    assert live.request("GET", "/info", auth=False, headers={"X-Evogym-Token": "s3cret"})[0] == 401
    assert live.request("GET", "/info", auth=False, headers={"X-Evogym-Token": token})[0] == 200
    assert live.request("GET", "/info", auth=False, headers={"Authorization": f"Bearer {token}"})[0] == 200
    for scheme in ("bearer", "BEARER", "BeArEr"):  # RFC 7235: the scheme is case-insensitive
        assert live.request("GET", "/info", auth=False, headers={"Authorization": f"{scheme} {token}"})[0] == 200
    for wrong in (f"Basic {token}", f"Bearer {token}x", f"Bearer{token}", "Bearer", ""):
        assert live.request("GET", "/info", auth=False, headers={"Authorization": wrong})[0] == 401, wrong


def test_refuses_non_loopback_bind(live_host):
    from evogym.server import Server
    live = live_host()
    with pytest.raises(ConfigError):
        Server(live.host, bind="0.0.0.0")


def test_info_answers_during_a_long_submit(live_host):
    live = live_host(budget=4)
    live.write_policy("""
import time
class Policy:
    def __init__(self, o, a, m): time.sleep(1.5)
    def reset(self, i): pass
    def act(self, obs): return 0
""")
    t = threading.Thread(target=live.submit, args=([0],))
    t.start()
    time.sleep(0.4)
    t0 = time.monotonic()
    assert live.get("/info")[0] == 200 and time.monotonic() - t0 < 1.0
    t.join()


@pytest.mark.parametrize("length", [None, "-5", "abc", "99999999999", "9" * 19, "9" * 40])
def test_bad_content_length(live_host, length):
    live = live_host()
    s = socket.create_connection(("127.0.0.1", live.server.port), timeout=15)
    head = (f"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {live.server.credential.token}\r\n")
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    s.sendall((head + "\r\n").encode())
    status = s.recv(4096).split(b"\r\n")[0]
    s.close()
    assert status.split()[1] in (b"400", b"413")
    assert live.get("/info")[1]["state"]["remaining_budget"] == 32
