"""The demo: the embedded server, realistic tools, a fixed scenario and a live simulated fleet."""
