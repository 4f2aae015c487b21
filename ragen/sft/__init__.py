"""Supervised warm start from solver trajectories."""
