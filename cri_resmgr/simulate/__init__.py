"""Simulation."""
