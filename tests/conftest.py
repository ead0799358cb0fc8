import os
import zlib

# Inductor's C++ backend probes each vector ISA the CPU lists by compiling and
# loading a test program, once per TORCHINDUCTOR_CACHE_DIR: about 13 s of
# compiler time in every fresh cache dir, and the cache tests spawn dozens of
# processes on fresh dirs (every rank of a compile-once world, every cold
# run). Trusting the CPU's own list builds the same kernels and asks the
# caches the same questions; set here, before torch is imported, so this
# process and every process it spawns use the same inductor config (part of
# the FX-graph cache key).
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402

import dynamo_dist  # noqa: E402
from dynamo_dist.testing import fake_world  # noqa: E402
from dynamo_dist.testing.strategies import register_profiles  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--slow-share", metavar="K/N[@SEED]", default=None,
        help="run every fast test and share K (0 <= K < N) of N of the tests marked slow: a test is in share "
             "crc32('SEED:' + its file's path) mod N (a file's slow tests go together, so a module's fixtures are "
             "built in one share only), so the N shares of one seed are disjoint and cover the slow tier, and "
             "another seed splits it another way. CI spreads the slow tier over its runs this way "
             "(tests/README.md, 'What CI runs').")


def _parse_share(text: str) -> tuple[int, int, str]:
    share, _, seed = text.partition("@")
    k, sep, n = share.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise pytest.UsageError(f"--slow-share {text!r}: expected K/N or K/N@SEED with 0 <= K < N, e.g. 0/2@1234")
    return int(k), int(n), seed


def pytest_collection_modifyitems(config, items):
    text = config.getoption("--slow-share")
    if not text:
        return
    k, n, seed = _parse_share(text)
    keep, drop = [], []
    for item in items:
        in_share = zlib.crc32(f"{seed}:{item.nodeid.split('::', 1)[0]}".encode()) % n == k
        (keep if in_share or item.get_closest_marker("slow") is None else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config):
    text = config.getoption("--slow-share")
    if text:
        k, n, seed = _parse_share(text)
        return f"slow tier: share {k} of {n} (seed {seed or 'none'}); the fast tier whole"


def pytest_configure(config):
    # The fuzz tests run under the project's hypothesis profiles (dynamo_dist-ci).
    register_profiles()
    if config.getoption("--slow-share"):
        _parse_share(config.getoption("--slow-share"))  # a bad share stops the run before collecting


# (world size, rank): sizes 1, 2, 4, 8; first and last rank.
WORLDS = [(1, 0), (2, 0), (2, 1), (4, 0), (4, 3), (8, 0), (8, 7)]


def mesh_shapes(world_size: int) -> list[tuple[int, ...]]:
    """1-D, 2-D and 3-D shapes that multiply to the world size."""
    shapes = [(world_size,)]
    for a in (1, 2, 4):
        if world_size % a == 0:
            shapes.append((a, world_size // a))
    if world_size >= 4:
        shapes.append((2, world_size // 4, 2))
    shapes.append((1, 1, world_size))
    return list(dict.fromkeys(shapes))


@pytest.fixture(params=WORLDS, ids=lambda w: f"w{w[0]}r{w[1]}")
def world(request):
    size, rank = request.param
    with fake_world(size, rank):
        yield size, rank


@pytest.fixture
def world8():
    with fake_world(8, 3):
        yield 8, 3


@pytest.fixture
def plugin():
    """dynamo_dist installed for one test, stock torch restored after."""
    dynamo_dist.install()
    try:
        yield
    finally:
        dynamo_dist.uninstall()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
