"""The ``fl-gym`` command line: training, comparison, benchmarks."""
