"""Soaks: one step under load for hours per setup, with events that ratchet memory up."""
