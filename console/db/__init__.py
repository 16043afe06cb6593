"""Headless data layer: no Textual import here (tests/unit/test_layers.py enforces it)."""
