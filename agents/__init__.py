"""Building, saving and loading SB3 agents."""
