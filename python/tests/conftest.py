import os
import sys

import numpy as np
import pytest

# every output the binding allocates starts as NaN: unwritten elements fail the checks
os.environ.setdefault("FLASHATTN_POISON", "1")

# reference.py and conftest's helpers sit beside the tests
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:  # the installed package, else the source tree this file belongs to
    import flashattn  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None


def pytest_report_header(config):
    import flashattn
    return (f"flashattn library: {flashattn.library_path()} "
            f"(version {flashattn.library_version()}, cpu: {flashattn.cpu_features()}, "
            f"cuda devices: {flashattn.cuda_device_count()})")


DTYPES = {"float32": np.float32, "float16": np.float16}
if ml_dtypes is not None:
    DTYPES["bfloat16"] = ml_dtypes.bfloat16

# one rounding unit of each storage type, for the error floor
UNIT = {"float32": None, "float16": 2.0**-11, "bfloat16": 2.0**-8}


@pytest.fixture
def rng(request):
    # fresh inputs every run; the seed is printed so a failure can be replayed
    seed = int(os.environ.get("FLASHATTN_TEST_SEED", 0)) or int.from_bytes(os.urandom(4), "little")
    print(f"FLASHATTN_TEST_SEED={seed}")
    return np.random.default_rng(seed)


@pytest.fixture(params=["auto", "reference"])
def backend(request):
    """Runs a test on the default backend and on the float64 reference."""
    import flashattn
    old = flashattn.get_backend()
    flashattn.set_backend(request.param)
    yield request.param
    flashattn.set_backend(old)
