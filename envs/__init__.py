"""Gymnasium environments over the federated simulator."""
