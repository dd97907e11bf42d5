"""Benchmarks (not tests): side-by-side measurements reported as ratios. Run `python -m bench NAME`."""
