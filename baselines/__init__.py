"""Fixed (non-RL) policies with SB3's ``predict`` signature."""
