"""Hostile harnesses against the model proxy (``rsi.model_proxy``), each through the path a real
rollout takes: ``MiniAgentTarget.run`` starts a proxy, binds its socket into the jail and runs
the harness there; a scripted OpenAI-compatible server on 127.0.0.1 stands in for the model
endpoint and holds the real key. The harnesses speak raw HTTP over the Unix socket (stdlib only),
as a model-written harness could.
"""

from __future__ import annotations

import hashlib
import json
import socket
import textwrap
import uuid
from pathlib import Path

import pytest

from benchmarks.qa import QA, QAParams
from rsi.config import TargetConfig
from rsi.llm import LLMConfig
from rsi.model_proxy import ModelProxy
from rsi.target import MiniAgentTarget
from rsi.testing.scripted_server import ScriptedServer

pytestmark = pytest.mark.timeout(120)
KEY = "sk-proxytest-" + uuid.uuid4().hex  # fresh per session: found anywhere means it leaked
KEY_ENV = "RSI_TEST_PROXY_KEY"
MODEL = "scripted-model"

# Every hostile harness starts with this: a chat call over the socket, any token, path, model.
PRELUDE = '''
import http.client, json, os, socket, sys
SOCK = os.environ.get("RSI_MODEL_SOCKET", "")
TOKEN = os.environ.get("RSI_MODEL_API_KEY", "")
MODEL = os.environ.get("RSI_MODEL_NAME", "")

class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("rsi-model", timeout=30)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)

def call(token=TOKEN, path="/v1/chat/completions", method="POST", model=None, sock=None, scheme="Bearer"):
    conn = Unix(sock or SOCK)
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"{scheme} {token}"
    body = json.dumps({"model": model or MODEL, "messages": [{"role": "user", "content": "hi"}]})
    try:
        conn.request(method, path, body=body if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return [resp.status, resp.read().decode(errors="replace")[:300]]
    except OSError as exc:
        return [type(exc).__name__, str(exc)[:200]]
    finally:
        conn.close()

def answer(**report):
    print(json.dumps({"answer": "", **report}))
'''


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


BACKEND = "bwrap"  # the jail the harness runs in; the fixture switches it


@pytest.fixture(autouse=True)
def backend(jail_backend, monkeypatch):
    """Every proxy attack runs in both jails."""
    monkeypatch.setitem(globals(), "BACKEND", jail_backend)
    return jail_backend


@pytest.fixture(scope="module")
def bench():
    return QA(QAParams(name="qa"))


def model_block(srv, **caps) -> dict:
    return {"provider": "openai", "model": MODEL, "base_url": srv.base_url, "api_key_env": KEY_ENV,
            "max_tokens": 64, "max_retries": 0, **caps}


def rollout(tmp_path: Path, bench, srv, body: str, files: dict | None = None, **caps):
    """One rollout of a hostile ``runtime/main.py`` on a fresh checkout, as run_batch does it."""
    work = tmp_path / f"checkout-{uuid.uuid4().hex[:8]}"
    (work / "runtime").mkdir(parents=True)
    (work / "runtime" / "main.py").write_text(PRELUDE + textwrap.dedent(body))
    for name, text in (files or {}).items():
        (work / name).write_text(text)
    target = MiniAgentTarget(TargetConfig(path=str(work), kind="miniagent",
                                          limits={"timeout_s": 60, "backend": BACKEND},
                                          model=model_block(srv, **caps)), bench)
    return target.run(work, bench.split("train")[0], 0, 0)


def report(result) -> dict:
    assert result.status == "ok", result.trace
    return result.trace["output"]


