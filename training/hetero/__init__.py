"""HAPFL's results (``fl-gym reproduce hetero``) and demo section (``fl-gym demo``)."""
