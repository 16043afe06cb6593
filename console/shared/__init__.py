"""Shared by every role: errors, settings, the clock, the rows that cross layers and the pure rules
that label them. No I/O beyond reading the environment, no Textual."""