def test_the_key_never_enters_the_jail(tmp_path, bench):
    """The harness makes a real call (so the key is in use on the trusted side right then), then
    searches everything it can see: its environment, every process's environ and cmdline, and
    every file of its tree (/tmp, /checkout, /run, /etc, /dev/shm, ...: all but /proc, /sys and the
    read-only /usr and interpreter installs). It looks for
    any token of the key's length whose SHA-256 is the key's (so the key itself is nowhere in
    the harness's source)."""
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    decoy = "sk-proxytest-" + uuid.uuid4().hex
    decoy_digest = hashlib.sha256(decoy.encode()).hexdigest()
    with ScriptedServer(["fine"], loop=True, api_key=KEY) as srv:
        result = rollout(tmp_path, bench, srv, f"""
            import hashlib, re
            first = call()
            # every window of {len(KEY)} key characters, overlapping: the key wherever it sits
            windows = re.compile(rb"(?=([A-Za-z0-9_\\-]{{{len(KEY)}}}))")
            found, decoys, scanned = [], [], 0

            def grep(path, data):
                global scanned
                scanned += 1
                hashes = {{hashlib.sha256(m.group(1)).hexdigest() for m in windows.finditer(data)}}
                if "{digest}" in hashes:
                    found.append(path)
                if "{decoy_digest}" in hashes:  # the control: a planted string of the same shape
                    decoys.append(path)

            def scan(path):
                if not os.path.isfile(path):  # sockets, fifos
                    return
                try:
                    with open(path, "rb") as f:
                        grep(path, f.read(1 << 20))
                except OSError:
                    pass

            grep("os.environ", "\\0".join(f"{{k}}={{v}}" for k, v in os.environ.items()).encode())
            for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
                for name in ("environ", "cmdline"):
                    scan(f"/proc/{{pid}}/{{name}}")
            # the whole visible tree but the read-only system and interpreter installs
            skip = {{"/proc", "/sys", "/usr"}} | {{os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}}
            for root in ("/", "/dev/shm"):
                for dirpath, dirs, files in os.walk(root):
                    dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in skip
                               and os.path.realpath(os.path.join(dirpath, d)) not in skip
                               and (root != "/" or os.path.join(dirpath, d) != "/dev")]
                    for name in files:
                        scan(os.path.join(dirpath, name))
            try:
                sockdir = os.listdir("/run/rsi-model")
            except OSError as exc:
                sockdir = type(exc).__name__
            answer(first=first, found=found, decoys=decoys, scanned=scanned, env=dict(os.environ), sockdir=sockdir)
        """, files={"notes.txt": f"a string shaped like the key: {decoy}\n"})
        out = report(result)
        assert out["first"][0] == 200 and srv.requests[0]["authorized"]  # the key was in use upstream
        assert out["found"] == [] and out["scanned"] > 20
        assert out["decoys"] == ["/checkout/notes.txt"]  # the search does find what is there
        assert KEY_ENV not in out["env"] and KEY not in json.dumps(out["env"])
        assert out["env"]["RSI_MODEL_SOCKET"].startswith("/run/rsi-model/")
        # a root caller's rollout (its own slot uid) may not even list the socket's directory
        assert out["sockdir"] in ("PermissionError", [out["env"]["RSI_MODEL_SOCKET"].rsplit("/", 1)[1]])
        assert KEY not in json.dumps(result.trace, default=str)


def test_a_wrong_or_missing_token_is_refused(tmp_path, bench):
    with ScriptedServer(["fine"], loop=True, api_key=KEY) as srv:
        result = rollout(tmp_path, bench, srv, """
            answer(none=call(token=None), wrong=call(token="x" * len(TOKEN)), prefix=call(token=TOKEN[:-1]),
                   basic=call(scheme="Basic"), models=call(path="/v1/models", method="GET"),
                   embeddings=call(path="/v1/embeddings"), other_model=call(model="gpt-4o"),
                   right=call())
        """)
        out = report(result)
        for name in ("none", "wrong", "prefix", "basic"):
            assert out[name][0] == 401 and "token" in out[name][1], (name, out[name])
        assert out["models"][0] == 404 and out["embeddings"][0] == 404
        assert out["other_model"][0] == 403 and "gpt-4o" in out["other_model"][1]
        assert out["right"][0] == 200
        assert len(srv.requests) == 1  # only the right call reached the endpoint
        assert result.trace["model_usage"]["calls"] == 1 and result.trace["model_usage"]["denied"] == 7


