"""Optional integrations with other engines, each behind its own extra.

Ray: ``fl_gym.integrations.ray`` and ``fl_gym.integrations.ray_federation``; Flower:
``fl_gym.integrations.flower``.
"""
