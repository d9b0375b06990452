"""Runs one of the GPU benchmark scripts on a machine without a GPU or
torch, against a stand-in for the parts of torch they use and for the
library's ctypes binding: calls take a few microseconds of host work and
CUDA events read the host clock. What it checks is the scripts' own logic
(arguments, the passes and their orders, the tables, the JSON), not any
figure.

    python3 bench/tests/torch_standin.py gpu_vs_torch|gpu_fp8|gpu_sustained [script arguments]

(gpu_sustained also runs nvidia-smi: the checks put a stand-in for it first
on the PATH.)
"""
import contextlib
import os
import sys
import time
import types

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


class Tensor:
    """Any tensor: every method the scripts call returns a tensor or a number."""

    def __init__(self, *shape, **kw):
        self.dtype = kw.get("dtype")

    transpose = detach = requires_grad_ = float = abs = max = t = to = lambda self, *a, **kw: self

    def __sub__(self, other):
        return self

    def item(self):
        return 0.0


class Event:
    """A CUDA event that reads the host clock."""

    def __init__(self, enable_timing=False):
        self.at = 0.0

    def record(self):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


CALLS = []  # every kernel call, by name (the checks read the order)


def call(name):
    def run(*a, **kw):
        CALLS.append(name)
        t = time.perf_counter() + 2e-6  # a call's few microseconds
        while time.perf_counter() < t:
            pass
        return Tensor()
    return run


def install():
    torch = types.ModuleType("torch")
    torch.__version__ = "stand-in"
    torch.bfloat16, torch.float32, torch.float8_e4m3fn = "bfloat16", "float32", "float8_e4m3fn"
    torch.device = lambda *a: "cuda"
    torch.Generator = lambda **kw: types.SimpleNamespace(manual_seed=lambda seed: None)
    for name in ("randn", "empty", "empty_like", "ones"):
        setattr(torch, name, lambda *a, **kw: Tensor(**kw))
    torch._scaled_mm = call("gemm")
    torch.cuda = types.SimpleNamespace(
        Event=Event, synchronize=lambda: None, get_device_name=lambda: "stand-in", empty_cache=lambda: None,
        current_stream=lambda: types.SimpleNamespace(cuda_stream=0))
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 0))
    torch.autograd = types.SimpleNamespace(grad=lambda *a, **kw: call("torch_bwd")())
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")
    attention = types.ModuleType("torch.nn.attention")
    backend = {}  # the backend sdpa_kernel selected

    @contextlib.contextmanager
    def sdpa_kernel(backends):
        backend["now"] = backends[0]
        yield

    functional.scaled_dot_product_attention = lambda *a, **kw: call(backend["now"])()
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="fa2", CUDNN_ATTENTION="cudnn")
    attention.sdpa_kernel = sdpa_kernel
    torch.nn, nn.functional, nn.attention = nn, functional, attention
    sys.modules.update({"torch": torch, "torch.nn": nn, "torch.nn.functional": functional,
                        "torch.nn.attention": attention})


class Library:
    """Stands in for gpu_vs_torch.FlashAttn (the library through ctypes). Its
    forward calls are named "ours", or "ours_b" for a library file named
    b.so (gpu_sustained --ab)."""

    def __init__(self, path, backend):
        self.name = "ours_b" if os.path.basename(path) == "b.so" else "ours"

    def use_current_stream(self):
        pass

    def fwd(self, *a):
        return call(self.name)

    def bwd(self, *a):
        return call("ours_bwd")


def main():
    script, sys.argv = sys.argv[1], [sys.argv[1]] + sys.argv[2:]
    install()
    sys.path.insert(0, BENCH)
    import gpu_vs_torch
    gpu_vs_torch.FlashAttn = Library
    module = gpu_vs_torch
    if script == "gpu_fp8":
        import gpu_fp8
        gpu_fp8.FlashAttn = Library
        module = gpu_fp8
    elif script == "gpu_sustained":
        import gpu_sustained  # reaches the library through gpu_vs_torch.FlashAttn
        module = gpu_sustained
    module.main()
    if os.environ.get("STANDIN_CALLS"):  # the order of the calls, for the checks
        with open(os.environ["STANDIN_CALLS"], "w") as f:
            f.write("\n".join(CALLS))


if __name__ == "__main__":
    main()