def test_no_direct_tcp_to_the_endpoint(tmp_path, bench):
    with ScriptedServer(["fine"], loop=True, api_key=KEY) as srv:
        result = rollout(tmp_path, bench, srv, f"""
            tried = {{}}
            for host in ("127.0.0.1", "localhost", "::1"):
                try:
                    socket.create_connection((host, {srv.port}), timeout=5).close()
                    tried[host] = "connected"
                except OSError as exc:
                    tried[host] = type(exc).__name__
            answer(tried=tried, via_proxy=call())
        """)
        out = report(result)
        assert "connected" not in out["tried"].values() and len(out["tried"]) == 3, out["tried"]
        assert out["via_proxy"][0] == 200 and len(srv.requests) == 1  # the one way out is the proxy
    # and from this side the same port was reachable all along
    with ScriptedServer(["fine"], api_key=KEY) as srv2:
        socket.create_connection(("127.0.0.1", srv2.port), timeout=5).close()


PRICES = {MODEL: {"input_per_mtok": 10.0, "output_per_mtok": 20.0}}  # $0.002 per scripted call


@pytest.mark.parametrize("caps, allowed, cap_key", [
    ({"rollout_max_calls": 3}, 3, "rollout_max_calls=3"),
    ({"rollout_max_tokens": 250, "rollout_max_calls": None}, 2, "rollout_max_tokens=250"),
    ({"rollout_max_cost_usd": 0.005, "prices": PRICES, "rollout_max_calls": None}, 3, "rollout_max_cost_usd=0.005"),
], ids=["calls", "tokens", "cost"])
def test_the_per_rollout_cap_holds_and_usage_is_the_proxys(tmp_path, bench, caps, allowed, cap_key):
    step = {"text": "again", "tokens_in": 100, "tokens_out": 50}
    with ScriptedServer([step], loop=True, api_key=KEY) as srv:
        result = rollout(tmp_path, bench, srv, """
            statuses = [call() for _ in range(12)]
            # a lie about its spend, for a runner that would believe it
            print(json.dumps({"answer": "", "statuses": statuses,
                              "usage": {"tokens_in": 1, "tokens_out": 1, "cost_usd": 0.0}}))
        """, **caps)
        out = report(result)
        codes = [s[0] for s in out["statuses"]]
        assert codes == [200] * allowed + [429] * (12 - allowed), codes
        assert cap_key in out["statuses"][-1][1]
        assert len(srv.requests) == allowed
    assert (result.tokens_in, result.tokens_out) == (100 * allowed, 50 * allowed)
    expected_cost = LLMConfig(**model_block(srv, **caps)).cost(100 * allowed, 50 * allowed)
    assert result.cost_usd == pytest.approx(expected_cost)
    assert out["usage"] == {"tokens_in": 1, "tokens_out": 1, "cost_usd": 0.0}  # printed, and ignored
    usage = result.trace["model_usage"]
    assert usage["calls"] == allowed and usage["refused"] == 12 - allowed and usage["estimated"] == 0


def test_a_token_dies_with_its_rollout(tmp_path, bench):
    with ScriptedServer(["fine"], loop=True, api_key=KEY) as srv:
        first = report(rollout(tmp_path, bench, srv, """
            answer(token=TOKEN, sock=SOCK, ok=call())
        """))
        assert first["ok"][0] == 200
        stolen = json.dumps({"token": first["token"], "sock": first["sock"]})
        second = report(rollout(tmp_path, bench, srv, """
            stolen = json.load(open("stolen.json"))
            answer(stolen_here=call(token=stolen["token"]), old_socket=call(token=stolen["token"], sock=stolen["sock"]),
                   mine=call(), same=stolen["token"] == TOKEN)
        """, files={"stolen.json": stolen}))
        assert second["stolen_here"][0] == 401
        assert second["old_socket"][0] in ("FileNotFoundError", "ConnectionRefusedError"), second["old_socket"]
        assert second["mine"][0] == 200 and second["same"] is False
        assert len(srv.requests) == 2

        # on the trusted side: once the proxy is closed its socket, directory and token are gone
        with ModelProxy(LLMConfig(**model_block(srv))) as proxy:
            path, directory = proxy.socket_path, proxy.socket_dir
            assert Path(path).is_socket()
        assert not Path(directory).exists()
        with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
