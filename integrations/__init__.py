"""Optional integrations with other engines (each behind its own extra): Ray (``fl_gym.integrations.ray``)."""
