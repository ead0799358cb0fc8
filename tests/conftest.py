import os

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


def pytest_configure(config):
    # The fuzz tests run under the project's hypothesis profiles (dynamo_dist-ci).
    register_profiles()


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
