"""The selection family's demo section (``fl-gym demo``)."""
