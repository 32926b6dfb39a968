"""Fixed (non-RL) policies with SB3's ``predict`` signature, one module per env family.

A family lists its policies in its registry entry (:attr:`fl_gym.envs.registry.Family.policies`);
``fl-gym envs`` shows them.
"""
