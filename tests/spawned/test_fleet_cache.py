"""The fleet cache: torch's Redis remote compile caches behind a real
``redis-server`` (started on a free loopback port, stopped after). A new
host (a fresh process with an empty local cache dir) hits every lookup an
earlier job wrote, on a DTensor program where stock misses; a remote cache
that cannot be reached is said in one line (torch switches it off silently).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from importlib.util import find_spec

import pytest

from test_compile_caches import FORWARD_AND_BACKWARD, run_fresh

pytestmark = [
    pytest.mark.skipif(shutil.which("redis-server") is None,
                       reason="redis-server is not installed (apt-get install -y redis-server)"),
    pytest.mark.skipif(find_spec("redis") is None, reason="the redis client is not installed (pip install redis)"),
    pytest.mark.slow,
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    """A redis-server of this module's own, in memory only."""
    port = _free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path_factory.mktemp("redis"))],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"redis-server did not answer on port {port} within 30 s")
        time.sleep(0.1)
    yield port
    server.terminate()
    server.wait(timeout=30)


def _remote(port: int) -> dict:
    return {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
            "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1", "TORCHINDUCTOR_REDIS_PORT": str(port)}


def _hits(run: dict) -> tuple[int, int]:
    return run["outcomes"]["aot_autograd"]["hit"], run["outcomes"]["fx_graph"]["hit"]


@pytest.mark.parametrize("plugin", [True, False], ids=["plugin", "stock"])
def test_a_new_host_hits_what_an_earlier_job_wrote(tmp_path, redis_port, plugin):
    """Job A fills the remote cache; job B, on a fresh local cache dir, hits
    every lookup there with the plugin and misses with stock."""
    first = run_fresh(tmp_path / "host_a", env=_remote(redis_port), program="tp_mlp", rank=3, plugin=plugin)
    assert _hits(first) == (0, 0)
    second = run_fresh(tmp_path / "host_b", env=_remote(redis_port), program="tp_mlp", rank=3, plugin=plugin)
    if plugin:
        assert _hits(second) == (1, FORWARD_AND_BACKWARD), second["outcomes"]
        # Served by the remote cache (the local dir was empty).
        assert second["compile_once"]["remote_hits"] >= 1
    else:
        assert _hits(second) == (0, 0), second["outcomes"]
    assert first["same_as_eager"] is not False and second["same_as_eager"] is not False


def test_an_unreachable_remote_cache_is_said_once(tmp_path):
    closed = _free_port()  # nothing listens there
    run = run_fresh(tmp_path, env=_remote(closed), program="reshard", rank=3)
    lines = [line for line in run["stderr"].splitlines() if "remote compile cache" in line]
    assert len(lines) == 1, run["stderr"][-3000:]
    assert f"redis://127.0.0.1:{closed} cannot be reached" in lines[0]
    assert run["same_as_eager"]
