"""The peaks a bundle's run.py measures, from its peak kernels' best times
(``profiling.runner.rates``: pure, no TVM)."""

from relaytrace.profiling.runner.rates import MAX_GBPS, implausible, peak_rates

KERNELS = [
    {"name": "fma", "dtype": "float32", "flops": 2e9, "bytes": 0},
    {"name": "copy", "dtype": "float32", "flops": 0, "bytes": 4e9},
]


def test_a_device_s_rates_are_kept_and_a_timer_s_fault_is_named():
    """run.py wrote peaks of 0 or 8e292 GB/s (a kernel timed at 0 s, or at a denormal)."""
    gflops, gbps = peak_rates(KERNELS, {"fma": 0.02, "copy": 0.2})
    assert gflops == {"float32": 100.0} and gbps == 20.0 and implausible(gflops, gbps) == ""
    gflops, gbps = peak_rates(KERNELS, {"fma": 0.02, "copy": 5e-303})
    assert gbps > MAX_GBPS and implausible(gflops, gbps) == f"{gbps:.3g} GB/s"
    assert implausible({"float32": 0.0}, 20.0) == "0 GFLOP/s (float32)"
    assert implausible({"float32": 100.0}, 0.0) == "0 GB/s"


def test_a_rate_under_one_gflops_is_printed_with_its_digits():
    """A float16 peak of 0.05 GFLOP/s (a CPU without float16 arithmetic) printed as 0.0."""
    from relaytrace.model.peaks import Peaks

    line = Peaks({"float32": 24.6, "float16": 0.05}, 10.0, "given", "by hand", "a CPU").line()
    assert "float32 24.6 GFLOP/s, float16 0.05 GFLOP/s" in line
