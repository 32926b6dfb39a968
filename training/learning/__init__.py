"""Demos and results of the learning-rate (FedEnt) and aggregation-weight (FedAdp) families."""
